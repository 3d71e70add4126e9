"""The worker process of ``recover-bot serve``: claims queued deliveries and does the work behind them.

Why a process of its own: rendering, routing and posting to Slack for the commands just acked held
the interpreter while the next acks waited (measured in bench/ack_latency.py). The serving process now
only checks, commits to the inbox and acks; this process runs the router, the core and every Web API
call, plus what a whole bot does once (start-up replays, the expiry sweeper).

Started by :class:`bot.slack.supervisor.WorkerSupervisor` as ``python -m bot.slack.worker``: its
first stdin line is the settings (JSON, secrets included: never on the command line or in the
environment of other processes), each later line a wake-up for a new item; end of input (the serving
process is gone) or SIGTERM stops it. Between wake-ups it polls the inbox once a second (items from
another serving process on the same store, a lost wake-up), beats every 2 s, and takes over the
claims of dead workers as ``interrupted`` (see :mod:`bot.slack.inbox`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from bot.logsetup import configure_logging
from bot.settings import Settings
from bot.slack import fleet_health, queued
from bot.slack.app import SlackBot
from bot.slack.background import BackgroundWork
from bot.slack.delivery import ThreadBook
from bot.slack.inbox import Inbox, Item
from bot.slack.ladder import attach_ladder
from bot.slack.state import SlackState, slack_migrations
from bot.slack.watching import attach_watches, cores_of
from bot.slack.web import SlackOut
from bot.store import Store

if TYPE_CHECKING:
    from slack_sdk import WebClient

    from bot.clock import Clock
    from bot.fleet_router import FleetRouter

log = logging.getLogger("recover_bot.slack.worker")

#: The worker yields the CPU to the acking process (Slack's 3 s, trigger_id's 3 s) under load; its
#: own budgets are seconds long. Linux's scheduler gives nice 0 about 3× the share of nice 5.
NICE = 5
BEAT_SECONDS = 2.0
POLL_SECONDS = 1.0


class InboxRunner:
    """Claims items up to the number of free work threads and runs them on the bot's work pool."""

    def __init__(self, bot: SlackBot, inbox: Inbox, worker_id: str, *, slots: int = 8) -> None:
        self.bot = bot
        self.inbox = inbox
        self.worker_id = worker_id
        self.slots = slots
        self.running = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Until ``stop``: beat, take orphans, claim and run. Returns with nothing newly claimed."""
        self.inbox.beat(self.worker_id)  # before any claim: a claim of a known worker can be taken over
        beater = threading.Thread(target=self._beat, args=(stop,), name="recover-beat", daemon=True)
        beater.start()
        self.take_orphans()
        while not stop.is_set():
            with self._lock:
                free = self.slots - self.running
            items = self.inbox.claim(self.worker_id, limit=free) if free > 0 else []
            for item in items:
                with self._lock:
                    self.running += 1
                self.bot.work.submit(self._run, item)
            if len(items) < free or free <= 0:
                self._wake.wait(POLL_SECONDS)
                self._wake.clear()
        beater.join(timeout=BEAT_SECONDS + 1)

    def _run(self, item: Item) -> None:
        try:
            queued.run_claimed(self.bot, self.inbox, self.worker_id, item)
        finally:
            with self._lock:
                self.running -= 1
            self._wake.set()

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(BEAT_SECONDS):
            try:
                self.inbox.beat(self.worker_id)
                self.take_orphans()
            except Exception as exc:  # noqa: BLE001 - a busy store now and then: beat again later
                log.warning("worker heartbeat failed: %s", type(exc).__name__)
            publish_health(self.bot)

    def take_orphans(self) -> list[Item]:
        """Items a dead worker was running: marked interrupted (not re-run), their people told."""
        orphans = self.inbox.take_orphans()
        for item in orphans:
            log.warning("queued delivery %d was running in a worker that died: interrupted, not re-run", item.id)
            self.bot.ui.submit(queued.tell_interrupted, self.bot.out, item)
        return orphans


def publish_health(bot: SlackBot) -> None:
    """Each installation's figures for ``/healthz`` (the serving process reads them)."""
    try:
        fleet_health.publish({c.installation: c for c in cores_of(bot.router)}, fleet_health.health_path(bot.settings))
    except Exception as exc:  # noqa: BLE001 - figures are best effort: the next beat writes them again
        log.warning("installation health not written: %s", type(exc).__name__)


def slack_fleet_router(settings: Settings, client: WebClient, *, clock: Clock | None = None) -> FleetRouter:
    """The core as the Slack front composes it: one core per installation (today's settings: the one
    installation `default`), approvers read through Slack, and the front's ports handed in as each core
    is built (break-glass's loud notice posted through this client, in every installation)."""
    from bot.fleet_router import build_fleet_router  # the core: only the worker needs it at start
    from bot.services import FrontPorts
    from bot.slack.notice import SlackNotice
    from bot.slack.web import approver_directory

    ports = FrontPorts(notice=SlackNotice(SlackOut(client)))
    return build_fleet_router(settings, directory=approver_directory(settings, client), clock=clock, ports=ports,
                              startup=False)


def worker_bot(settings: Settings, store: Store) -> SlackBot:
    """The Slack front end's work side: the real router, the Web API client, no Bolt app."""
    from bot.slack.web import make_client

    client = make_client(settings)
    router = slack_fleet_router(settings, client)
    store.migrate([slack_migrations])  # the Slack front's own tables, beside the core's
    out = SlackOut(client)
    state = SlackState(store)
    return SlackBot(
        settings=settings,
        router=router,
        client=client,
        out=out,
        state=state,
        threads=ThreadBook(state, out),
        work=BackgroundWork(8, "recover-work"),
        ui=BackgroundWork(4, "recover-ui"),
        inbox=Inbox(store),
    )


def _watch_input(stream: TextIO, runner: InboxRunner, stop: threading.Event) -> None:
    for _ in stream:
        runner.wake()
    stop.set()  # the serving process is gone (or closed our input to stop us)
    runner.wake()


def main(stream: TextIO | None = None) -> int:
    stream = stream or sys.stdin
    with contextlib.suppress(OSError):
        os.nice(NICE)
    try:
        config = json.loads(stream.readline() or "{}")
        settings = Settings(**config["settings"])
    except (ValueError, KeyError, TypeError) as exc:
        # Never the error's text: a validation error quotes the values, secrets included.
        print(f"recover-bot worker: no usable settings on stdin ({type(exc).__name__})", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    store = Store(settings.db_path, audit_key=settings.audit_key_bytes())
    bot = worker_bot(settings, store)
    assert bot.inbox is not None
    runner = InboxRunner(bot, bot.inbox, str(config["worker"]), slots=8)
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()
        runner.wake()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    threading.Thread(target=_watch_input, args=(stream, runner, stop), name="recover-wake", daemon=True).start()
    bot.start_sweeper()
    bot.work.submit(bot.run_startup)
    watchers = attach_watches(bot)  # each installation's watch channel: watch mode here
    ladder = attach_ladder(bot.router, bot.out, bot.state)  # the escalation ladder's due steps
    try:
        runner.run(stop)
    finally:
        for watcher in watchers:
            watcher.stop()
        if ladder is not None:
            ladder.stopping.set()
        bot.close()  # waits for the items already running
    return 0


if __name__ == "__main__":
    sys.exit(main())
