"""A send in flight is held: the lease ``send:<idempotency key>`` of one bot while it POSTs a stored request.

Why: with two bots on one store, a stored request whose answer is not recorded yet is either in flight
at a live bot or left by a dead one, and the store alone cannot tell them apart. The bot that sends a
stored record (a decision, a batch member, an uncertain re-send, a replay) holds its send lease — taken
in the transaction that stores the key (:meth:`SendLeases.take`) or just before the POST
(:meth:`SendLeases.hold`) — and keeps it renewed while it waits for the host's answer. Whoever finishes
unfinished work (the periodic job, a start) skips a key whose lease is running: the live send is not
replayed. A holder deposed meanwhile (paused, cut off past its lease) records nothing: every
transaction that records the host's answer calls :meth:`SendLeases.fence`, which raises
:class:`bot.store.leases.LeaseLost` unless this bot still holds the lease. Its
late duplicate POST carries the same Idempotency-Key, which the host answers with the first answer (R0.3).

One holder per decision core (:func:`bot.store.leases.holder_id`): two cores composed in one process are
two bots here, as two processes are.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlite_utils import Database

from bot.clock import isoformat
from bot.runbook.model import RunbookSet
from bot.store.leases import Lease, LeaseHolding, LeaseLost, Leases, acquire, fence, holder_id

#: The prefix of a send's lease: ``send:<idempotency key>``.
SEND = "send:"
#: The prefix of an uncertain send's background finishing: ``finish:<request id or batch member>``.
FINISH = "finish:"


def send_job(key: str) -> str:
    """The lease job of the stored request ``key``."""
    return f"{SEND}{key}"


#: The leases' and the periodic job's times when a runbook set (an older copy) does not name them.
LEASE_DEFAULTS = {"send_lease": 30.0, "replay_every": 5.0}


def lease_limit(runbooks: RunbookSet, name: str) -> float:
    """The runbook's ``send_lease`` or ``replay_every``, or its default (R0.3's once-only sends)."""
    try:
        return float(runbooks.limit(name))
    except KeyError:
        return LEASE_DEFAULTS[name]


class SendInFlight(LeaseLost):
    """Another bot holds the send lease of this key: its send is live, nothing is sent here."""


@dataclass
class _Held:
    holding: LeaseHolding
    thread: int
    depth: int = 1


class SendLeases:
    """The send leases one bot holds; ``ttl`` is the runbook's ``send_lease`` (read when used)."""

    def __init__(self, leases: Leases, ttl: Callable[[], float], *, holder: str | None = None) -> None:
        self.leases = leases
        self.ttl = ttl
        self.holder = holder or holder_id("bot")
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)

    def take(self, db: Database, key: str) -> Lease | None:
        """Inside the transaction that stores ``key`` (before its first send): its lease for this bot, so
        no other bot's sweep sees it as never taken between that commit and the POST."""
        return acquire(db, send_job(key), self.holder, now=self.leases.now(), ttl=self.ttl())

    def running(self, key: str) -> bool:
        """Whether some holder's lease on ``key`` runs now (a live send, here or at another bot)."""
        lease = self.leases.get(send_job(key))
        return lease is not None and lease.until >= self.leases.now()

    @contextmanager
    def hold(self, key: str) -> Iterator[LeaseHolding | None]:
        """Hold ``key``'s send lease for the block, renewed while it runs, released after; None when
        another bot's lease runs (nothing is sent then). Another thread of this bot holding it (a
        delivery handing an uncertain send to its background finishing) is waited for, up to a lease's
        time. Nested in the same thread (the gate's POST inside a delivery) it is the outer holding."""
        me = threading.get_ident()
        with self._lock:
            self._released.wait_for(
                lambda: (held := self._held.get(key)) is None or held.thread == me, timeout=self.ttl()
            )
            mine = self._held.get(key)
            if mine is not None and mine.thread == me:
                mine.depth += 1
        if mine is not None:
            if mine.thread != me:
                yield None
                return
            try:
                yield mine.holding
            finally:
                with self._lock:
                    mine.depth -= 1
            return
        ttl = self.ttl()
        lease = self.leases.acquire(send_job(key), self.holder, ttl)  # our own running one: renewed
        if lease is None:
            yield None
            return
        try:
            with self.leases.held(lease, ttl) as holding:
                with self._lock:
                    self._held[key] = _Held(holding, me)
                yield holding
        finally:
            # Said free only once the lease is released: a waiting thread of this bot that acquired it
            # before the release would hold a lease released under it (and record nothing).
            with self._lock:
                self._held.pop(key, None)
                self._released.notify_all()

    def fence(self, db: Database, key: str) -> None:
        """Inside the transaction that records the host's answer for ``key``: raise LeaseLost unless this
        bot holds its send lease now (and another bot's running one is never overridden)."""
        with self._lock:
            mine = self._held.get(key)
        if mine is not None:
            fence(db, mine.holding.lease, now=self.leases.now())
            return
        row = db.execute("SELECT holder, until FROM leases WHERE job = ?", [send_job(key)]).fetchone()
        if row is not None and str(row[0]) != self.holder and str(row[1]) >= (isoformat(self.leases.now()) or ""):
            raise LeaseLost(f"the send of {key} is held by {row[0]}; {self.holder} records nothing")

    @contextmanager
    def finishing(self, key: str) -> Iterator[bool]:
        """Hold ``finish:<key>`` while the background finishing of an uncertain send runs here (renewed;
        released when it ends, settled or past the runbook's limit). False: another bot finishes it."""
        ttl = self.ttl()
        lease = self.leases.acquire(f"{FINISH}{key}", self.holder, ttl)
        if lease is None:
            yield False
            return
        with self.leases.held(lease, ttl):
            yield True

    def finisher_died(self, key: str) -> bool:
        """Whether the finishing of ``key`` was left by a bot that stopped: its ``finish:`` lease ran out
        without being released, or was never taken. A released one ended here or gave up past the limit
        (it stays uncertain until a start or ``/recover replay``, as the runbook says)."""
        lease = self.leases.get(f"{FINISH}{key}")
        if lease is None:
            return True
        return not lease.released and lease.until < self.leases.now()

    def fencer(self, key: str) -> Callable[[Database], None]:
        """:meth:`fence` for ``key``, as the gate hands it with a send (the client's record of the answer)."""
        return lambda db: self.fence(db, key)


__all__ = ["LEASE_DEFAULTS", "SEND", "SendInFlight", "SendLeases", "lease_limit", "send_job"]
