"""Sending a batch: each member re-checked just before its send, sent once with a stored key.

Members go out in chunks. For each chunk: its members' facts are re-read (a listing snapshot no
older than the runbook's ``batch_recheck_age``, or one GET each for a small batch); a member whose
bound facts changed is skipped (void) and never sent. For the others one commit moves each
``requested → sending`` (a compare-and-set: one winner across processes) together with its
idempotency record — key and exact body, written by the client's own rule — so a crash leaves every
member either unsent or re-sendable with the same key and body. The pool sends them through the
paced client; outcomes are committed in groups by one writer (the answer itself is already in the
idempotency record, so a crash before that commit loses nothing: the member is re-sent with its key
and the stored answer comes back). ``expected_revision`` is the bound revision: a change between
the re-check and the send is refused by the API (409 REQUEST_STALE), never applied.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from sqlite_utils import Database

from bot.batch.store import Batch, BatchStore
from bot.clock import Clock
from bot.controlhost import ControlHostClient, Event, Receipt, RequestPendingError, Session
from bot.decisions import BatchGrant, DecisionPolicy, NoAuthority, SendInFlight, is_uncertain
from bot.diagnosis.facts import event_facts
from bot.errors import ControlHostError
from bot.store import IdempotencyRecord, Store
from bot.store.leases import LeaseLost
from bot.triage.facts import BOUND_FACTS, session_only_facts
from bot.vocab import RequestState

RECHECKED = tuple(f for f in BOUND_FACTS if not f.startswith("unknown_turn."))
SMALL = 20  # up to this many members, each is re-read with its own GET
SETTLE_EVERY = 0.05
EVENT_PAGES = 50  # as a diagnosis reads: past it the stream's position is unknown

Value = str | int | None
Outcome = tuple[str, tuple[str, ...], str, dict[str, Value]]
#: The runner's batch lease checked in a commit of its outcomes (raises LeaseLost when deposed).
Fence = Callable[[Database], None]

log = logging.getLogger(__name__)


class BatchSending(Protocol):
    """What the runner needs of the batch service (it cannot import it: the service imports the runner)."""

    batches: BatchStore
    store: Store
    client: ControlHostClient
    clock: Clock

    def limit(self, name: str) -> float: ...

    def policy(self, decision: str) -> DecisionPolicy: ...

    def begin_members(
        self,
        batch: Batch,
        ready: list[tuple[str, str, str, dict[str, Any]]],
        positions: dict[str, int | None],
    ) -> list[tuple[str, str]]: ...

    def grant(self, batch_id: str) -> BatchGrant: ...

    def send_member(self, grant: BatchGrant, session_id: str, record: IdempotencyRecord) -> Receipt: ...

    def settle_many(self, batch: Batch, actor: str, outcomes: list[Outcome], fence: Fence | None = None) -> None: ...


def stream_position(client: ControlHostClient, session_id: str) -> int | None:
    """Where the member's event stream stands just before its send (``events.last_seq``, the single
    path's pre-send fact): a ready report after it is the verification's evidence (R5.1). None when
    it cannot be read to its end: the verification's own later read stands in (never a false close)."""
    events: list[Event] = []
    after: int | None = None
    for _ in range(EVENT_PAGES):
        try:
            page = client.list_events(session_id, after=after)
        except ControlHostError:
            return None
        events.extend(page.events)
        if not page.events or page.next is None or page.next == after:
            seq = event_facts(events)["events.last_seq"]
            return seq if isinstance(seq, int) else None
        after = page.next
    return None


