"""The one composition root: every installation's core, its background parts and the fleet's router.

Why one: composition spread over several builders, finished by setting attributes on built objects (a
watcher on the bulk tools, a ladder runner on the decisions), let each front wire the core a little
differently. Here every part is built once, in order, from the settings and what the front can do
(:class:`FrontPorts`); nothing is attached afterwards. Slack, the console, the demo, the benches and
the tests all build through :func:`compose`.

Nothing here talks to the network at build time except the start-up replay of requests whose answer
was never recorded (the Idempotency-Key rule), and only with ``startup``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.app.bulk import Bulk
from bot.app.fleet import Fleet
from bot.app.fleet_router import FleetRouter
from bot.app.handoff import watch_handoff
from bot.app.router import Router
from bot.app.services import (
    MIGRATIONS,
    DockerReconcilerStatus,
    LoggingReporter,
    Services,
    api_paths,
    docker_endpoint,
    reconciler_config,
    worker_log_config,
)
from bot.clock import Clock, SystemClock
from bot.controlhost import ControlHostClient
from bot.decisions import ApproverDirectory, DecisionService, Notice
from bot.diagnosis.logcoverage import WorkerLogSource
from bot.diagnosis.service import POOL_QUEUE, POOL_WORKERS, Diagnoser
from bot.dockerops import DockerLogSource, DockerOps, client_factory
from bot.errors import SettingsError, StartupError, StoreError
from bot.escalation.runner import LadderPoster, LadderRunner
from bot.ids import DEFAULT_INSTALLATION
from bot.installations import InstallationSpec
from bot.installations.resolve import no_such_installation
from bot.installations.scoped import recovery_channels, scoped_settings
from bot.installations.sources import resolve_installations
from bot.installations.tags import TaggingNotice
from bot.logs import FileLogSource
from bot.messages import Reporter
from bot.runbook import RunbookSet, load_runbooks
from bot.runbook.escalation import EscalationSpec
from bot.runbook.installation import LimitSpec
from bot.sandbox import SandboxHandle
from bot.settings import Settings, reveal
from bot.store import Store, binding
from bot.store.leftover import default_leftovers
from bot.watch import ChannelMembers, Poster, Watcher
from bot.watch.docker_trigger import DockerTrigger
from bot.watch.watcher import Wakes
from bot.workpool import WorkPool

log = logging.getLogger(__name__)

#: A front's poster for one installation: (its name, whether what is said names it) → the poster.
#: ``named`` is False for today's single ``default`` installation, whose messages name none.
WatchPosterFor = Callable[[str, bool], Poster]
LadderPosterFor = Callable[[str, bool], LadderPoster]


@dataclass(frozen=True)
class FrontPorts:
    """What only a front can do, handed INTO composition: every installation's core gets it as it is
    built, never attached afterwards. Empty (the real console): break-glass is refused before anything
    is sent (nobody would be told), the ladder does not post and there is no watcher."""

    #: Break-glass's loud notice: posted to the request's channel and each approver before the send.
    notice: Notice | None = None
    #: Who the approvers are, read through the front's workspace (None: the settings' list only).
    directory: ApproverDirectory | None = None
    #: The escalation ladder's voice, per installation (None: its steps are not posted; remind answers).
    ladder_poster: LadderPosterFor | None = None
    #: Watch mode's voice, per installation (None: no watcher is built).
    watch_poster: WatchPosterFor | None = None
    #: Who is in the watch channel (pause and resume are theirs).
    members: ChannelMembers | None = None
    #: The watch channel instead of RECOVER_WATCH_CHANNEL (the demo: the console itself).
    watch_channel: str | None = None
    #: What makes the watcher poll when no loop runs it (the demo's console commands).
    watch_polls_on: str | None = None
    #: The ladder's times divided by this (the demo runs it faster than the runbook says).
    ladder_speedup: float = 1.0


@dataclass(frozen=True)
class Composed:
    """The router over every installation's core (a fleet of one for today's settings), the cores,
    and the background parts :meth:`start` runs: each watcher and each ladder runner that posts."""

    router: FleetRouter
    cores: dict[str, Services]
    watchers: dict[str, Watcher] = field(default_factory=dict)
    ladders: dict[str, LadderRunner] = field(default_factory=dict)
    #: The daemon threads :meth:`start` began (none until then).
    threads: list[threading.Thread] = field(default_factory=list, compare=False, repr=False)
    #: Set by :meth:`stop`: the periodic finishing of unfinished work ends.
    stopping: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def core(self, name: str = DEFAULT_INSTALLATION) -> Services:
        """One installation's core (the tests' and benches' way in; fronts go through the router)."""
        return self.cores[name]

    def start(self, reporter: Reporter | None = None) -> None:
        """Poll every watcher, run every ladder pass and finish every installation's unfinished work
        periodically, on daemon threads (serve's worker). Every worker may run them: the watch
        claims', the ladder's and the ``replay:``/``send:``/``batch:`` leases decide who acts."""
        for name, watcher in self.watchers.items():
            self._spawn(watcher.run, f"recover-watch-{name}")
        for name, runner in self.ladders.items():
            self._spawn(runner.run, f"recover-ladder-{name}")
        said = reporter or LoggingReporter()
        for name, router in self.router.routers.items():
            named = self.router.named_reporter(name, said)
            self._spawn(functools.partial(router.sweep_every, self.stopping, named), f"recover-replay-{name}")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self) -> None:
        """Ask every background part to end (they are daemon threads: nothing waits on them)."""
        for watcher in self.watchers.values():
            watcher.stop()
        for runner in self.ladders.values():
            runner.stopping.set()
        self.stopping.set()


