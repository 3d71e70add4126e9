"""The watcher's tables: each stop's dedup key, committed (with its chain step) before anything is posted.

Two bot processes on one file, a restart or a SIGKILL between the commit and the post never post a
stop twice: the key's row is written under the store's ``BEGIN IMMEDIATE`` lock with the
``watch_stop`` step in the same commit, and only the process whose insert made the row posts. A
claim is held under a lease with a fencing token (bot/store/leases.py, job ``watch:<stop key>`` or
``handoff:<time>``, the runbook's ``watch: claim_lease``; the row keeps only the state): a process
killed between the commit and Slack's answer leaves the stop ``claimed`` until the lease runs out,
then one live watcher takes it over with the next token (:meth:`WatchStore.take_over`, under the same
lock) and looks for the stop's key in the channel before it posts, so it is neither missed nor said
twice; the marks after a post are fenced by the lease, so a deposed holder marks nothing. The rows'
``lease_until`` column (migration 0002) is no longer read: a claim with no lease row is run out.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.clock import isoformat
from bot.ids import DEFAULT_INSTALLATION
from bot.store import Store, leases
from bot.store.leases import Lease, LeaseLost
from bot.vocab import Step
from bot.watch.stops import Stop

migrations = Migrations("watch")
log = logging.getLogger(__name__)

#: A stop's states: to be posted as a case, in its case's thread (flapping), folded into the storm's
#: triage message, held in quiet hours (then ``digested``: said in the digest at the window's end),
#: held while watch is paused (``pause_held``: at resume named in one digest, and posted as usual when
#: still stuck); ``posted`` once Slack answered with its ts. ``suppressed`` is what a pause left in
#: stores written before pauses held their stops: never posted, counted.
CLAIMED, THREAD, STORM, SUPPRESSED, POSTED = "claimed", "thread", "storm", "suppressed", "posted"
HELD, DIGESTED, PAUSE_HELD = "held", "digested", "pause_held"
#: A shift change's hand-off, claimed with a lease like a stop (its row names no session and is never
#: active); ``handoff_posted`` once every part of it is in the channel.
HANDOFF, HANDOFF_POSTED = "handoff", "handoff_posted"
#: A stop already listed when watching began (``Watcher.note_known``): known, not new, so never posted
#: and never counted towards a storm; a later, different stop of the session is new as usual.
KNOWN = "known"
#: States of rows that are not stops: never counted as stops, never in a storm.
NOT_STOPS = (HANDOFF, HANDOFF_POSTED)
#: A burst's stops committed per transaction (:meth:`WatchStore.claim_many`).
CLAIM_CHUNK = 100


@migrations(name="0001_watch_stops_state")
def _m0001(db: Database) -> None:
    """Stops by key (one active per session and signature) and the watcher's shared state."""
    for sql in (
        """CREATE TABLE watch_stops (
            key TEXT PRIMARY KEY,
            installation TEXT NOT NULL,
            session_id TEXT NOT NULL,
            signature TEXT NOT NULL,
            revision INTEGER,
            first_seen_at TEXT NOT NULL,
            active INTEGER NOT NULL DEFAULT 1,
            state TEXT NOT NULL,
            claimed_by TEXT NOT NULL,
            channel TEXT,
            ts TEXT,
            root_ts TEXT,
            posted_at TEXT
        )""",
        # One live stop per session and signature, even with two processes on one file.
        """CREATE UNIQUE INDEX watch_stops_one_active
            ON watch_stops(installation, session_id, signature) WHERE active = 1""",
        "CREATE INDEX watch_stops_by_session ON watch_stops(installation, session_id, first_seen_at)",
        "CREATE INDEX watch_stops_by_time ON watch_stops(installation, first_seen_at)",
        "CREATE TABLE watch_state (installation TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, "
        "PRIMARY KEY (installation, name))",
    ):
        db.execute(sql)


