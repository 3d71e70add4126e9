"""Leases with fencing tokens: how one of several bots on one store claims a job that must run once.

A job (``ladder:<request>``, ``replay:<installation>``, ``send:<key>`` …) is held by one *holder* (a
process of one bot: :func:`holder_id`) until its lease runs out. Taking a job over from a holder whose
lease ran out raises its **fencing token** by one, and the token never goes down (a released lease
keeps its row and its token). So a holder that was paused or cut off past its lease and wakes up
still believing it holds the job is told apart from the one that took it over: every send or post
made under a lease calls :func:`fence` in the same write transaction that records it, and that
transaction fails (:class:`LeaseLost`) unless the lease is still the holder's, with the same token,
and not run out. What the deposed holder would have recorded is then never recorded twice, and what
it would have sent is left to the new holder (which sends with the same stored Idempotency-Key).

Why our own table and not PostgreSQL's session advisory locks: a lock dies with its connection, not
with its holder's lease, so a paused holder keeps it forever and a dead one's is released only when
the server notices the socket; and the store's SQLite default (bot/store/_engine.py) has no such
locks at all. One table serves both engines, under the store's write lock (``BEGIN IMMEDIATE`` on
SQLite, the transaction's advisory lock on PostgreSQL), so acquire, renew, fence and release are
each one compare-and-set.

Times are the store's clock (a bot's wall clock; a test's manual clock), written as ISO 8601 text of
one fixed width (bot/clock.py), so they compare as text on both engines.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlite_utils import Database

from bot.clock import Clock, isoformat, parse_time
from bot.errors import StoreError


class _Transactions(Protocol):
    """What the leases need of the step store (bot/store/_store.py): its transactions and its clock."""

    clock: Clock

    def read(self) -> AbstractContextManager[Database]: ...

    def write(self) -> AbstractContextManager[Database]: ...


log = logging.getLogger(__name__)

#: A released lease's expiry: before any real time, so the next acquire takes it over (token + 1).
RELEASED = "0001-01-01T00:00:00.000Z"
_RELEASED_AT = datetime.min.replace(tzinfo=UTC)


def holder_id(role: str) -> str:
    """The one name a process of a bot holds leases under: its role, host, pid and a random part (a
    restarted process on the same host and pid is another holder)."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Lease:
    """A job held by ``holder`` under fencing token ``token`` until ``until`` (the store's clock)."""

    job: str
    holder: str
    token: int
    until: datetime

    def __str__(self) -> str:
        return f"{self.job} (token {self.token}, held by {self.holder})"

    @property
    def released(self) -> bool:
        """Left free by its holder (:func:`release`), not merely run out."""
        return self.until == _RELEASED_AT


class LeaseLost(StoreError):
    """The lease is no longer the holder's: run out, or taken over (a higher token). Nothing is recorded."""


def _iso(when: datetime) -> str:
    text = isoformat(when)
    assert text is not None
    return text


def _lease(job: str, holder: str, token: int, until: str) -> Lease:
    # A lease released before RELEASED was year 1 kept year 0, which no datetime holds: the earliest one.
    when = parse_time(until if until >= RELEASED else RELEASED)
    assert when is not None
    return Lease(job, holder, int(token), when)


def acquire(db: Database, job: str, holder: str, *, now: datetime, ttl: float) -> Lease | None:
    """Inside a write transaction: ``job`` for ``holder`` for ``ttl`` seconds, or None while another
    holder's lease runs. The holder's own running lease is renewed with its token; a lease that ran
    out (or was released) is taken over with the next token."""
    until = _iso(now + timedelta(seconds=ttl))
    row = db.execute("SELECT holder, token, until FROM leases WHERE job = ?", [job]).fetchone()
    if row is None:
        db.execute("INSERT INTO leases (job, holder, token, until) VALUES (?, ?, 1, ?)", [job, holder, until])
        return _lease(job, holder, 1, until)
    current, token, running_until = str(row[0]), int(row[1]), str(row[2])
    if running_until >= _iso(now):
        if current != holder:
            return None
        db.execute("UPDATE leases SET until = ? WHERE job = ? AND token = ?", [until, job, token])
        return _lease(job, holder, token, until)
    db.execute(
        "UPDATE leases SET holder = ?, token = ?, until = ? WHERE job = ? AND token = ?",
        [holder, token + 1, until, job, token],
    )
    return _lease(job, holder, token + 1, until)


def fence(db: Database, lease: Lease, *, now: datetime) -> None:
    """Inside the write transaction that records a send or a post made under ``lease``: raise
    :class:`LeaseLost` unless the lease is still its holder's, with its token, and not run out."""
    row = db.execute("SELECT holder, token, until FROM leases WHERE job = ?", [lease.job]).fetchone()
    if row is None or str(row[0]) != lease.holder or int(row[1]) != lease.token:
        taken = "gone" if row is None else f"token {row[1]}, held by {row[0]}"
        raise LeaseLost(f"the lease of {lease.job} was taken over ({taken}); {lease.holder} records nothing")
    if str(row[2]) < _iso(now):
        raise LeaseLost(f"the lease of {lease.job} ran out at {row[2]}; {lease.holder} records nothing")


def running(db: Database, job: str, *, now: datetime) -> Lease | None:
    """Inside a transaction: the job's lease while it runs (anyone's), None when it ran out, was
    released or was never held (a claim written before leases existed has no row: run out)."""
    row = db.execute("SELECT holder, token, until FROM leases WHERE job = ?", [job]).fetchone()
    if row is None or str(row[2]) < _iso(now):
        return None
    return _lease(job, str(row[0]), int(row[1]), str(row[2]))


