"""The watcher: reads the ``recovery_required`` listing, and posts each new stop's diagnosis once.

Plain Python that the Slack app, the console and tests all call (``poll_once`` per interval, or
``run`` on a thread). It reads through the paced bulk client that triage uses, diagnoses through
``diagnose``'s own Diagnoser and turns a burst into the existing triage: it decides nothing itself.
Each stop's key is committed with a lease before it is posted (bot/watch/store.py), so two bots, a
restart or a SIGKILL never post one twice; a claim whose owner died unposted is taken over once its
lease runs out, found in the channel by its key (said in the post) or else posted; a stop that happened
while the bot was down is posted at its start.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.clock import Clock, isoformat, parse_time
from bot.controlhost import ControlHostClient, Session
from bot.messages import Message, NullReporter, Reply
from bot.redact import redact
from bot.runbook.installation import WatchSectionSpec
from bot.runbook.model import RunbookSet
from bot.store import Store
from bot.store.leases import Lease
from bot.triage import runbook_limit
from bot.vocab import Step
from bot.watch.lease import LeaseKeeper
from bot.watch.pausing import ChannelMembers, member_refusal, pause_digest, record_pause, record_resume
from bot.watch.poster import Poster, key_line
from bot.watch.shifts import HandoffSource, post_digest, post_handoff, say_handoff
from bot.watch.state import WatchStatus
from bot.watch.status import cursor_state, status_reply
from bot.watch.stops import Stop, stop_of
from bot.watch.store import CLAIMED, HANDOFF, PAUSE_HELD, STORM, SUPPRESSED, THREAD, Claim, WatchStore
from bot.watch.trigger import Trigger
from bot.watch.windows import within

log = logging.getLogger(__name__)

ACTOR = "watch"
#: How the storm's message begins, from its first word to the triage it becomes.
STORM_LEAD = "Many sessions stopped at once."
#: Consecutive failed polls after which the channel is told, once, that the watcher cannot read.
FAILING_AFTER = 3


def storm_first_word(count: int) -> Message:
    """The storm's first word, posted as soon as the poll has claimed it; the triage replaces it."""
    return Message(
        headline=f"{STORM_LEAD} {count} sessions stopped, triage running.",
        level="warn",
        lines=["This message becomes the triage (groups, and one batch command for each) when it completes."],
    )


class CaseDiagnoser(Protocol):
    """``/recover diagnose``'s own answer and record (bot.diagnosis.service.Diagnoser)."""

    def diagnose_and_record(self, session_id: str, actor: str) -> tuple[object, Reply]: ...


class StormTriage(Protocol):
    """The existing triage (bot.triage.Triage): a burst is one triage, its groups usable by batches."""

    def run(self, actor: str, reporter: NullReporter) -> Reply: ...


@dataclass
class PollResult:
    complete: bool
    listed: int = 0
    claimed: list[Claim] = field(default_factory=list)
    error: str | None = None
    pages: int = 0  # pages read this poll
    cursor: str | None = None  # the cursor of the page read last (None: the first page)
    #: Not polled: another bot's watcher holds this installation's poll lease (its holder).
    standby: str | None = None


@dataclass(frozen=True)
class Wakes:
    """What makes a watcher poll besides its interval, given when it is built: a trigger built over it
    (Docker events wake it at once), or, where no loop runs it, what polls it (the demo's console
    commands; ``/recover watch`` says so)."""

    trigger: Callable[[Watcher], Trigger] | None = None
    polls_on: str | None = None