def compose(
    settings: Settings,
    specs: Sequence[InstallationSpec] | None = None,
    *,
    ports: FrontPorts,
    sandboxes: Mapping[str, SandboxHandle] | None = None,
    clock: Clock | None = None,
    console_users_map: dict[str, str] | None = None,
    startup: bool = True,
    reporter: Reporter | None = None,
    default: str | None = None,
) -> Composed:
    """Every installation's core (``specs``; None: the installations file, or today's settings as the
    one installation ``default``), its watcher and ladder runner, and the fleet's router over them.

    ``sandboxes`` replaces an installation's control host by a running sandbox (the demo). With
    ``startup`` (the console, the tests), what a previous run left half-done is finished before this
    returns; a server passes ``startup=False`` and calls ``router.startup`` in the background, since
    a resumed wait may last minutes and must not delay readiness. ``default``: the installation a
    console run acts on when a command names none (``recover-bot console --install``).

    Raises :class:`bot.errors.RunbookError` for an invalid runbook (the bot refuses to start) and
    :class:`bot.errors.SettingsError` when a control host is not configured.
    """
    from_settings = specs is None and settings.installations_file is None
    if specs is None:
        specs = resolve_installations(settings)  # the file's, or today's settings as ``default``
    names = [s.name for s in specs]
    if not specs or len(set(names)) != len(names):
        raise SettingsError([f"installations: each needs a unique name (got {', '.join(names) or 'none'})"])
    if settings.db_url is not None and not from_settings:
        # One database would hold every installation's rows in one chain: a bare session id of one
        # could be read as another's. Each installation keeps a store of its own (a file each on SQLite).
        raise StartupError(
            "RECOVER_DB is a PostgreSQL URL, and several installations cannot share one PostgreSQL store yet: "
            "use a SQLite RECOVER_DB with the installations file (a file each), or run one bot per installation"
        )
    if default is not None and default not in names:  # refused before anything is built or opened
        raise no_such_installation(default, specs, lambda near: f"recover-bot console --install {near}")
    if not from_settings and DEFAULT_INSTALLATION not in names:
        leftover = default_leftovers(settings.db_path, names)  # rows nothing would serve any more
        if leftover:
            raise StartupError(leftover)
    named = names != [DEFAULT_INSTALLATION]  # today's bot: its messages name no installation
    demo = bool(sandboxes)
    cores: dict[str, Services] = {}
    routers: dict[str, Router] = {}
    watchers: dict[str, Watcher] = {}
    ladders: dict[str, LadderRunner] = {}
    for spec in specs:
        core = _core(
            settings,
            None if from_settings else spec,  # today's settings exactly as before (RECOVER_DB, …)
            sandbox=(sandboxes or {}).get(spec.name),
            clock=clock,
            console_users_map=console_users_map,
            ports=ports,
            named=named,
        )
        watcher = _watcher(core, ports, named)
        poster = ports.ladder_poster(core.installation, named) if ports.ladder_poster is not None else None
        # `/recover remind` runs the next step through this runner: it posts when the front can.
        ladder = LadderRunner(core.decisions.ctx, poster if core.runbooks.escalation is not None else None)
        cores[spec.name] = core
        routers[spec.name] = Router(core, watcher=watcher, ladder=ladder, demo=demo)
        if watcher is not None:
            watchers[spec.name] = watcher
        if ladder.poster is not None:
            ladders[spec.name] = ladder
    router = FleetRouter(Fleet(specs={s.name: s for s in specs}, cores=cores), routers, default)
    if startup:
        router.startup(reporter or LoggingReporter())
    return Composed(router=router, cores=cores, watchers=watchers, ladders=ladders)


