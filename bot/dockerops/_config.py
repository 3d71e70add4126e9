"""What the bot needs to know about the reconciler and the workers, as plain values.

The runbook YAML (``runbooks/session-recovery.yaml``, ``reconciler:`` section) is the source of these
values; the runbook loader maps it onto these dataclasses. The defaults equal the documentation
(docs runbook §1, docs/control-host-api.md "Docker"), so a test or the demo can build one without YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_ARGV = ("bun", "run", "apps/control-host/src/main.ts", "reconciler", "--once")

CAUTION_DRY_RUN = (
    "Dry run: shows the reconciler's targets without writing anything. The repeating reconciler started "
    "by compose never receives this variable (R1.1)."
)
CAUTION_NOT_REMOVED = (
    "A successful reconciler pass does not mean containers were removed: the reconciler has no Docker "
    "socket and only writes the epoch fence and desired_state = terminated to the database; the "
    "scheduler removes containers and confirms they are gone (R1.5)."
)
CAUTION_OVERLAP_SAFE = (
    "Running this pass while the repeating reconciler runs is safe: overlapping passes re-check each "
    "write under a row lock, so no lease, interrupt or orphan is processed twice (R1.6)."
)

#: Compose project names: lower-case letters, digits, dashes and underscores (what compose accepts).
PROJECT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True)
class ReconcilerConfig:
    """How to find the reconciler, what to exec in it and how to read its results (R1.1–R1.6)."""

    project_label: str = "com.docker.compose.project"
    service_label: str = "com.docker.compose.service"
    service: str = "reconciler"
    status: str = "running"
    #: Compose's container name; the socket proxy pins exec to it (deploy/socket-proxy).
    name_pattern: str = "{project}-reconciler-{n}"
    #: The pass's argv, from the runbook only: nothing typed in chat ever reaches it (R1.1).
    argv: tuple[str, ...] = DEFAULT_ARGV
    dry_run_env: str = "RECONCILER_DRY_RUN"
    dry_value: str = "true"
    real_value: str = "false"
    #: A real pass needs a successful dry run at most this old (R1.2).
    review_window_seconds: int = 900
    #: An exec still running after this is reported as "outcome unknown" (it cannot be killed).
    exec_timeout_seconds: float = 300.0
    status_path: str = "/tmp/reconciler-status.json"  # noqa: S108 - a path inside the container
    completed_pattern: str = "Reconciler pass completed"
    failed_pattern: str = "Reconciler pass failed"
    #: How many of the container's last log lines ``status`` searches for pass lines.
    status_log_tail: int = 5000
    caution_dry_run: str = CAUTION_DRY_RUN
    caution_not_removed: str = CAUTION_NOT_REMOVED
    caution_overlap_safe: str = CAUTION_OVERLAP_SAFE
    #: Output longer than this many lines is summarised in the reply and attached whole.
    summary_lines: int = 20
    #: At most this much output is kept from one pass (the rest is counted, not stored).
    output_cap_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        # Tuples keep the argv immutable even when the runbook loader passes a list.
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))
        if not self.argv:
            raise ValueError("the reconciler argv must not be empty")
        if "{project}" not in self.name_pattern or "{n}" not in self.name_pattern:
            raise ValueError("name_pattern needs {project} and {n} (compose: <project>-reconciler-<n>)")

    def name_regex(self, project: str) -> re.Pattern[str]:
        """The container names this installation's reconciler may have."""
        head, _, tail = self.name_pattern.partition("{n}")
        before = re.escape(head.format(project=project))
        after = re.escape(tail.format(project=project))
        return re.compile(f"^{before}[0-9]+{after}$")

    def labels(self, project: str) -> list[str]:
        """The label filters that select the reconciler (R1.3)."""
        return [f"{self.project_label}={project}", f"{self.service_label}={self.service}"]


@dataclass(frozen=True)
class WorkerLogConfig:
    """How to find a session's worker containers and how much of their logs to read."""

    project_label: str = "com.docker.compose.project"
    service_label: str = "com.docker.compose.service"
    service: str = "worker"
    session_label: str = "control-host.session_id"
    #: Look back at most this far, measured on the Docker host's clock.
    window_seconds: int = 24 * 3600
    #: Stop after reading this many bytes over all containers of one session.
    byte_budget: int = 64 * 1024 * 1024

    def labels(self, project: str, session_id: str) -> list[str]:
        return [
            f"{self.project_label}={project}",
            f"{self.service_label}={self.service}",
            f"{self.session_label}={session_id}",
        ]
