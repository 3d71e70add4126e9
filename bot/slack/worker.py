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
import itertools
import json
import logging
import os
import signal
import sys
import threading
from collections import Counter, deque
from collections.abc import Mapping
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from bot.logsetup import configure_logging
from bot.settings import Settings
from bot.slack import fleet_health, queued
from bot.slack.app import SlackBot
from bot.slack.background import BackgroundWork
from bot.slack.delivery import ThreadBook
from bot.slack.inbox import Inbox, Item
from bot.slack.state import SlackState, slack_migrations
from bot.slack.unsaid import unsaid_look
from bot.slack.web import SlackOut
from bot.store import Store

if TYPE_CHECKING:
    from bot.app.compose import Composed
    from bot.app.services import Services

log = logging.getLogger("recover_bot.slack.worker")

#: The worker yields the CPU to the acking process (Slack's 3 s, trigger_id's 3 s) under load; its
#: own budgets are seconds long. Linux's scheduler gives nice 0 about 3× the share of nice 5.
NICE = 5
BEAT_SECONDS = 2.0
POLL_SECONDS = 1.0


#: The lane of the work no one installation owns (App Home, help, `installations`, `triage --all`,
#: rows that are not deliveries, commands that name no installation): a budget of its own.
SHARED = ""
#: Queued rows read per pass (each is parsed once, to find its installation, then kept in memory).
READ_BATCH = 256


class InboxRunner:
    """Claims queued items into per-installation lanes and runs each lane on its own work pool.

    Why lanes (isolation by construction): a control host that accepts and never
    answers holds each command on it to its deadline (seconds). Claimed oldest-first into one set of
    slots, such commands filled every slot and every other installation's commands queued behind
    them (another installation's `diagnose` took 10.1 s instead of 1.0 s). Each installation now has
    ``slots`` of its own and its own threads, the shared work another ``slots``, and a claim takes the
    oldest items only of the lanes with room: one installation's queue never blocks another's.

    An item's installation is found before it is claimed, by the router's own resolution (parsing
    only, see :func:`bot.slack.queued.installation_of`): no core runs and nothing is sent for it.
    """

    def __init__(
        self,
        bot: SlackBot,
        inbox: Inbox,
        worker_id: str,
        *,
        slots: int = 8,
        lanes: queued.Lanes | None = None,
        cores: Mapping[str, Services] | None = None,
    ) -> None:
        self.bot = bot
        self.cores = dict(cores or {})  # each installation's, for ``/healthz`` (none for a stand-in)
        self.inbox = inbox
        self.worker_id = worker_id
        self.slots = slots
        self.lanes = lanes
        self.running: Counter[str] = Counter()  # items running, per lane
        self._waiting: dict[str, deque[Item]] = {}  # read, not yet claimed, per lane, oldest first
        self._read_up_to = 0  # the highest inbox id read so far (ids only grow)
        self._pools: dict[str, BackgroundWork] = {SHARED: bot.work}
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def lane_of(self, item: Item) -> str:
        if self.lanes is None:
            return SHARED
        return queued.installation_of(item, self.lanes) or SHARED

    def run(self, stop: threading.Event) -> None:
        """Until ``stop``: beat, take orphans, claim and run. Returns with nothing newly claimed."""
        self.inbox.beat(self.worker_id)  # before any claim: a claim of a known worker can be taken over
        beater = threading.Thread(target=self._beat, args=(stop,), name="recover-beat", daemon=True)
        beater.start()
        self.take_orphans()
        while not stop.is_set():
            self._wake.clear()  # before looking: a wake-up during this pass makes the next wait return
            more = self._read()
            tried = self.claim_due()
            if not tried and not more:  # nothing queued that a lane has room for: until a wake-up
                self._wake.wait(POLL_SECONDS)
        beater.join(timeout=BEAT_SECONDS + 1)

    def _read(self) -> bool:
        """Read newly queued items into their lanes; True when there may be more to read."""
        items = self.inbox.queued_after(self._read_up_to, READ_BATCH)
        for item in items:
            self._waiting.setdefault(self.lane_of(item), deque()).append(item)
            self._read_up_to = item.id
        return len(items) == READ_BATCH

    def _chosen(self) -> list[tuple[str, Item]]:
        """The oldest waiting items of the lanes with room, oldest first across lanes."""
        chosen: list[tuple[str, Item]] = []
        with self._lock:
            for lane, waiting in self._waiting.items():
                room = self.slots - self.running[lane]
                chosen.extend((lane, item) for item in itertools.islice(waiting, max(room, 0)))
        return sorted(chosen, key=lambda pair: pair[1].id)

    def claim_due(self) -> int:
        """Claim what the lanes have room for and start it; items another claimer took are dropped.
        Returns how many were tried (claimed here or found taken)."""
        chosen = self._chosen()
        if not chosen:
            return 0
        claimed = {item.id: item for item in self.inbox.claim(self.worker_id, ids=[i.id for _, i in chosen])}
        for lane, item in chosen:
            self._waiting[lane].popleft()  # it: a lane's chosen are its oldest; claimed here or elsewhere
            if item.id not in claimed:
                continue
            with self._lock:
                self.running[lane] += 1
            self._pool(lane).submit(self._run, lane, claimed[item.id])
        return len(chosen)

    def _pool(self, lane: str) -> BackgroundWork:
        # Each installation's own threads: a lane's budget is never waiting on a thread of another.
        if lane not in self._pools:
            self._pools[lane] = BackgroundWork(self.slots, f"recover-work-{lane}")
        return self._pools[lane]

    def close(self) -> None:
        """Wait for the items the installations' pools are running (the shared pool is the bot's)."""
        for lane, pool in self._pools.items():
            if lane != SHARED:
                pool.shutdown(wait=True)

    def _run(self, lane: str, item: Item) -> None:
        try:
            queued.run_claimed(self.bot, self.inbox, self.worker_id, item)
        finally:
            with self._lock:
                self.running[lane] -= 1
            self._wake.set()

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(BEAT_SECONDS):
            try:
                self.inbox.beat(self.worker_id)
                self.take_orphans()
            except Exception as exc:  # noqa: BLE001 - a busy store now and then: beat again later
                log.warning("worker heartbeat failed: %s", type(exc).__name__)
            publish_health(self.cores, self.bot.settings)

    def take_orphans(self) -> list[Item]:
        """Items a dead worker was running (this bot's, or another bot's on one PostgreSQL store whose
        host died): marked interrupted, not re-run (R0.3); their people told, by whoever moved them."""
        orphans = self.inbox.take_orphans(self.bot.settings.worker_stale_seconds)
        for item in orphans:
            log.warning("queued delivery %d was running in a worker that died: interrupted, not re-run", item.id)
            self.bot.ui.submit(queued.tell_interrupted, self.bot.out, item)
        return orphans


