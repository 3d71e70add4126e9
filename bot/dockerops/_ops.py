"""Reconciler operations: dry run, gated real pass, status, daemon preflight (runbook §1).

This module runs the steps in order; the parts live beside it: reconciler access (``_reconciler``),
the records and the R1.2 gate (``_records``), and the wording (``_wording``).

Why it looks like this:
- The exec's argv comes only from the runbook config, as a list (no shell); the only thing added is
  ``RECONCILER_DRY_RUN``, on top of the container's own environment (R1.1, R1.3).
- A dry run and a real pass are rows written before the exec starts, so a crash mid-pass leaves a
  trace; every outcome is also a step in the hash-chained step log.
- A real pass needs a successful dry run of the same installation, recent enough, and it is one
  transaction that marks it reviewed and claims it, so a double click cannot run two passes on one
  review (R1.2).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import docker

from bot.clock import Clock, SystemClock
from bot.dockerops import _wording
from bot.dockerops._config import PROJECT_NAME, ReconcilerConfig
from bot.dockerops._engine import DockerClientFactory, client_host, connect, daemon_now, translate
from bot.dockerops._exec import ExecResult, run_exec
from bot.dockerops._reconciler import (
    PassLine,
    ReconcilerTarget,
    find_reconciler,
    last_pass_lines,
    read_status_file,
)
from bot.dockerops._records import ReconcilerRecords, checked_dryrun_id
from bot.errors import DockerOpsError
from bot.ids import IdKind, new_id
from bot.messages import Reply
from bot.store import Store
from bot.vocab import Step


class DockerOps:
    """The reconciler commands of one installation (``RECOVER_INSTALLATION`` = compose project)."""

    def __init__(
        self,
        store: Store,
        *,
        installation: str | None,
        config: ReconcilerConfig | None = None,
        docker_client_factory: DockerClientFactory = docker.from_env,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.installation = installation
        self.config = config or ReconcilerConfig()
        self.docker_client_factory = docker_client_factory
        self.clock: Clock = clock or SystemClock()
        self.records = ReconcilerRecords(store, self.config, self.clock)

    # -- plumbing ------------------------------------------------------------------------------

    def _project(self) -> str:
        if not self.installation:
            raise DockerOpsError(
                "RECOVER_INSTALLATION is not set: the bot does not know which installation's reconciler to use.",
                hint="Set it to the installation's compose project name (its compose project label).",
            )
        if not PROJECT_NAME.match(self.installation):
            raise DockerOpsError(
                f"RECOVER_INSTALLATION={self.installation!r} is not a compose project name "
                "(lower-case letters, digits, '-' and '_')."
            )
        return self.installation

    @contextmanager
    def _client(self) -> Iterator[tuple[docker.DockerClient, str]]:
        client = connect(self.docker_client_factory)
        try:
            yield client, client_host(client, self.docker_client_factory)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def find_reconciler(self, client: docker.DockerClient, host: str) -> ReconcilerTarget:
        """Exactly one running container with the project and service labels (R1.3), else an error."""
        return find_reconciler(client, host, self.config, self._project())

    # -- dry run (R1.1) ----------------------------------------------------------------------

    def dryrun(self, actor: str) -> Reply:
        """Exec the pass with ``RECONCILER_DRY_RUN=true`` and record it as ``dry_…`` (R1.1)."""
        project = self._project()
        cfg = self.config
        env = {cfg.dry_run_env: cfg.dry_value}
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            dry_id = new_id(IdKind.DRYRUN, self.store.installation)
            self.records.start_dryrun(dry_id, project, target.name, env, actor)
            result = self._exec(client, host, target, env, table="dryruns", row_id=dry_id, actor=actor)
        return _wording.dryrun_reply(cfg, dry_id, project, target, env, result)

    # -- real pass (R1.2) --------------------------------------------------------------------

    def reconcile(self, actor: str, dryrun_id: str) -> Reply:
        """The real pass, only on a recent, successful dry run of this installation (R1.2).

        Calling this *is* the review: ``actor`` is recorded as the reviewer (R1.2 asks for a review,
        not a second person, so the one who ran the dry run may review it).
        """
        dryrun_id = checked_dryrun_id(dryrun_id)
        project = self._project()
        cfg = self.config
        self.records.precheck(dryrun_id, project)  # refuse early, before touching Docker
        env = {cfg.dry_run_env: cfg.real_value}
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            pass_id = f"pass_{secrets.token_hex(6)}"
            self.records.claim_pass(pass_id, dryrun_id, project, target.name, env, actor)
            result = self._exec(
                client, host, target, env, table="passes", row_id=pass_id, actor=actor, dryrun_id=dryrun_id
            )
        return _wording.pass_reply(cfg, pass_id, dryrun_id, actor, project, target, env, result)

    # -- shared exec path ----------------------------------------------------------------------

    def _exec(
        self,
        client: docker.DockerClient,
        host: str,
        target: ReconcilerTarget,
        env: dict[str, str],
        *,
        table: str,
        row_id: str,
        actor: str,
        dryrun_id: str | None = None,
    ) -> ExecResult:
        """Run the configured argv, then complete the row and the step log in one transaction."""
        cfg = self.config
        step = Step.RECONCILER_DRYRUN if table == "dryruns" else Step.RECONCILER_PASS
        inputs: dict[str, Any] = {
            "id": row_id,
            "installation": self.installation,
            "container": target.name,
            "argv": list(cfg.argv),
            "environment": env,
        }
        if dryrun_id:
            inputs["dryrun_id"] = dryrun_id
        try:
            result = run_exec(
                client,
                target.name,
                list(cfg.argv),
                env,
                timeout=cfg.exec_timeout_seconds,
                output_cap=cfg.output_cap_bytes,
                host=host,
            )
        except DockerOpsError as exc:
            # Nothing ran (the exec could not be created or started).
            outcome = "not_started" if table == "passes" else "failed"
            self.records.finish(table, row_id, outcome, None, actor, step, inputs, {"error": str(exc)})
            raise
        if result.timed_out or result.container_gone:
            outcome = "unknown"
        else:
            outcome = "succeeded" if result.exit_code == 0 else "failed"
        detail: dict[str, Any] = {
            "exit_code": result.exit_code,
            "duration_ms": int(result.duration_s * 1000),
            "exec_id": result.exec_id,
            "pid": result.pid,
            "output_bytes": result.output_bytes,
        }
        if result.timed_out:
            detail["note"] = f"still running after {cfg.exec_timeout_seconds:g} s; the Docker API cannot stop it (R1.6)"
        if result.container_gone:
            detail["note"] = "the container went away during the exec"
        self.records.finish(table, row_id, outcome, result, actor, step, inputs, detail)
        if result.container_gone:
            raise DockerOpsError(
                f"The reconciler container {target.name} went away (stopped or removed) during the "
                f"{'dry run' if table == 'dryruns' else 'real pass'} {row_id} (exec {result.exec_id[:12]}): "
                "its outcome is unknown and was recorded as unknown.",
                hint="Check that the reconciler is running again; a later pass is safe (R1.6).",
            )
        return result

    # -- status (R1.4) -----------------------------------------------------------------------

    def status(self) -> Reply:
        """The status file as it is, plus the latest pass lines from the container's log (R1.4)."""
        project = self._project()
        cfg = self.config
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            status = read_status_file(client, host, cfg, target)
            completed, failed = last_pass_lines(client, host, cfg, target)
            now = daemon_now(client, host)
        return _wording.status_reply(cfg, project, target, status, completed, failed, now)

    def last_pass_lines(self) -> tuple[PassLine | None, PassLine | None]:
        """The latest completed and failed pass lines (R1.4), for diagnose's reconciler facts."""
        self._project()
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            return last_pass_lines(client, host, self.config, target)

    # -- preflight (R1.7) --------------------------------------------------------------------

    def preflight(self, minimum_major: int, advice: Sequence[str] = ()) -> Reply:
        """The daemon's version against the isolation runbook's minimum (R1.7), with deploy-order advice."""
        with self._client() as (client, host), translate("Reading the Docker daemon's version", host):
            version = client.api.version()
        return _wording.preflight_reply(version, minimum_major, advice)

    # -- records -------------------------------------------------------------------------------

    def get_dryrun(self, dryrun_id: str) -> dict[str, Any] | None:
        """A recorded dry run (for the router's history views and tests)."""
        return self.records.get_dryrun(dryrun_id)

    def get_pass(self, pass_id: str) -> dict[str, Any] | None:
        return self.records.get_pass(pass_id)

    def passes_for(self, dryrun_id: str) -> list[dict[str, Any]]:
        return self.records.passes_for(dryrun_id)
