"""Builds the core from settings: runbooks, store, control-host client, diagnosis, decisions, Docker.

The one place where the parts are wired together, so the Slack app, the console and the tests all get
the same core. Nothing here talks to the network at build time except the start-up replay of
requests whose answer was never recorded (the Idempotency-Key rule).
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlite_utils.migrations import Migrations

from bot.batch.store import migrations as batch_migrations
from bot.bulk import Bulk
from bot.clock import Clock, SystemClock, isoformat
from bot.controlhost import ApiPaths, ControlHostClient
from bot.decisions import ApproverDirectory, DecisionService, Notice
from bot.decisions import migrations as decision_migrations
from bot.diagnosis.logcoverage import WorkerLogSource
from bot.diagnosis.model import ReconcilerStatus
from bot.diagnosis.service import POOL_QUEUE, POOL_WORKERS, Diagnoser
from bot.dockerops import (
    DockerEndpoint,
    DockerLogSource,
    DockerOps,
    ReconcilerConfig,
    WorkerLogConfig,
    client_factory,
)
from bot.dockerops import migrations as dockerops_migrations
from bot.errors import StartupError, StoreError
from bot.escalation.store import migrations as escalation_migrations
from bot.installations import DEFAULT_INSTALLATION, InstallationSpec
from bot.installations.scoped import recovery_channels, scoped_settings
from bot.installations.sources import refuse_file_in_single_core
from bot.logs import FileLogSource
from bot.messages import Message
from bot.runbook import RunbookSet, load_runbooks
from bot.sandbox import SandboxHandle
from bot.settings import Settings, reveal
from bot.store import Store, binding
from bot.triage.store import migrations as triage_migrations
from bot.watch import ChannelMembers, Poster, Watcher
from bot.watch import migrations as watch_migrations
from bot.watch.docker_trigger import DockerTrigger
from bot.watch.shifts import HandoffSource
from bot.workpool import WorkPool

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
    """The core's parts, built once per process."""

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


@dataclass(frozen=True)
class FrontPorts:
    """What only a front can do, handed INTO composition (every installation's core gets it at build
    time, never attached afterwards). Empty: a front that cannot post, such as the console, where
    break-glass is then refused before anything is sent (nobody would be told)."""

    #: Break-glass's loud notice: posted to the request's channel and each approver before the send.
    notice: Notice | None = None


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


def _demo_log_file(sandbox: SandboxHandle, folder: Path) -> Path:
    """The demo's worker logs: every scenario's lines in one file, read through the file source."""
    path = folder / "demo-worker.log"
    now = sandbox.clock.now()
    with path.open("w", encoding="utf-8") as out:
        for scenario in sandbox.scenarios.values():
            for line in scenario.worker_log_lines(now):
                out.write(line.render(timestamp=True) + "\n")
    return path


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


def console_users(settings: Settings) -> dict[str, str]:
    """RECOVER_CONSOLE_USERS: console login → Slack user id (people are compared by that id)."""
    return dict(settings.console_users)