@migrations(name="0002_watch_stops_lease")
def _m0002(db: Database) -> None:
    """A claim's lease: until when its owner may still be posting it (then a live watcher takes over)."""
    db.execute("ALTER TABLE watch_stops ADD COLUMN lease_until TEXT")


@dataclass(frozen=True)
class Claim:
    """A stop this process claimed: it, and only it, says it in the channel."""

    stop: Stop
    state: str
    thread_ts: str | None = None  # the case's root message, when the session is flapping
    #: Who may post it (bot/store/leases.py, job :func:`job_of`) with its fencing token: every post and
    #: mark is fenced by it. None for a stop said only inside another message (storm, digests).
    lease: Lease | None = None


def job_of(key: str, session_id: str, state: str) -> str:
    """A claim's lease job: ``watch:<stop key>`` for a stop, the change's own ``handoff:<time>`` for a
    shift change's hand-off (its row's session is that name)."""
    return str(session_id) if state in NOT_STOPS else f"watch:{key}"


def _recent(db: Database, installation: str, now: datetime, window: float) -> int:
    row = db.conn.execute(
        "SELECT COUNT(*) FROM watch_stops WHERE installation = ? AND first_seen_at >= ? "
        "AND state NOT IN (?, ?, ?, ?, ?, ?, ?)",
        [
            installation,
            _iso(now - timedelta(seconds=window)),
            SUPPRESSED,
            HELD,
            DIGESTED,
            PAUSE_HELD,
            KNOWN,
            *NOT_STOPS,
        ],
    ).fetchone()
    return int(row[0])


def _step_actor(owner: str) -> str:
    """Steps name the watcher (``watch``), not the process that owns the lease (``watch:host:pid:…``)."""
    return owner.split(":", 1)[0]


def _iso(when: datetime) -> str:
    text = isoformat(when)
    assert text is not None
    return text