def take_over(db: Database, job: str, holder: str, *, now: datetime, ttl: float) -> Lease | None:
    """Inside a write transaction: ``job`` for ``holder`` only if its lease is not running (its holder
    died, or it was never leased), with the next token; None while anyone's lease runs, the caller's
    own included (a live claim of its own is not a dead one to take over)."""
    if running(db, job, now=now) is not None:
        return None
    return acquire(db, job, holder, now=now, ttl=ttl)


def posting(db: Database, lease: Lease, what: str, *, now: datetime) -> None:
    """Inside the write transaction just before a post made under ``lease``: :func:`fence`, then record
    on the lease that ``what`` is being posted under its token (a taker sees how far the deposed holder
    got). Raises :class:`LeaseLost` (nothing recorded) when the lease is no longer the holder's."""
    fence(db, lease, now=now)
    db.execute(
        "UPDATE leases SET posting = ? WHERE job = ? AND token = ?",
        [f"{what} at {_iso(now)}", lease.job, lease.token],
    )


def renew(db: Database, lease: Lease, *, now: datetime, ttl: float) -> Lease | None:
    """Inside a write transaction: the lease extended by ``ttl`` from ``now``, or None when it is no
    longer the holder's (the caller stops working on the job)."""
    try:
        fence(db, lease, now=now)
    except LeaseLost:
        return None
    until = _iso(now + timedelta(seconds=ttl))
    db.execute("UPDATE leases SET until = ? WHERE job = ? AND token = ?", [until, lease.job, lease.token])
    return _lease(lease.job, lease.holder, lease.token, until)


def release(db: Database, lease: Lease) -> bool:
    """Inside a write transaction: the job left free for the next holder (its token kept, so the next
    acquire fences this holder out); False when it was not this holder's any more."""
    cur = db.execute(
        "UPDATE leases SET until = ? WHERE job = ? AND holder = ? AND token = ? AND until <> ?",
        [RELEASED, lease.job, lease.holder, lease.token, RELEASED],
    )
    return cur.rowcount == 1


class Leases:
    """The store's leases, each call its own write transaction (or joined to ``db`` where a caller
    records in the same commit), timed by the store's clock."""

    def __init__(self, store: _Transactions) -> None:
        self.store = store

    def now(self) -> datetime:
        return self.store.clock.now()

    def acquire(self, job: str, holder: str, ttl: float) -> Lease | None:
        with self.store.write() as db:
            return acquire(db, job, holder, now=self.now(), ttl=ttl)

    def renew(self, lease: Lease, ttl: float) -> Lease | None:
        with self.store.write() as db:
            return renew(db, lease, now=self.now(), ttl=ttl)

    def fence(self, db: Database, lease: Lease) -> None:
        fence(db, lease, now=self.now())

    def posting(self, lease: Lease, what: str) -> bool:
        """Its own write transaction just before a post (:func:`posting`): True when the post may be
        made; False (logged, never raised to the loop) when the holder was deposed."""
        try:
            with self.store.write() as db:
                posting(db, lease, what, now=self.now())
        except LeaseLost as lost:
            log.warning("not posting %s: %s", what, lost)
            return False
        return True

    def posting_of(self, job: str) -> str | None:
        """What the job's holder last recorded it was posting (None: nothing yet)."""
        with self.store.read() as db:
            row = db.execute("SELECT posting FROM leases WHERE job = ?", [job]).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def release(self, lease: Lease) -> bool:
        with self.store.write() as db:
            return release(db, lease)

    def get(self, job: str) -> Lease | None:
        """The job's lease as stored (running, run out or released); None for a job never held."""
        with self.store.read() as db:
            row = db.execute("SELECT holder, token, until FROM leases WHERE job = ?", [job]).fetchone()
        return None if row is None else _lease(job, str(row[0]), int(row[1]), str(row[2]))

    @contextmanager
    def held(
        self, lease: Lease, ttl: float, *, release: bool = True, every: float | None = None
    ) -> Iterator[LeaseHolding]:
        """Keep ``lease`` renewed every third of ``ttl`` while the block runs; the holding says whether
        it is still held (``lost`` once a renewal was refused). Released at the end, unless ``release``
        is False (a job whose work failed stays its holder's until the lease runs out, then is taken
        over as a dead holder's would be). ``every``: renew this often instead."""
        holding = LeaseHolding(lease)
        wait = every if every is not None else max(ttl / 3.0, 0.05)
        done = threading.Event()

        def keep() -> None:
            while not done.wait(wait):
                try:
                    renewed = self.renew(holding.lease, ttl)
                except Exception:  # noqa: BLE001 - a busy store: the next round tries again
                    log.warning("renewing the lease of %s failed; trying again", holding.lease.job, exc_info=True)
                    continue
                if renewed is None:
                    holding.lost = True
                    return
                holding.lease = renewed
                holding.renewals += 1

        thread = threading.Thread(target=keep, name=f"recover-lease-{lease.job}", daemon=True)
        thread.start()
        try:
            yield holding
        finally:
            done.set()
            thread.join(timeout=5)
            if release and not holding.lost:
                try:
                    self.release(holding.lease)
                except Exception:  # noqa: BLE001 - it runs out by itself
                    log.warning("releasing the lease of %s failed; it runs out by itself", holding.lease.job)


@dataclass
class LeaseHolding:
    """A lease being kept renewed (:meth:`Leases.held`): its latest form, and whether it was lost."""

    lease: Lease
    lost: bool = False
    renewals: int = 0