def _open_store(settings: Settings, clock: Clock, installation: str = DEFAULT_INSTALLATION) -> Store:
    """The installation's step store, or one line naming RECOVER_DB when it cannot be opened (not a traceback)."""
    path = settings.db_path  # already the installation's own file (scoped_settings: store_path)
    try:
        settings.db_path.parent.mkdir(parents=True, exist_ok=True)
        return Store(
            settings.store_target,
            clock=clock,
            migrations=MIGRATIONS,
            audit_key=settings.audit_key_bytes(),
            installation=installation,
        )
    except (OSError, sqlite3.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StartupError(
            f"RECOVER_DB: cannot open the step store {path} ({reason}); "
            "point RECOVER_DB at a writable SQLite file (it is created if missing)"
        ) from None


def _diagnose_pool(installation: InstallationSpec | None) -> WorkPool | None:
    """A named installation's diagnose pool is its own and says whose it is on ``/healthz``."""
    if installation is None:
        return None
    return WorkPool(f"diagnose {installation.name}", workers=POOL_WORKERS, queue=POOL_QUEUE)


def _bind(store: Store, client: ControlHostClient, *, sandbox: bool) -> None:
    """Record (first start) or check the store's binding to its installation and control host
    (bot/store/binding.py); another's store, or another host, is refused in one line. The sandbox
    starts on a new address and key each time: its store is re-bound, and that is recorded."""
    try:
        binding.bind(store, client.identity.base_url, client.identity.key_sha256, rebind=sandbox)
    except StoreError as exc:
        raise StartupError(exc.message) from None


def build_services(
    settings: Settings,
    *,
    sandbox: SandboxHandle | None = None,
    directory: ApproverDirectory | None = None,
    clock: Clock | None = None,
    console_users_map: dict[str, str] | None = None,
    installation: InstallationSpec | None = None,
    ports: FrontPorts | None = None,
) -> Services:
    """Wire the core of one installation (``installation``; None: the one today's settings describe,
    ``default``). ``sandbox`` (a running :class:`bot.sandbox.SandboxHandle`) replaces the control host.
    ``ports``: what the front can do for the core (its break-glass notice poster).

    Raises :class:`bot.errors.RunbookError` for an invalid runbook (the bot refuses to start) and
    :class:`bot.errors.SettingsError` when the control host is not configured.
    """
    # The channel rule from the process's RECOVER_CHANNELS, narrowed by the installation's own list.
    channels = recovery_channels(settings, installation)
    if installation is not None:  # its own control host, key, engine and store file
        settings = scoped_settings(settings, installation)
    runbooks = load_runbooks(settings.runbooks_dir)
    clock = clock or (sandbox.clock if sandbox is not None else SystemClock())
    store = _open_store(settings, clock, installation.name if installation is not None else DEFAULT_INSTALLATION)
    api: dict[str, Any] = {
        "paths": api_paths(runbooks),
        "fields": dict(runbooks.api.fields) if runbooks.api is not None else {},
    }
    if sandbox is not None:
        url, key = sandbox.url, sandbox.api_key
    else:
        refuse_file_in_single_core(settings)
        settings.require_control_host()
        api_key = reveal(settings.control_host_api_key)
        assert settings.control_host_url and api_key
        url, key = settings.control_host_url, api_key
    client = ControlHostClient(url, key, store=store, clock=clock, **api)
    _bind(store, client, sandbox=sandbox is not None)

    docker_factory = client_factory(docker_endpoint(settings, installation))
    dockerops = DockerOps(
        store,
        installation=settings.compose_project,
        config=reconciler_config(runbooks),
        docker_client_factory=docker_factory,
        clock=clock,
    )
    log_source: WorkerLogSource | None = None
    if settings.log_files:
        log_source = FileLogSource(settings.log_files)
    elif sandbox is not None:
        log_source = FileLogSource(str(_demo_log_file(sandbox, settings.db_path.parent)))
    elif settings.compose_project:
        log_source = DockerLogSource(
            installation=settings.compose_project,
            config=worker_log_config(runbooks),
            docker_client_factory=docker_factory,
        )
    status_source = DockerReconcilerStatus(dockerops) if settings.compose_project else None

    diagnoser = Diagnoser(
        client=client,
        runbooks=runbooks,
        store=store,
        log_source=log_source,
        reconciler_status=status_source,
        clock=clock,
        pool=_diagnose_pool(installation),
    )
    decisions = DecisionService(
        store=store,
        client=client,
        runbooks=runbooks,
        diagnoser=diagnoser,
        clock=clock,
        approvers=settings.approvers,
        channels=channels,
        directory=directory,
        console_users=console_users(settings) if console_users_map is None else console_users_map,
        notice=(ports or FrontPorts()).notice,
    )
    bulk = Bulk.build(
        url,
        key,
        store=store,
        clock=clock,
        runbooks=runbooks,
        api=api,
        log_source=log_source,
        decisions=decisions,
        csv_dir=settings.db_path.parent / "batches",
    )
    return Services(
        bulk=bulk,
        settings=settings,
        runbooks=runbooks,
        store=store,
        client=client,
        diagnoser=diagnoser,
        decisions=decisions,
        dockerops=dockerops,
        clock=clock,
        installation=installation.name if installation is not None else DEFAULT_INSTALLATION,
    )


def build_watcher(
    services: Services,
    poster: Poster,
    *,
    channel: str | None = None,
    members: ChannelMembers | None = None,
    handoff: HandoffSource | None = None,
) -> Watcher | None:
    """Watch mode over the core's parts (RECOVER_WATCH_CHANNEL set and a runbook ``watch:`` section):
    the paced bulk client and its triage, diagnose's own Diagnoser; one installation, a parameter."""
    settings = services.settings
    channel = channel or settings.watch_channel
    if channel is None or services.runbooks.watch is None or services.bulk is None:
        return None
    watcher = Watcher(
        client=services.bulk.client,
        diagnoser=services.diagnoser,
        triage=services.bulk.triage,
        store=services.store,
        runbooks=services.runbooks,
        clock=services.clock,
        poster=poster,
        channel=channel,
        installation=settings.compose_project or "default",
        interval=settings.watch_interval,
        handoff=handoff,  # bot/handoff.py's parts (it sits above this wiring): passed by the front
        members=members,
        console_users=services.decisions.console_users,
    )
    if settings.compose_project and docker_endpoint(settings).configured:
        # The Docker engine is configured: a worker's die/stop wakes the watcher at once.
        watcher.trigger = DockerTrigger(
            watcher,
            services.dockerops.docker_client_factory,
            settings.compose_project,
            config=worker_log_config(services.runbooks),
        )
    return watcher


__all__ = [
    "DockerReconcilerStatus",
    "FrontPorts",
    "LoggingReporter",
    "Services",
    "build_services",
    "build_watcher",
    "docker_endpoint",
    "reconciler_config",
    "worker_log_config",
]