class WatchStore:
    """The watch tables of one installation in the step store."""

    def __init__(self, store: Store, installation: str) -> None:
        store.require(migrations)
        self.store = store
        self.installation = installation

    def _stop(self, key: str, session_id: object, signature: str, revision: int | None) -> Stop:
        """The stop a row records, as this store's installation's (its key is the row's): a row of a
        named installation claimed before keys named the installation keeps its key as it was."""
        code, reason, failures, turn = json.loads(signature)
        stop = Stop(str(session_id), code, reason, failures, turn, revision, self.store.installation)
        return stop if stop.key == key else dataclasses.replace(stop, installation=DEFAULT_INSTALLATION)

    def claim(
        self,
        stop: Stop,
        *,
        actor: str,
        now: datetime,
        flap_window: float,
        storm_window: float,
        storm_threshold: int,
        paused: bool,
        quiet: bool = False,
        lease: float,
        burst: bool = False,
        known: bool = False,
    ) -> Claim | None:
        """Commit the stop's key, its lease (``actor`` owns it for ``lease`` seconds) and its
        ``watch_stop`` step, or None when it was already seen. ``burst``: the poll found more new stops
        than the threshold at once, so this one folds into the storm's triage message. ``known``: it was
        listed when watching began, so it is recorded as known and never said."""
        with self.store.write() as db:
            return self._claim(
                db,
                stop,
                actor=actor,
                now=now,
                flap_window=flap_window,
                storm_window=storm_window,
                storm_threshold=storm_threshold,
                paused=paused,
                quiet=quiet,
                lease=lease,
                burst=burst,
                known=known,
            )

    def claim_many(self, stops: list[Stop], *, chunk: int = CLAIM_CHUNK, **how: Any) -> list[Claim]:
        """:meth:`claim` for each of a burst's stops, ``chunk`` of them per commit (each row still
        committed with its step before anything is posted): a burst of 1,000 is a few commits, not
        1,000, so its first word is not kept waiting on fsyncs."""
        claims: list[Claim] = []
        for start in range(0, len(stops), chunk):
            with self.store.write() as db:
                for stop in stops[start : start + chunk]:
                    claim = self._claim(db, stop, **how)
                    if claim is not None:
                        claims.append(claim)
        return claims

    def _claim(
        self,
        db: Database,
        stop: Stop,
        *,
        actor: str,
        now: datetime,
        flap_window: float,
        storm_window: float,
        storm_threshold: int,
        paused: bool,
        quiet: bool = False,
        lease: float,
        burst: bool = False,
        known: bool = False,
    ) -> Claim | None:
        inst = self.installation
        conn = db.conn
        if conn.execute("SELECT 1 FROM watch_stops WHERE key = ?", [stop.key]).fetchone():
            return None
        same = conn.execute(
            "SELECT 1 FROM watch_stops WHERE installation = ? AND session_id = ? AND signature = ? AND active = 1",
            [inst, stop.session_id, stop.signature],
        ).fetchone()
        if same:
            return None  # the same stop, its revision moved on
        # What stopped it changed: the earlier stop of this session is over.
        conn.execute(
            "UPDATE watch_stops SET active = 0 WHERE installation = ? AND session_id = ? AND active = 1",
            [inst, stop.session_id],
        )
        case = conn.execute(
            "SELECT channel, root_ts FROM watch_stops WHERE installation = ? AND session_id = ? "
            "AND root_ts IS NOT NULL AND first_seen_at >= ? ORDER BY first_seen_at DESC LIMIT 1",
            [inst, stop.session_id, _iso(now - timedelta(seconds=flap_window))],
        ).fetchone()
        recent = _recent(db, inst, now, storm_window)
        thread_ts = None
        if known:
            state = KNOWN
        elif paused:
            state = PAUSE_HELD  # nothing found during a pause dies unseen: said at resume
        elif quiet:
            state = HELD
        elif case is not None:
            state, thread_ts = THREAD, str(case[1])
        elif burst or recent + 1 > storm_threshold:
            state = STORM
        else:
            state = CLAIMED
        lease_row = None
        if state in (CLAIMED, THREAD):  # said by this process alone: under a lease with its fencing token
            lease_row = leases.take_over(db, job_of(stop.key, stop.session_id, state), actor, now=now, ttl=lease)
            if lease_row is None:
                return None  # another holder's lease on this key still runs
        db.table("watch_stops").insert(
            {
                "key": stop.key,
                "installation": inst,
                "session_id": stop.session_id,
                "signature": stop.signature,
                "revision": stop.revision,
                "first_seen_at": _iso(now),
                "active": 1,
                "state": state,
                "claimed_by": actor,
                "root_ts": thread_ts,
            }
        )
        self.store.record_step(
            stop.session_id,
            _step_actor(actor),
            Step.WATCH_STOP,
            {"key": stop.key, "installation": inst, "revision": stop.revision},
            state,
            detail={
                "code": stop.code,
                "reason": stop.reason,
                "failures": stop.failures,
                "unknown_turn_id": stop.unknown_turn_id,
            },
            db=db,
            opens_case=state != KNOWN,  # known, not new: on the chain, no case nobody opened
        )
        return Claim(stop=stop, state=state, thread_ts=thread_ts, lease=lease_row)

    def take_over(self, *, actor: str, now: datetime, lease: float) -> list[Claim]:
        """Claims whose lease ran out unposted (their owner died between the commit and Slack's
        answer), now ``actor``'s under the next fencing token for ``lease`` seconds: the caller looks
        for each in the channel before it posts. Taken under the write lock, so one process takes each;
        a claim written before leases existed has no lease: run out (bot/store/leases.py)."""
        with self.store.write() as db:
            rows = db.conn.execute(
                "SELECT key, session_id, signature, revision, state, root_ts, claimed_by FROM watch_stops "
                "WHERE installation = ? AND state IN (?, ?, ?) AND posted_at IS NULL "
                "ORDER BY first_seen_at, session_id",
                [self.installation, CLAIMED, THREAD, HANDOFF],
            ).fetchall()
            taken: list[Claim] = []
            for key, sid, signature, revision, state, root_ts, owner in rows:
                got = leases.take_over(db, job_of(key, sid, state), actor, now=now, ttl=lease)
                if got is None:
                    continue  # its holder's lease still runs
                db.conn.execute("UPDATE watch_stops SET claimed_by = ? WHERE key = ?", [actor, key])
                stop = self._stop(key, sid, signature, revision)
                if state == HANDOFF:  # a shift change's post: on the chain outside any case
                    self.store.record_step(
                        None,
                        _step_actor(actor),
                        Step.HANDOFF,
                        {"shift_change": sid, "key": key},
                        "taken_over",
                        detail={"from": owner, "token": got.token},
                        db=db,
                    )
                    taken.append(
                        Claim(stop=stop, state=HANDOFF, thread_ts=str(root_ts) if root_ts else None, lease=got)
                    )
                    continue
                self.store.record_step(
                    stop.session_id,
                    _step_actor(actor),
                    Step.WATCH_STOP,
                    {"key": key, "installation": self.installation, "revision": revision},
                    "taken_over",
                    detail={"from": owner, "state": state, "token": got.token},
                    db=db,
                )
                taken.append(Claim(stop=stop, state=str(state), thread_ts=str(root_ts) if root_ts else None, lease=got))
        return taken

    def _fenced(self, lease: Lease | None, what: str, sql: str, args: list[Any]) -> bool:
        """One write transaction: ``lease`` fenced (still its holder's, same token, running), then the
        mark. False, nothing marked, when the holder was deposed (logged, never raised to the loop)."""
        try:
            with self.store.write() as db:
                if lease is not None:
                    leases.fence(db, lease, now=self.store.clock.now())
                db.conn.execute(sql, args)
        except LeaseLost as lost:
            log.warning("watch: not %s: %s", what, lost)
            return False
        return True

    def recent(self, *, now: datetime, window: float) -> int:
        """Stops said (or folded into a storm) within the storm window: what a burst adds to."""
        with self.store.read() as db:
            return _recent(db, self.installation, now, window)

    def active(self) -> set[tuple[str, str]]:
        """(session, signature) of every live stop, read once per poll: a stop already seen costs no
        write transaction (claim re-checks under the write lock)."""
        with self.store.read() as db:
            rows = db.conn.execute(
                "SELECT session_id, signature FROM watch_stops WHERE installation = ? AND active = 1",
                [self.installation],
            ).fetchall()
        return {(str(sid), str(sig)) for sid, sig in rows}

    def posted(
        self, key: str, channel: str, ts: str | None, *, root_ts: str | None, now: datetime, lease: Lease | None
    ) -> bool:
        """Where the stop was said (``root_ts``: the case's top-level message a flap replies under),
        fenced by the claim's lease in the same transaction: False (nothing marked) for a deposed holder."""
        return self._fenced(
            lease,
            f"marking {key} posted",
            "UPDATE watch_stops SET channel = ?, ts = ?, root_ts = COALESCE(root_ts, ?), posted_at = ?, "
            "state = CASE WHEN state IN (?, ?) THEN ? WHEN state = ? THEN ? ELSE state END WHERE key = ?",
            [channel, ts, root_ts, _iso(now), CLAIMED, THREAD, POSTED, HANDOFF, HANDOFF_POSTED, key],
        )

    def settle(self, listed: set[str], *, now: datetime, keep_for: float) -> None:
        """After a complete listing: stops of sessions no longer listed are over; over stops older than
        the dedup window are forgotten."""
        with self.store.write() as db:
            rows = db.conn.execute(
                "SELECT key, session_id FROM watch_stops WHERE installation = ? AND active = 1",
                [self.installation],
            ).fetchall()
            gone = [key for key, sid in rows if sid not in listed]
            db.conn.executemany("UPDATE watch_stops SET active = 0 WHERE key = ?", [[k] for k in gone])
            db.conn.execute(
                "DELETE FROM watch_stops WHERE installation = ? AND active = 0 AND first_seen_at < ?",
                [self.installation, _iso(now - timedelta(seconds=keep_for))],
            )

    def take_held(self, *, actor: str) -> list[tuple[str, str]]:
        """The stops held in quiet hours, taken by exactly one process for the one digest (committed
        with its ``watch_digest`` step before the digest is posted, like every stop)."""
        with self.store.write() as db:
            rows = db.conn.execute(
                "SELECT key, session_id, signature FROM watch_stops WHERE installation = ? AND state = ? "
                "ORDER BY first_seen_at, session_id",
                [self.installation, HELD],
            ).fetchall()
            if not rows:
                return []
            db.conn.executemany("UPDATE watch_stops SET state = ? WHERE key = ?", [[DIGESTED, r[0]] for r in rows])
            self.store.record_step(
                None,
                actor,
                Step.WATCH_DIGEST,
                {"installation": self.installation},
                "taken",
                detail={"stops": len(rows)},
                db=db,
            )
        return [(str(sid), str(sig)) for _, sid, sig in rows]

    def take_pause_held(
        self, *, actor: str, now: datetime, lease: float, storm_window: float, storm_threshold: int
    ) -> tuple[list[Claim], list[tuple[str, str]]]:
        """The pause is over: the stops held meanwhile, taken by exactly one process (committed with
        their ``watch_digest`` step before anything is posted). Returns the still-stuck ones as claims
        owned by ``actor`` for ``lease`` seconds (folded into the storm when they are more than the
        threshold, as a burst is), and the (session, signature) of those that recovered meanwhile (no
        longer listed), which are only named. A kill after the commit leaves the claims to be taken over."""
        with self.store.write() as db:
            rows = db.conn.execute(
                "SELECT key, session_id, signature, revision, active FROM watch_stops "
                "WHERE installation = ? AND state = ? ORDER BY first_seen_at, session_id",
                [self.installation, PAUSE_HELD],
            ).fetchall()
            if not rows:
                return [], []
            stuck = [r for r in rows if r[4]]
            over = [r for r in rows if not r[4]]
            storm = len(stuck) + _recent(db, self.installation, now, storm_window) > storm_threshold
            state = STORM if storm else CLAIMED
            db.conn.executemany(
                "UPDATE watch_stops SET state = ?, claimed_by = ? WHERE key = ?",
                [[state, actor, r[0]] for r in stuck],
            )
            held: dict[str, Lease | None] = {}
            for r in stuck:  # each case said by this process alone, under its lease (a storm's are not)
                if state == CLAIMED:
                    held[str(r[0])] = leases.take_over(db, job_of(r[0], r[1], state), actor, now=now, ttl=lease)
            db.conn.executemany("UPDATE watch_stops SET state = ? WHERE key = ?", [[DIGESTED, r[0]] for r in over])
            self.store.record_step(
                None,
                _step_actor(actor),
                Step.WATCH_DIGEST,
                {"installation": self.installation},
                "pause_over",
                detail={"still_stuck": len(stuck), "recovered": len(over), "storm": storm},
                db=db,
            )
        claims = []
        for key, sid, signature, revision, _active in stuck:
            if state == CLAIMED and held.get(key) is None:
                continue  # another holder's lease on it still runs: it is that holder's to say
            claims.append(Claim(stop=self._stop(key, sid, signature, revision), state=state, lease=held.get(key)))
        return claims, [(str(r[1]), str(r[2])) for r in over]

    def counts(self) -> dict[str, int]:
        with self.store.read() as db:
            rows = db.conn.execute(
                "SELECT state, COUNT(*) FROM watch_stops WHERE installation = ? AND state NOT IN (?, ?) GROUP BY state",
                [self.installation, *NOT_STOPS],
            ).fetchall()
        return {str(state): int(n) for state, n in rows}

    # -- shared state (pause, the storm message, the last poll) ---------------------------------

    def get(self, name: str) -> dict[str, Any] | None:
        with self.store.read() as db:
            row = db.conn.execute(
                "SELECT value FROM watch_state WHERE installation = ? AND name = ?", [self.installation, name]
            ).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, name: str, value: dict[str, Any], *, db: Database | None = None) -> None:
        sql = "INSERT OR REPLACE INTO watch_state (installation, name, value) VALUES (?, ?, ?)"
        args = [self.installation, name, json.dumps(value, sort_keys=True)]
        if db is not None:
            db.conn.execute(sql, args)
            return
        with self.store.write() as wdb:
            wdb.conn.execute(sql, args)

    def claim_handoff(self, name: str, *, actor: str, now: datetime, lease: float) -> Claim | None:
        """Claim the shift change ``name`` (``handoff:<time>``) for ``actor`` for ``lease`` seconds, as
        a stop is claimed: the row and its ``handoff`` step in one commit before anything is posted,
        so one process posts it; if that process dies before every part is posted, the claim is taken
        over (:meth:`take_over`) once its lease runs out. None when it was claimed already."""
        stop = Stop(name, None, None, None, None, None, self.store.installation)
        with self.store.write() as db:
            conn = db.conn
            legacy = conn.execute(  # a change claimed before hand-offs had a lease
                "SELECT 1 FROM watch_state WHERE installation = ? AND name = ?", [self.installation, name]
            ).fetchone()
            if legacy or conn.execute("SELECT 1 FROM watch_stops WHERE key = ?", [stop.key]).fetchone():
                return None
            got = leases.take_over(db, job_of(stop.key, name, HANDOFF), actor, now=now, ttl=lease)
            if got is None:
                return None  # another holder's lease on this change still runs
            db.table("watch_stops").insert(
                {
                    "key": stop.key,
                    "installation": self.installation,
                    "session_id": name,
                    "signature": stop.signature,
                    "revision": None,
                    "first_seen_at": _iso(now),
                    "active": 0,
                    "state": HANDOFF,
                    "claimed_by": actor,
                }
            )
            self.store.record_step(
                None,
                _step_actor(actor),
                Step.HANDOFF,
                {"shift_change": name.removeprefix("handoff:")},
                "posted_by_watch",
                db=db,
            )
        return Claim(stop=stop, state=HANDOFF, lease=got)

    def rooted(self, key: str, channel: str, ts: str, *, lease: Lease | None) -> bool:
        """Where a hand-off's head was posted (its parts follow in its thread; the claim stays open),
        fenced like :meth:`posted`."""
        return self._fenced(
            lease,
            f"recording the head of {key}",
            "UPDATE watch_stops SET channel = ?, root_ts = ? WHERE key = ?",
            [channel, ts, key],
        )

    def seen_since(self, since: datetime) -> int:
        with self.store.read() as db:
            row = db.conn.execute(
                "SELECT COUNT(*) FROM watch_stops WHERE installation = ? AND first_seen_at >= ? "
                "AND state NOT IN (?, ?)",
                [self.installation, _iso(since), *NOT_STOPS],
            ).fetchone()
        return int(row[0])

    def claim_storm(self, *, now: datetime, window: float, actor: str) -> tuple[str, str | None]:
        """Who says the storm: ``("post", None)`` for the process that opens it, ``("update", ts)``
        once its message exists, ``("skip", None)`` while another process is posting it."""
        with self.store.write() as db:
            row = db.conn.execute(
                "SELECT value FROM watch_state WHERE installation = ? AND name = 'storm'", [self.installation]
            ).fetchone()
            value = json.loads(row[0]) if row else None
            if value is not None and value.get("last", "") >= _iso(now - timedelta(seconds=window)):
                value["last"] = _iso(now)
                self.put("storm", value, db=db)
                return ("update", value["ts"]) if value.get("ts") else ("skip", None)
            self.put("storm", {"opened_by": actor, "last": _iso(now), "ts": None}, db=db)
            return ("post", None)

    def storm_posted(self, channel: str, ts: str) -> None:
        value = self.get("storm") or {}
        value.update({"channel": channel, "ts": ts})
        self.put("storm", value)