def publish_health(cores: Mapping[str, Services], settings: Settings) -> None:
    """Each installation's figures for ``/healthz`` (the serving process reads them)."""
    try:
        fleet_health.publish(dict(cores), fleet_health.health_path(settings))
    except Exception as exc:  # noqa: BLE001 - figures are best effort: the next beat writes them again
        log.warning("installation health not written: %s", type(exc).__name__)


def worker_bot(settings: Settings, store: Store) -> tuple[SlackBot, Composed]:
    """The Slack front end's work side: the core composed with the Slack ports (the ladder and watch
    mode speak through this process's Web API client), and the bot over its router; no Bolt app."""
    from bot.slack.ports import slack_compose  # the core: only the worker needs it at start
    from bot.slack.web import make_client

    client = make_client(settings)
    store.migrate([slack_migrations])  # the Slack front's own tables, beside the core's
    out = SlackOut(client)
    state = SlackState(store)
    composed = slack_compose(settings, client, out=out, state=state)
    bot = SlackBot(
        settings=settings,
        router=composed.router,
        client=client,
        out=out,
        state=state,
        threads=ThreadBook(state, out),
        work=BackgroundWork(8, "recover-work"),
        ui=BackgroundWork(4, "recover-ui"),
        inbox=Inbox(store),
    )
    return bot, composed


def _lanes(composed: Composed) -> queued.Lanes | None:
    """The router's resolution for the lanes when it serves several installations; None for one
    (its work and the shared work are one lane of ``slots``, as before installations)."""
    return composed.router if len(composed.cores) > 1 else None


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
    store = Store(settings.store_target, audit_key=settings.audit_key_bytes())
    bot, composed = worker_bot(settings, store)
    assert bot.inbox is not None
    # Each installation's items on their own slots: one installation's hanging host holds only its own.
    runner = InboxRunner(bot, bot.inbox, str(config["worker"]), slots=8, lanes=_lanes(composed), cores=composed.cores)
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()
        runner.wake()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    threading.Thread(target=_watch_input, args=(stream, runner, stop), name="recover-wake", daemon=True).start()
    bot.start_sweeper()
    bot.work.submit(bot.run_startup)
    # Each installation's watch mode, escalation ladder and periodic finishing run here; what the
    # finishing does is said in the cases' threads, as the start-up's replays are.
    said = bot.background_reporter()
    composed.start(said)
    # What a worker recorded and died before saying (approval requests, results): said once, here or there.
    unsaid = unsaid_look(bot, composed)
    every = settings.worker_stale_seconds / 2
    threading.Thread(target=unsaid.run, args=(stop, every), name="recover-unsaid", daemon=True).start()
    try:
        runner.run(stop)
    finally:
        composed.stop()
        runner.close()
        bot.close()  # waits for the items already running
    return 0


if __name__ == "__main__":
    sys.exit(main())
