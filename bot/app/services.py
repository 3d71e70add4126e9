"""One installation's core as a value (:class:`Services`), and the plain configuration its parts read.

The parts are built in one place, :func:`bot.app.compose.compose`; this module holds what that
composition reads from the settings and runbooks (the API paths, the reconciler's and worker logs'
configuration, the Docker endpoint) and the core areas' migrations.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from sqlite_utils.migrations import Migrations

from bot.app.bulk import Bulk
from bot.batch.store import migrations as batch_migrations
from bot.clock import Clock, isoformat
from bot.controlhost import ApiPaths, ControlHostClient
from bot.decisions import DecisionService
from bot.decisions import migrations as decision_migrations
from bot.diagnosis.model import ReconcilerStatus
from bot.diagnosis.service import Diagnoser
from bot.dockerops import (
    DockerEndpoint,
    DockerOps,
    ReconcilerConfig,
    WorkerLogConfig,
)
from bot.dockerops import migrations as dockerops_migrations
from bot.escalation.store import migrations as escalation_migrations
from bot.ids import DEFAULT_INSTALLATION
from bot.installations import InstallationSpec
from bot.messages import Message
from bot.runbook import RunbookSet
from bot.settings import Settings
from bot.store import Store
from bot.triage.store import migrations as triage_migrations
from bot.watch import migrations as watch_migrations

log = logging.getLogger(__name__)

# The core areas' tables, each area's own migration set, applied after the store's own set. A front
# that keeps tables of its own (the Slack app) passes its set as well (Store.migrate).
MIGRATIONS: tuple[Migrations, ...] = (
    dockerops_migrations,
    decision_migrations,
    triage_migrations,
    batch_migrations,
    watch_migrations,
    escalation_migrations,
)


@dataclass
class Services:
    """One installation's core parts, built once per process by :func:`bot.app.compose.compose`."""

    settings: Settings
    runbooks: RunbookSet
    store: Store
    client: ControlHostClient
    diagnoser: Diagnoser
    decisions: DecisionService
    dockerops: DockerOps
    clock: Clock
    bulk: Bulk | None = None  # triage and batches over a paced client
    installation: str = DEFAULT_INSTALLATION  # the installation this core serves (one core each)


class LoggingReporter:
    """Reports of start-up work go to the log (front ends show the returned reply as well)."""

    def progress(self, message: Message) -> None:
        log.info("%s", message.plain_text())

    def post(self, message: Message) -> None:
        log.info("%s", message.plain_text())


class DockerReconcilerStatus:
    """diagnose's view of the reconciler (R1.4): the last pass line, read through DockerOps."""

    def __init__(self, ops: DockerOps) -> None:
        self.ops = ops

    def read_status(self) -> ReconcilerStatus:
        completed, failed = self.ops.last_pass_lines()
        latest = None
        for line in (completed, failed):
            if line is not None and (latest is None or (line.at and latest.at and line.at > latest.at)):
                latest = line
        if latest is None:
            return ReconcilerStatus(last_pass=None, last_pass_at=None, raw=None)
        return ReconcilerStatus(last_pass=latest.kind, last_pass_at=isoformat(latest.at), raw=latest.text)


def api_paths(runbooks: RunbookSet) -> ApiPaths:
    """The runbook's ``api:`` read paths for the client (defaults: docs/control-host-api.md's paths)."""
    if runbooks.api is None:
        return ApiPaths()
    paths = runbooks.api.model_dump(exclude={"fields"})
    return dataclasses.replace(ApiPaths(), **paths)


def reconciler_config(runbooks: RunbookSet) -> ReconcilerConfig:
    """The runbook's ``reconciler:`` section as DockerOps' plain configuration (R1.1–R1.6)."""
    spec = runbooks.reconciler
    if spec is None:
        return ReconcilerConfig()
    sel = spec.container
    cautions = dict(spec.cautions or {})
    kwargs: dict[str, Any] = {
        "project_label": sel.project_label,
        "service_label": sel.service_label,
        "service": sel.service,
        "status": sel.status,
        "name_pattern": sel.name_pattern,
        "argv": tuple(spec.argv),
        "dry_run_env": spec.env_var,
        "dry_value": spec.dry_value,
        "real_value": spec.real_value,
        "review_window_seconds": int(runbooks.reconciler_review_window()),
        "exec_timeout_seconds": float(runbooks.reconciler_exec_timeout()),
        "status_path": spec.status_file,
        "completed_pattern": spec.pass_patterns.completed,
        "failed_pattern": spec.pass_patterns.failed,
    }
    # The runbook's dry-run caution replaces ours; the real pass keeps its two separate cautions
    # (R1.5 not removed, R1.6 overlap safe), which the bot shows at different moments.
    if "dry_run" in cautions:
        kwargs["caution_dry_run"] = cautions["dry_run"]
    return ReconcilerConfig(**kwargs)


def worker_log_config(runbooks: RunbookSet) -> WorkerLogConfig:
    spec = runbooks.workers
    kwargs: dict[str, Any] = {}
    if spec is not None:
        kwargs = {
            "project_label": spec.project_label,
            "service_label": spec.service_label,
            "service": spec.service,
            "session_label": spec.session_label,
        }
    if "log_window" in runbooks.limits:
        kwargs["window_seconds"] = int(runbooks.limit("log_window"))
    if "log_byte_budget" in runbooks.limits:
        kwargs["byte_budget"] = runbooks.limit_int("log_byte_budget")
    return WorkerLogConfig(**kwargs)


def docker_endpoint(settings: Settings, installation: InstallationSpec | None = None) -> DockerEndpoint:
    """The installation's engine: an installations file entry's ``docker_host`` with its TLS files, or
    the single installation's DOCKER_HOST with DOCKER_TLS_VERIFY / DOCKER_CERT_PATH."""
    if installation is not None and installation.docker_host is not None:
        tls = installation.docker_tls
        return DockerEndpoint(
            installation.docker_host,
            tls_ca=tls.ca if tls else None,
            tls_cert=tls.cert if tls else None,
            tls_key=tls.key if tls else None,
            allow_plain_tcp=settings.docker_plain_tcp,
            origin=installation.origin,
        )
    return DockerEndpoint.from_environment(
        settings.docker_host,
        tls_verify=settings.docker_tls_verify,
        cert_path=settings.docker_cert_path,
        allow_plain_tcp=settings.docker_plain_tcp,
    )


__all__ = [
    "MIGRATIONS",
    "DockerReconcilerStatus",
    "LoggingReporter",
    "Services",
    "api_paths",
    "docker_endpoint",
    "reconciler_config",
    "worker_log_config",
]