class Watcher:
    def __init__(
        self,
        *,
        client: ControlHostClient,
        diagnoser: CaseDiagnoser,
        triage: StormTriage | None,
        store: Store,
        runbooks: RunbookSet,
        clock: Clock,
        poster: Poster,
        channel: str,
        installation: str = "default",
        interval: float | None = None,
        handoff: HandoffSource | None = None,
        members: ChannelMembers | None = None,
        console_users: Mapping[str, str] | None = None,
        wakes: Wakes | None = None,
    ) -> None:
        if runbooks.watch is None:
            raise ValueError("watch mode needs a 'watch:' section in the runbooks (docs/runbook-format.md)")
        self.spec: WatchSectionSpec = runbooks.watch
        self.client = client
        self.diagnoser = diagnoser
        self.triage = triage
        self.runbooks = runbooks
        self.clock = clock
        self.poster = poster
        self.channel = channel
        self.installation = installation
        self.saved = WatchStore(store, installation)
        self.store = store
        # The lease holder: this process (two watchers of one process are two holders too).
        self.leases = LeaseKeeper(store, lease=self.spec.seconds("claim_lease"))
        self.owner = self.leases.owner
        self.interval = interval if interval is not None else self.spec.seconds("poll_interval")
        #: This installation's poll lease while this watcher holds it (one bot polls, the others stand by).
        self.poll_lease: Lease | None = None
        self.handoff = handoff  # the ``handoff`` command's own digest (cases, requests, batches)
        self.members = members  # who may pause and resume: the watch channel's members
        self.console_users = dict(console_users or {})
        self.last_poll: datetime | None = None
        self.next_poll: datetime | None = None
        self.seen = 0
        self.errors = 0
        self.consecutive = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # wake(): poll now instead of at the end of the interval
        # What else wakes it (Docker events), built over this watcher; runs while run() does.
        wakes = wakes or Wakes()
        self.trigger: Trigger | None = wakes.trigger(self) if wakes.trigger is not None else None
        self._lock = threading.Lock()  # one poll at a time per process
        #: What makes it poll when no loop runs it (the demo: its console commands); None: every ``interval``.
        self.polls_on: str | None = wakes.polls_on

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """Poll until :meth:`stop`; a failing poll is counted and said, never ends the loop. The
        ``trigger`` (Docker events) runs alongside and calls :meth:`wake` to poll at once."""
        if self.trigger is not None:
            self.trigger.start()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - the watcher must never silently stop
                log.exception("watch: a poll failed unexpectedly")
            self._wake.wait(self.interval)
            self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.trigger is not None:
            self.trigger.stop()
        held, self.poll_lease = self.poll_lease, None
        if held is not None:  # a clean stop hands the polling on at once (a dead one's runs out)
            try:
                self.store.leases.release(held)
            except Exception:  # noqa: BLE001 - it runs out by itself
                log.warning("watch: releasing the poll lease failed; it runs out by itself")

    # -- who polls -----------------------------------------------------------------------------

    @property
    def poll_job(self) -> str:
        """The lease job one bot polls this installation under (``watch-poll:<installation>``)."""
        return f"watch-poll:{self.installation}"

    def poll_ttl(self) -> float:
        """How long the poll lease outlives a poll: past the next poll's time, and never shorter than
        a claim's lease (a standby takes over about when it would take a dead poller's claims over)."""
        return max(self.spec.seconds("claim_lease"), 2.0 * self.interval)

    def _take_poll(self) -> Lease | None:
        """This watcher's poll lease, renewed (or taken over when its holder died); None: stand by."""
        self.poll_lease = self.store.leases.acquire(self.poll_job, self.owner, self.poll_ttl())
        return self.poll_lease

    def poller(self) -> tuple[str | None, bool]:
        """(who polls this installation, whether it is this watcher): the running poll lease's holder."""
        lease = self.store.leases.get(self.poll_job)
        if lease is None or lease.until < self.clock.now():
            return None, False
        return lease.holder, lease.holder == self.owner

    def _standby(self) -> PollResult:
        holder, _ = self.poller()
        return PollResult(complete=False, standby=holder or "another watcher")

    # -- one poll ------------------------------------------------------------------------------

    def poll_once(self) -> PollResult:
        """One poll, by the one watcher holding the poll lease (renewed while it runs); the others
        stand by, doing nothing, until its holder stops or dies and the lease runs out."""
        with self._lock:
            poll = self._take_poll()
            if poll is None:
                return self._standby()
            with self.leases.held(poll, ttl=self.poll_ttl()):
                return self._poll(self.clock.now())

    def _poll(self, now: datetime) -> PollResult:
        self.last_poll = now
        self.next_poll = None if self.polls_on else now + timedelta(seconds=self.interval)
        result = self._read_and_claim(now)
        self._take_over(now)
        self._health(result, now)
        self.saved.put(
            "cursor", cursor_state(complete=result.complete, pages=result.pages, cursor=result.cursor, at=now)
        )
        if result.complete:
            self.seen = result.listed
            self.saved.put("poll", {"at": isoformat(now), "by": ACTOR, "listed": result.listed})
        if result.complete and not self.paused(now):
            self._end_of_pause(now)
        stormed = sum(c.state == STORM for c in result.claimed)
        if stormed:
            self._post_storm(now, stormed)
        if not self.quiet(now):
            post_digest(self.saved, self.poster, self.channel, self.spec, ACTOR)
        try:
            post_handoff(self.saved, self.poster, self.channel, self.runbooks, self.handoff, now, self.leases)
        except Exception:  # noqa: BLE001 - the claim stays unposted: a live watcher takes it over
            log.exception("watch: posting the shift change's hand-off failed")
            self.errors += 1
        return result

    def note_known(self) -> PollResult:
        """Every stop listed now recorded as known, nothing posted: the sessions already stuck when
        watching began are not new stops (the demo's backlog at its start); each later stop is."""
        with self._lock:
            if self._take_poll() is None:
                return self._standby()  # the poller's own baseline stands: nothing marked known here
            now = self.clock.now()
            result = self._read_and_claim(now, baseline=True)
            if result.complete:
                self.seen, self.last_poll = result.listed, now
                self.saved.put("poll", {"at": isoformat(now), "by": ACTOR, "listed": result.listed})
            return result

    def _read_and_claim(self, now: datetime, *, baseline: bool = False) -> PollResult:
        """Every page first, then the new stops claimed and said: a burst is known before anything
        is posted, so it is one triage message, not the first N cases and then the storm. ``baseline``:
        what is listed is recorded as known when watching begins, and nothing is said."""
        result = PollResult(complete=False)
        listed: set[str] = set()
        known = self.saved.active()
        new: list[Stop] = []
        page_size = int(runbook_limit(self.runbooks, "bulk_page_size"))
        listing = self.client.listing(limit=page_size)  # each session once, however often it is listed
        try:
            for sessions in listing:
                for session in sessions:
                    listed.add(session.id)
                    stop = self._stop_of(session)
                    if (stop.session_id, stop.signature) not in known:
                        new.append(stop)
        except Exception as exc:  # noqa: BLE001 - a failing page is counted; the next poll reads again
            result.error = redact(str(exc)) or type(exc).__name__
        result.cursor, result.pages = listing.cursor, listing.pages
        result.listed = len(listed)
        window, threshold = self.spec.seconds("storm_window"), int(self.spec.seconds("storm_threshold"))
        burst = len(new) + self.saved.recent(now=now, window=window) > threshold
        how: dict[str, Any] = {
            "actor": self.owner,
            "lease": self.spec.seconds("claim_lease"),
            "now": now,
            "flap_window": self.spec.seconds("flap_window"),
            "storm_window": window,
            "storm_threshold": threshold,
            "paused": self.paused(now),
            "quiet": self.quiet(now),
            "burst": burst,
            "known": baseline,
        }
        if burst:  # folded into one message: committed a hundred a time, said after (each with its lease)
            result.claimed = self.saved.claim_many(new, **how)
            for taken in result.claimed:
                self._say(taken, now)
        for stop in [] if burst else new:  # what was read before a failing page is said now, the rest next poll
            claim = self.saved.claim(stop, **how)
            if claim is not None:
                # Claimed, then posted at once: a kill leaves this one to be taken over.
                result.claimed.append(claim)
                self._say(claim, now)
        if result.error is None:
            result.complete = True
            self.saved.settle(listed, now=now, keep_for=self.spec.seconds("dedup_window"))
        return result

    def _end_of_pause(self, now: datetime) -> None:
        """The pause is over (resumed, or its ``--for`` ran out): one digest of what it held, then each
        session still stuck said as usual (one storm message when they are many). After a complete
        listing only, so a session that recovered meanwhile is named as such, not posted."""
        stuck, recovered = self.saved.take_pause_held(
            actor=self.owner,
            now=now,
            lease=self.spec.seconds("claim_lease"),
            storm_window=self.spec.seconds("storm_window"),
            storm_threshold=int(self.spec.seconds("storm_threshold")),
        )
        if not stuck and not recovered:
            return
        try:
            self.poster.post(self.channel, pause_digest([c.stop for c in stuck], recovered))
        except Exception:  # noqa: BLE001 - the cases below are still said (and taken over if this dies)
            log.exception("watch: the pause digest could not be posted")
            self.errors += 1
        for claim in stuck:
            self._say(claim, now)
        stormed = sum(c.state == STORM for c in stuck)
        if stormed:
            self._post_storm(now, stormed)

    def _stop_of(self, session: Session) -> Stop:
        """The stop's identity; an outcome_unknown stop is told apart by its unknown turn (R3.1)."""
        turn_id = None
        if session.attention is not None and session.attention.code == "OUTCOME_UNKNOWN":
            turns = self.client.list_turns(session.id, status="outcome_unknown")
            turn_id = turns[0].id if turns else None
        return stop_of(session, turn_id, self.store.installation)

    def _take_over(self, now: datetime) -> None:
        """Claims left unposted past their lease (the owner was killed): look for each in the channel
        by its key first (it may have reached Slack before the kill), record it if found, else post it."""
        for claim in self.saved.take_over(actor=self.owner, now=now, lease=self.spec.seconds("claim_lease")):
            if claim.state == HANDOFF:  # a shift change's post: each missing part, looked for first
                try:
                    say_handoff(
                        self.saved,
                        self.poster,
                        self.channel,
                        self.runbooks,
                        self.handoff,
                        claim,
                        self.leases,
                        now,
                        look=True,
                    )
                except Exception:  # noqa: BLE001 - never post blind: the lease runs out again
                    log.exception("watch: cannot finish the hand-off %s", claim.stop.session_id)
                    self.errors += 1
                continue
            try:
                with self.leases.held(claim.lease):
                    ts = self.poster.find(self.channel, key_line(claim.stop.key), claim.thread_ts)
            except Exception:  # noqa: BLE001 - unreadable channel: never post blind; the lease runs out again
                log.exception("watch: cannot look for the stop of %s in the channel", claim.stop.session_id)
                self.errors += 1
                continue
            if ts is not None:
                self.saved.posted(
                    claim.stop.key, self.channel, ts, root_ts=claim.thread_ts or ts, now=now, lease=claim.lease
                )
            else:
                self._say(claim, now)

    # -- saying it -----------------------------------------------------------------------------

    def _say(self, claim: Claim, now: datetime) -> None:
        if claim.state not in (CLAIMED, THREAD):
            return  # folded into the storm message, dropped while paused, held for the digest
        if claim.lease is None:  # never posted unfenced: only a claim's holder says it
            log.warning("watch: the stop of %s has no lease of this watcher's; not posting it", claim.stop.session_id)
            return
        try:
            with self.leases.held(claim.lease):  # a slow diagnosis or post never looks dead
                self._post_case(claim, now)
        except Exception:  # noqa: BLE001 - one unreadable session must not hold back the others
            log.exception("watch: posting the stop of %s failed", claim.stop.session_id)
            self.errors += 1

    def _post_case(self, claim: Claim, now: datetime) -> None:
        sid = claim.stop.session_id
        _, reply = self.diagnoser.diagnose_and_record(sid, ACTOR)
        if not self.leases.posting(claim.lease, f"the stop {claim.stop.key}"):
            # Deposed (stalled past the lease; taken over with token + 1): the taker looks and posts.
            log.warning("watch: the claim of %s is no longer this watcher's; not posting it", sid)
            return
        first, *rest = reply.messages or [Message(headline=f"{sid}: no diagnosis")]
        if claim.state == THREAD:
            assert claim.thread_ts is not None
            head = dataclasses.replace(
                first,
                headline=f"Stopped again: {sid} ({claim.stop.describe()}). {first.headline}",
                session_id=sid,
                lines=[*first.lines, key_line(claim.stop.key)],
            )
            ts = self.poster.post(self.channel, head, claim.thread_ts)
            for message in rest:
                self.poster.post(self.channel, message, claim.thread_ts)
            self.saved.posted(claim.stop.key, self.channel, ts, root_ts=claim.thread_ts, now=now, lease=claim.lease)
            return
        head = dataclasses.replace(
            first,
            headline=f"Stopped: {sid} ({claim.stop.describe()}). {first.headline}",
            session_id=sid,
            lines=[*first.lines, key_line(claim.stop.key)],
        )
        ts = self.poster.post(self.channel, head)
        for message in rest:
            self.poster.post(self.channel, message, ts)
        self.saved.posted(claim.stop.key, self.channel, ts, root_ts=ts, now=now, lease=claim.lease)

    def _post_storm(self, now: datetime, count: int) -> None:
        """A burst: one message, posted by one process and updated in place after that. The process
        that opens the storm says its first word at once (``count`` sessions stopped, triage running),
        then edits that same message into the triage when the triage completes."""
        if self.triage is None:
            return
        action, ts = self.saved.claim_storm(now=now, window=self.spec.seconds("storm_window"), actor=ACTOR)
        if action == "skip":
            return
        if action == "post":
            ts = self.poster.post(self.channel, storm_first_word(count))
            if ts is not None:
                self.saved.storm_posted(self.channel, ts)
        reply = self.triage.run(ACTOR, NullReporter())
        message = reply.messages[0] if reply.messages else Message(headline="Triage found nothing")
        message = dataclasses.replace(message, headline=f"{STORM_LEAD} {message.headline}")
        if ts is not None and self.poster.update(self.channel, ts, message):
            return
        new_ts = self.poster.post(self.channel, message)
        if new_ts is not None:
            self.saved.storm_posted(self.channel, new_ts)

    # -- failing and recovering ----------------------------------------------------------------

    def _health(self, result: PollResult, now: datetime) -> None:
        if not result.complete:
            self.errors += 1
            self.consecutive += 1
            self.last_error = result.error
            if self.consecutive >= FAILING_AFTER and self._flip_health(failing=True, now=now):
                self.poster.post(
                    self.channel,
                    Message(
                        headline=f"Watch cannot read the session listing ({FAILING_AFTER} polls in a row failed): "
                        "stops are not being posted. It keeps retrying.",
                        level="warn",
                        lines=[f"Last error: {result.error}", "Check the control host, or `/recover triage` by hand."],
                    ),
                )
            return
        self.consecutive = 0
        health = self.saved.get("health")
        if health and health.get("failing") and self._flip_health(failing=False, now=now):
            since = health.get("since")
            self.poster.post(
                self.channel,
                Message(
                    headline="Watch reads the session listing again; stops missed meanwhile are posted now.",
                    level="ok",
                    lines=[f"Failing since {since}."] if since else [],
                ),
            )

    def _flip_health(self, *, failing: bool, now: datetime) -> bool:
        """Set the shared health; True for the one process that changed it (it says so, once)."""
        with self.store.write() as db:
            row = db.conn.execute(
                "SELECT value FROM watch_state WHERE installation = ? AND name = 'health'", [self.installation]
            ).fetchone()
            was = bool(row and '"failing": true' in row[0])
            if was == failing:
                return False
            value = {"failing": failing, "since": isoformat(now), "error": self.last_error if failing else None}
            self.saved.put("health", value, db=db)
            self.store.record_step(
                None,
                ACTOR,
                Step.WATCH_HEALTH,
                {"installation": self.installation},
                "failing" if failing else "recovered",
                detail=value,
                db=db,
            )
        return True

    # -- pause, resume, state ------------------------------------------------------------------

    def quiet(self, now: datetime) -> bool:
        """Inside the runbook's quiet hours (local time in its zone; an end before the start spans midnight)."""
        q = self.spec.quiet_hours
        return q is not None and within(q.start, q.end, q.time_zone, now)

    def paused(self, now: datetime) -> bool:
        pause = self.saved.get("pause")
        if not pause or not pause.get("paused"):
            return False
        until = parse_time(pause.get("until"))
        return until is None or until > now

    def pause(self, actor: str, seconds: float | None) -> Reply:
        """Hold new posts (for ``seconds``, or until resumed): only a member of the watch channel."""
        refused = member_refusal(self.members, self.channel, actor, self.console_users, "pause")
        return refused or record_pause(self.saved, self.store, actor=actor, seconds=seconds, now=self.clock.now())

    def resume(self, actor: str) -> Reply:
        refused = member_refusal(self.members, self.channel, actor, self.console_users, "resume")
        if refused:
            return refused
        reply = record_resume(self.saved, self.store, actor=actor, now=self.clock.now())
        self.wake()  # a running loop polls now: the pause's digest and its stuck sessions come next
        return reply

    def status(self) -> WatchStatus:
        now = self.clock.now()
        pause = self.saved.get("pause") or {}
        counts = self.saved.counts()
        health = self.saved.get("health") or {}
        poll = self.saved.get("poll") or {}
        poller, polling = self.poller()
        return WatchStatus(
            paused_until=parse_time(pause.get("until")) if pause.get("paused") else None,
            paused_by=str(pause["by"]) if pause.get("paused") and pause.get("by") else None,
            cursor=self.saved.get("cursor"),
            paused=self.paused(now),
            last_poll=self.last_poll or parse_time(poll.get("at")),
            next_poll=self.next_poll,
            seen=self.seen,
            posted=counts.get("posted", 0),
            suppressed=counts.get(SUPPRESSED, 0) + counts.get(STORM, 0),
            held=counts.get(PAUSE_HELD, 0),
            errors=self.errors,
            failing_since=parse_time(health.get("since")) if health.get("failing") else None,
            last_error=self.last_error,
            counts=counts,
            polls_on=self.polls_on,
            poller=poller,
            polling=polling,
        )

    def status_reply(self) -> Reply:
        return status_reply(self.status(), self.channel)

    def health(self) -> dict[str, object]:
        """For ``/healthz``: whether the watcher reads the listing, and since when it does not."""
        st = self.status()
        return {
            "ok": st.failing_since is None,
            "failing_since": isoformat(st.failing_since),
            "last_poll": isoformat(st.last_poll),
            "errors": st.errors,
            "poller": st.poller,
            "polling": st.polling,
        }