def changes(bound: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    return [
        f"{name}: {bound.get(name)} → {fresh.get(name)}"
        for name in RECHECKED
        if name in bound and bound.get(name) != fresh.get(name)
    ]


class Recheck:
    """Fresh session facts for members, from a shared listing snapshot or one GET each."""

    def __init__(self, client: ControlHostClient, clock: Clock, *, size: int, max_age: float, page_size: int) -> None:
        self.client = client
        self.clock = clock
        self.use_listing = size > SMALL
        self.max_age = max_age
        self.page_size = page_size
        self._snapshot: dict[str, Session] = {}
        self._at = -1e9
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        snapshot: dict[str, Session] = {}
        for sessions in self.client.listing(limit=self.page_size):
            snapshot.update({s.id: s for s in sessions})
        self._snapshot = snapshot
        self._at = time.monotonic()

    def facts(self, session_id: str) -> dict[str, Any]:
        session = None
        if self.use_listing:
            with self._lock:
                if time.monotonic() - self._at > self.max_age:
                    self._refresh()
                session = self._snapshot.get(session_id)
        if session is None:
            try:
                session = self.client.get_session(session_id)
            except ControlHostError as exc:
                if exc.code == "NOT_FOUND":
                    return {"session.found": False}
                raise
        return session_only_facts(session, self.clock.now())


class Settler:
    """Commits member outcomes in groups, from one thread (each commit is an fsync)."""

    def __init__(
        self,
        service: BatchSending,
        batch: Batch,
        actor: str,
        on_change: Callable[[], None],
        fence: Fence | None = None,
    ) -> None:
        self.s = service
        self.batch = batch
        self.actor = actor
        self.on_change = on_change
        self.fence = fence
        self.deposed = False
        self.q: queue.Queue[Outcome | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="batch-settle", daemon=True)
        self._thread.start()

    def put(self, session_id: str, from_states: tuple[str, ...], to: str, **values: Value) -> None:
        self.q.put((session_id, from_states, to, values))

    def _run(self) -> None:
        done = False
        while not done:
            items = [self.q.get()]
            time.sleep(SETTLE_EVERY)
            while True:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            done = any(i is None for i in items)
            outcomes = [i for i in items if i is not None]
            if outcomes and not self.deposed:
                try:
                    self.s.settle_many(self.batch, self.actor, outcomes, fence=self.fence)
                except LeaseLost as exc:  # another bot runs the batch now: its records stand
                    log.warning("batch %s: %s", self.batch.id, exc.message)
                    self.deposed = True
                    continue
                self.on_change()

    def close(self) -> None:
        self.q.put(None)
        self._thread.join()


class Runner:
    """Sends one batch's remaining members with bounded concurrency (the paced client bounds the rate)."""

    def __init__(
        self,
        service: BatchSending,
        batch_id: str,
        actor: str,
        on_change: Callable[[], None],
        *,
        fence: Fence | None = None,
        lost: Callable[[], bool] = lambda: False,
    ) -> None:
        self.s = service
        self.batch_id = batch_id
        self.actor = actor
        self.on_change = on_change
        self.fence = fence
        self.lost = lost  # the runner's batch lease was lost: it stops sending new members
        self.granted: BatchGrant | None = None
        self.watched = False

    def _regrant(self) -> bool:
        """The gate's proof of the batch, re-read from the chain (before the run and each chunk)."""
        try:
            self.granted = self.s.grant(self.batch_id)
        except NoAuthority:
            self.granted = None
        return self.granted is not None

    def stopped(self) -> bool:
        if self.lost():
            return True
        batch = self.s.batches.get(self.batch_id)
        return bool(batch and batch.stop_requested)

    def run(self, concurrency: int) -> None:
        batch = self.s.batches.get(self.batch_id)
        assert batch is not None
        concurrency = max(1, concurrency)
        # A decision the verification watches (R5.1): each member's stream position is read before its send.
        self.watched = self.s.policy(batch.decision).spec.verify.watch is not None
        if not self._regrant():
            return  # nothing sent: the service said why before it started
        settler = Settler(self.s, batch, self.actor, self.on_change, self.fence)
        try:
            with cf.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="batch") as pool:
                # A crash left these in flight: the same key and body again.
                for member in self.s.batches.members(batch.id, (RequestState.SENDING,)):
                    pool.submit(self._send, settler, member.session_id, member.idem_key, (RequestState.SENDING,))
                self._new_sends(batch, pool, settler, concurrency)
        finally:
            settler.close()
        # Uncertain members are finished after the run by the decisions' own finishing (the service
        # hands them over): the same logical request again, same key and body, never a new one.

    def _new_sends(self, batch: Batch, pool: cf.ThreadPoolExecutor, settler: Settler, concurrency: int) -> None:
        pending = self.s.batches.members(batch.id, (RequestState.REQUESTED,))
        recheck = Recheck(
            self.s.client,
            self.s.clock,
            size=len(pending),
            max_age=self.s.limit("batch_recheck_age"),
            page_size=int(self.s.limit("bulk_page_size")),
        )
        chunk = concurrency
        inflight: set[cf.Future[None]] = set()
        policy = self.s.policy(batch.decision)
        for start in range(0, len(pending), chunk):
            if self.stopped() or not self._regrant():
                return
            part = pending[start : start + chunk]
            if recheck.use_listing:
                fresh = [_try(recheck.facts, m.session_id) for m in part]
            else:  # a small batch: one GET each, in parallel
                fresh = list(pool.map(lambda m: _try(recheck.facts, m.session_id), part))
            void: list[tuple[str, str]] = []
            ready: list[tuple[str, str, str, dict[str, Any]]] = []
            for member, facts in zip(part, fresh, strict=True):
                if facts is None:
                    continue  # unreadable now: stays requested, nothing sent
                changed = changes(member.facts, facts)
                if changed:
                    void.append((member.session_id, "; ".join(changed)))
                    continue
                method, path, body = policy.request(member.session_id, member.facts, {"reason": batch.reason})
                ready.append((member.session_id, method, path, body))
            for sid, why in void:
                settler.put(sid, (RequestState.REQUESTED,), RequestState.VOID, code="FACTS_CHANGED", detail=why)
            # Where each member's event stream stands before its first send, kept with its sending step
            # (R5.1: a ready report after it is the verification's evidence), read in parallel.
            ids = [r[0] for r in ready] if self.watched else []
            positions = dict(zip(ids, pool.map(lambda sid: stream_position(self.s.client, sid), ids), strict=True))
            keys = self.s.begin_members(batch, ready, positions)
            for sid, key in keys:
                inflight.add(pool.submit(self._send, settler, sid, key, (RequestState.SENDING,)))
            # At most two chunks in flight: a stop takes effect at once, and re-checks stay fresh.
            while len(inflight) > chunk:
                done, inflight = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
                inflight = set(inflight)

    def _send(self, settler: Settler, session_id: str, key: str | None, from_states: tuple[str, ...]) -> None:
        # The record was committed with the member's move to sending (``begin_members``): the same
        # key and body on every attempt, after a crash too.
        record = self.s.store.get_request(key) if key else None
        if record is None:
            return
        values: dict[str, Value]
        try:
            if self.granted is None:
                raise NoAuthority("the batch has no authority in the chain")
            receipt = self.s.send_member(self.granted, session_id, record)  # through the gate
        except SendInFlight:
            # Another bot's send of this member is live: no definite answer here; finished with its key
            # by the one finishing of uncertain sends once that lease is free (R0.3).
            to, values = RequestState.UNCERTAIN, {"code": "IN_FLIGHT_ELSEWHERE"}
        except LeaseLost as exc:  # deposed while the answer was awaited: the new holder records it
            log.warning("batch %s member %s: %s", self.batch_id, session_id, exc.message)
            return
        except NoAuthority as exc:
            to, values = RequestState.VOID, {"code": "NO_AUTHORITY", "detail": exc.reason}
        except ControlHostError as exc:
            # The decisions' one reading of "no definite answer" (a single decision's send reads it too).
            if isinstance(exc, RequestPendingError) or is_uncertain(exc):
                to, values = RequestState.UNCERTAIN, {"code": exc.code}
            else:
                to, values = RequestState.FAILED, {"code": exc.code, "http_status": exc.status, "detail": exc.message}
        else:
            to = RequestState.EXECUTED
            values = {"receipt_id": receipt.id, "http_status": receipt.http_status or 200}
        settler.put(session_id, from_states, to, key=record.key, **values)


def _try(fn: Callable[[str], dict[str, Any]], session_id: str) -> dict[str, Any] | None:
    try:
        return fn(session_id)
    except ControlHostError:
        return None