def _core(
    settings: Settings,
    installation: InstallationSpec | None,
    *,
    sandbox: SandboxHandle | None,
    clock: Clock | None,
    console_users_map: dict[str, str] | None,
    ports: FrontPorts,
    named: bool,
) -> Services:
    """Wire the core of one installation (None: the one today's settings describe, ``default``)."""
    # The channel rule from the process's RECOVER_CHANNELS, narrowed by the installation's own list.
    channels = recovery_channels(settings, installation)
    if installation is not None:  # its own control host, key, engine and store file
        settings = scoped_settings(settings, installation)
    name = installation.name if installation is not None else DEFAULT_INSTALLATION
    runbooks = _sped_up(load_runbooks(settings.runbooks_dir), ports.ladder_speedup)
    clock = clock or (sandbox.clock if sandbox is not None else SystemClock())
    store = _open_store(settings, clock, name)
    api: dict[str, Any] = {
        "paths": api_paths(runbooks),
        "fields": dict(runbooks.api.fields) if runbooks.api is not None else {},
    }
    if sandbox is not None:
        url, key = sandbox.url, sandbox.api_key
    else:
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
    notice = ports.notice
    if notice is not None and named:  # a named installation's notices name it, as its replies do
        notice = TaggingNotice(notice, name)
    decisions = DecisionService(
        store=store,
        client=client,
        runbooks=runbooks,
        diagnoser=diagnoser,
        clock=clock,
        approvers=settings.approvers,
        channels=channels,
        directory=ports.directory,
        console_users=dict(settings.console_users) if console_users_map is None else console_users_map,
        notice=notice,
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
        installation=name,
    )


def _watcher(core: Services, ports: FrontPorts, named: bool) -> Watcher | None:
    """Watch mode over the core's parts, when the front can post (its watch poster), a watch channel is
    set (the front's, else RECOVER_WATCH_CHANNEL) and a runbook has a ``watch:`` section: the paced
    bulk client and its triage, diagnose's own Diagnoser, the hand-off's own digest."""
    settings = core.settings
    channel = ports.watch_channel or settings.watch_channel
    if ports.watch_poster is None or channel is None or core.runbooks.watch is None or core.bulk is None:
        return None
    project = settings.compose_project
    trigger = None
    if project and docker_endpoint(settings).configured:
        factory, config = core.dockerops.docker_client_factory, worker_log_config(core.runbooks)

        def trigger(watcher: Watcher) -> DockerTrigger:
            # The Docker engine is configured: a worker's die/stop wakes the watcher at once.
            return DockerTrigger(watcher, factory, project, config=config)

    return Watcher(
        client=core.bulk.client,
        diagnoser=core.diagnoser,
        triage=core.bulk.triage,
        store=core.store,
        runbooks=core.runbooks,
        clock=core.clock,
        poster=ports.watch_poster(core.installation, named),
        channel=channel,
        installation=project or "default",
        interval=settings.watch_interval,
        handoff=watch_handoff(core),
        members=ports.members,
        console_users=core.decisions.console_users,
        wakes=Wakes(trigger=trigger, polls_on=ports.watch_polls_on),
    )


def _sped_up(runbooks: RunbookSet, factor: float) -> RunbookSet:
    """The runbooks with the ladder's times divided by ``factor`` (before anything reads them, so every
    request gets the short times); the same set for 1."""
    if factor == 1 or runbooks.escalation is None:
        return runbooks
    return dataclasses.replace(runbooks, escalation=_scaled(runbooks.escalation, factor))


def _scaled(spec: EscalationSpec, factor: float) -> EscalationSpec:
    """The same ladder with every time divided by ``factor`` (steps, expiry, remind interval)."""

    def limit(value: LimitSpec) -> LimitSpec:
        return value.model_copy(update={"duration": float(value.duration or 0) / factor})

    steps = [step.model_copy(update={"after": limit(step.after)}) for step in spec.steps]
    return spec.model_copy(
        update={"steps": steps, "expiry": limit(spec.expiry), "remind_interval": limit(spec.remind_interval)}
    )


def _demo_log_file(sandbox: SandboxHandle, folder: Path) -> Path:
    """The demo's worker logs: every scenario's lines in one file, read through the file source."""
    path = folder / "demo-worker.log"
    now = sandbox.clock.now()
    with path.open("w", encoding="utf-8") as out:
        for scenario in sandbox.scenarios.values():
            for line in scenario.worker_log_lines(now):
                out.write(line.render(timestamp=True) + "\n")
    return path


def _open_store(settings: Settings, clock: Clock, installation: str = DEFAULT_INSTALLATION) -> Store:
    """The installation's step store, or one line naming RECOVER_DB when it cannot be opened (not a traceback)."""
    path = settings.db_path  # already the installation's own file (scoped_settings: store_path)
    try:
        settings.db_path.parent.mkdir(parents=True, exist_ok=True)
        return Store(
            settings.store_target,  # the file, or the postgresql:// URL (RECOVER_DB, RECOVER_DB_FILE)
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


__all__ = ["Composed", "FrontPorts", "LadderPosterFor", "WatchPosterFor", "compose"]
