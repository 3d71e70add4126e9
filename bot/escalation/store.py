"""The ladder's rows as the runner uses them: claim a due step with a lease (its chain step in the
same commit), take over a dead owner's claim, mark a step posted; the requester's early ``remind``.

The rows themselves, and what the decisions core does with them when a request ends (hold, cancel,
refuse while a post is in flight), are in bot/decisions/_ladder_rows.py; the argument that no
reminder follows a decision is in bot/escalation/runner.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlite_utils import Database

from bot.clock import isoformat, parse_time
from bot.decisions._ladder_rows import (
    CANCELLED,
    CLAIMED,
    DUE,
    EXPIRY_INDEX,
    HELD,
    PENDING,
    POSTED,
    ROWS,
    UNSAID,
    migrations,
)
from bot.store import Store, leases
from bot.store.leases import Lease
from bot.vocab import Step

log = logging.getLogger("bot.escalation")

__all__ = ["Claim", "LadderStore", "migrations"]

_STEP_OF_KIND = {
    "remind": Step.ESCALATION_REMINDED,
    "mention": Step.ESCALATION_MENTIONED,
    "widen": Step.ESCALATION_WIDENED,
    "expired": Step.ESCALATION_EXPIRED,
}


@dataclass(frozen=True)
class Claim:
    """A ladder step this process owns until ``lease_until``: it, and only it, posts it.
    ``taken_over``: a dead owner's claim; look for it in the thread before posting."""

    request_id: str
    index: int
    kind: str
    session_id: str
    lease_until: datetime
    taken_over: bool = False
    inputs: Mapping[str, Any] | None = None
    ended: bool = False  # the request ended since: found in the thread → posted, else cancelled
    #: The step's lease (job :func:`job_of`) with its fencing token: every post and mark is fenced by
    #: it. None only for a requester's ``remind`` mention in place of a widening (no row, no job).
    lease: Lease | None = None


def job_of(request_id: str, index: int) -> str:
    """The lease job of a ladder step (``ladder:<request id>:<step index>``; :meth:`LadderStore.due`
    builds the same text in SQL)."""
    return f"ladder:{request_id}:{index}"


def job_key(job: str) -> tuple[str, int]:
    """(request, index) of a ladder step's job (request ids hold no colon)."""
    _, rest = job.split(":", 1)
    request_id, index = rest.rsplit(":", 1)
    return request_id, int(index)


def _iso(when: datetime) -> str:
    text = isoformat(when)
    assert text is not None
    return text


class LadderStore:
    """The ``escalation_steps`` rows, claimed under the store's write lock."""

    def __init__(self, store: Store) -> None:
        store.require(migrations)
        self.store = store

    def due(self, now: datetime, limit: int = 50) -> list[tuple[str, int]]:
        """(request, index) of rows a runner may try to claim now (read without the lock)."""
        n = _iso(now)
        with self.store.read() as db:
            # A claimed row is claimable once its lease is not running (a row from before leases has none).
            rows = db.execute(
                f"SELECT request_id, idx FROM {ROWS} r WHERE due_at <= ? AND (state IN (?, ?) OR "  # noqa: S608
                "(state = ? AND held_until < ?) OR (state = ? AND NOT EXISTS (SELECT 1 FROM leases l "
                "WHERE l.job = 'ladder:' || r.request_id || ':' || r.idx AND l.until >= ?))) "
                "ORDER BY due_at, idx LIMIT ?",
                [n, DUE, UNSAID, HELD, n, CLAIMED, n, limit],
            ).fetchall()
        return [(str(r), int(i)) for r, i in rows]

    def claim(
        self,
        request_id: str,
        index: int,
        *,
        owner: str,
        now: datetime,
        lease: float,
        inputs: Mapping[str, Any],
        early_by: str | None = None,
        remind_interval: float | None = None,
    ) -> Claim | str:
        """Claim one row in one write transaction that also checks the request is still pending (the
        expiry's announcement: that it expired), and record the step's chain step in the same commit.

        Returns the :class:`Claim`, or why not (``"gone"``: nothing to do for it any more;
        ``"busy"``: someone else holds or owns it; ``"early"``: ``remind`` ran within its interval,
        the text says until when). ``early_by``: the requester's ``remind`` runs it before its time."""
        n = _iso(now)
        job = job_of(request_id, index)
        with self.store.write() as db:
            row = db.execute(
                f"SELECT r.kind, r.session_id, r.state, r.due_at, r.held_until, d.state, r.claimed_by "  # noqa: S608
                f"FROM {ROWS} r JOIN decision_requests d ON d.id = r.request_id WHERE r.request_id = ? AND r.idx = ?",
                [request_id, index],
            ).fetchone()
            if row is None:
                return "gone"
            kind, sid, state, due_at, held_until, req_state, previous_owner = row
            if state in (POSTED, CANCELLED):
                return "gone"
            # Who may post is the lease's (bot/store/leases.py); a claim written before leases has none: run out.
            if state == CLAIMED and leases.running(db, job, now=now) is not None:
                return "busy"  # its holder is posting it (or may be, until its lease ends)
            wanted = ("expired",) if index == EXPIRY_INDEX else PENDING
            if req_state not in wanted and state == CLAIMED:
                # Its owner died mid-post and the request has ended since: look in the thread only.
                got = self._lease(db, job, owner, now, lease_s=lease)
                if got is None:
                    return "busy"
                return Claim(request_id, index, str(kind), str(sid), got.until, True, ended=True, lease=got)
            if req_state not in wanted:
                if index != EXPIRY_INDEX or req_state not in PENDING:
                    # The request ended (or was decided before it expired): this step never comes.
                    db.execute(
                        f"UPDATE {ROWS} SET state = ? WHERE request_id = ? AND idx = ?",  # noqa: S608
                        [CANCELLED, request_id, index],
                    )
                    return "gone"
                return "busy"  # the expiry is due but not yet recorded: expire it first
            if state == HELD and (held_until or "") >= n:
                return "busy"
            if early_by is None and due_at > n:
                return "busy"
            if early_by is not None and remind_interval is not None:
                last = self._last_early(request_id)
                if last is not None and last + timedelta(seconds=remind_interval) > now:
                    return "early:" + _iso(last + timedelta(seconds=remind_interval))
            taken_over = state == CLAIMED
            lease_row = self._lease(db, job, owner, now, lease_s=lease, state=CLAIMED)
            if lease_row is None:
                return "busy"  # a lease of this step still runs (a row put back to claimable meanwhile)
            step_inputs = {"request_id": request_id, "step": index, "kind": kind, **inputs}
            if early_by is not None:
                step_inputs.update({"early": True, "by": early_by})
            if taken_over:
                self.store.record_step(
                    sid,
                    _actor(owner),
                    _STEP_OF_KIND[kind],
                    {
                        "request_id": request_id,
                        "step": index,
                        "kind": kind,
                        "taken_over_from": previous_owner,
                        "token": lease_row.token,
                    },
                    "taken_over",
                    db=db,
                    opens_case=False,
                )
            else:
                self.store.record_step(
                    sid, _actor(owner), _STEP_OF_KIND[kind], step_inputs, "claimed", db=db, opens_case=False
                )
        return Claim(
            request_id,
            index,
            str(kind),
            str(sid),
            lease_row.until,
            taken_over,
            None if taken_over else step_inputs,
            lease=lease_row,
        )

    def _lease(
        self, db: Database, job: str, owner: str, now: datetime, *, lease_s: float, state: str | None = None
    ) -> Lease | None:
        """Inside the claim's transaction: the step's lease for ``owner`` (the next token when a dead
        holder's ran out), and the row marked as its (``claimed_by``/``lease_until`` mirror the lease
        for the decisions core's in-flight check, bot/decisions/_ladder_rows.py; the lease decides)."""
        got = leases.take_over(db, job, owner, now=now, ttl=lease_s)
        if got is None:
            return None
        db.execute(
            f"UPDATE {ROWS} SET state = COALESCE(?, state), claimed_by = ?, lease_until = ? "  # noqa: S608
            "WHERE request_id = ? AND idx = ?",
            [state, owner, _iso(got.until), *job_key(job)],
        )
        return got

    def record_instead(
        self,
        request_id: str,
        index: int,
        *,
        owner: str,
        by: str,
        now: datetime,
        remind_interval: float,
        inputs: Mapping[str, Any],
    ) -> Mapping[str, Any] | str:
        """The requester's ``remind`` when the next step is a widening (its time stays the clock's: the
        requester never widens their own approvers) or the ladder ran to its end: a mention instead,
        rate-limited like every ``remind``, its chain step committed before it is posted."""
        with self.store.write() as db:
            row = db.execute("SELECT session_id, state FROM decision_requests WHERE id = ?", [request_id]).fetchone()
            if row is None or row[1] not in PENDING:
                return "gone"
            last = self._last_early(request_id)
            if last is not None and last + timedelta(seconds=remind_interval) > now:
                return "early:" + _iso(last + timedelta(seconds=remind_interval))
            step_inputs = {
                "request_id": request_id,
                "step": index,
                "kind": "mention",
                "instead": True,
                "early": True,
                "by": by,
                "at": _iso(now),
                **inputs,
            }
            self.store.record_step(
                str(row[0]), _actor(owner), Step.ESCALATION_MENTIONED, step_inputs, "claimed", db=db, opens_case=False
            )
        return step_inputs

    def early_allowed_at(self, request_id: str, remind_interval: float) -> datetime | None:
        """When the requester's next ``remind`` is allowed (None: now)."""
        last = self._last_early(request_id)
        return None if last is None else last + timedelta(seconds=remind_interval)

    def _last_early(self, request_id: str) -> datetime | None:
        """When the requester's last ``remind`` ran, from the chain (its steps say ``early``)."""
        sid = self._session(request_id)
        last: datetime | None = None
        for s in self.store.steps(session_id=sid):
            if s.inputs.get("request_id") == request_id and s.inputs.get("early") and s.step in _STEP_OF_KIND.values():
                last = parse_time(s.at)
        return last

    def _session(self, request_id: str) -> str | None:
        with self.store.read() as db:
            row = db.execute("SELECT session_id FROM decision_requests WHERE id = ?", [request_id]).fetchone()
        return str(row[0]) if row else None

    def claimed_inputs(self, request_id: str, index: int) -> Mapping[str, Any]:
        """What the chain recorded when the step was first claimed (a take-over posts exactly that)."""
        sid = self._session(request_id)
        for s in self.store.steps(session_id=sid):
            if (
                s.inputs.get("request_id") == request_id
                and s.inputs.get("step") == index
                and s.step in _STEP_OF_KIND.values()
                and s.outcome == "claimed"
            ):
                return dict(s.inputs)
        return {}

    def posting(self, claim: Claim) -> bool:
        """Just before the step's post, its own write transaction: the lease fenced and the post
        recorded under its token (bot/store/leases.py). False: the holder was deposed (a live runner
        took the step over with a higher token), so it posts nothing (logged, not raised)."""
        if claim.lease is None:
            return True  # a remind's mention instead of a widening: the requester's own command, no job
        return self.store.leases.posting(claim.lease, f"step {claim.index} of {claim.request_id}")

    def posted(self, claim: Claim, ts: str | None, now: datetime) -> bool:
        """Mark the step posted, fenced in the same transaction: a deposed holder marks nothing."""
        return self._mark(claim, "marking it posted", POSTED, posted_at=_iso(now), ts=ts)

    def _mark(self, claim: Claim, what: str, state: str, **values: Any) -> bool:
        """Set a claimed row's state (and ``values``), fenced by the claim's lease in the same write
        transaction; its lease released after (the row's state says the rest). False: deposed."""
        sets = "".join(f", {k} = ?" for k in values)
        try:
            with self.store.write() as db:
                if claim.lease is not None:
                    leases.fence(db, claim.lease, now=self.store.clock.now())
                db.execute(
                    f"UPDATE {ROWS} SET state = ?{sets} WHERE request_id = ? AND idx = ? AND state = ?",  # noqa: S608
                    [state, *values.values(), claim.request_id, claim.index, CLAIMED],
                )
                if claim.lease is not None:
                    leases.release(db, claim.lease)
        except leases.LeaseLost as lost:
            log.warning("escalation: not %s: %s", what, lost)
            return False
        return True

    def unsaid(self, request_id: str, index: int) -> bool:
        """A due step the front has nowhere to say: left claimable (the next pass tries again), never
        marked posted. True the first time (so the runner reports it once, not every pass)."""
        with self.store.write() as db:
            cur = db.execute(
                f"UPDATE {ROWS} SET state = ? WHERE request_id = ? AND idx = ? AND state = ?",  # noqa: S608
                [UNSAID, request_id, index, DUE],
            )
            return cur.rowcount == 1

    def unclaim(self, claim: Claim) -> bool:
        """A claimed step found nowhere to go after all: back to ``unsaid`` (its lease given up)."""
        return self._mark(claim, "giving it up", UNSAID, claimed_by=None, lease_until=None)

    def cancel(self, claim: Claim) -> bool:
        return self._mark(claim, "cancelling it", CANCELLED)

    def states(self, request_id: str) -> dict[int, str]:
        with self.store.read() as db:
            rows = db.execute(f"SELECT idx, state FROM {ROWS} WHERE request_id = ?", [request_id]).fetchall()  # noqa: S608
        return {int(i): str(s) for i, s in rows}

    def counts(self) -> dict[str, int]:
        with self.store.read() as db:
            rows = db.execute(f"SELECT state, COUNT(*) FROM {ROWS} GROUP BY state").fetchall()  # noqa: S608
        return {str(s): int(n) for s, n in rows}

    # -- the live line ------------------------------------------------------------------------------

    def claim_live(self, request_id: str, now: datetime, interval: float) -> bool:
        """True for the one process that may edit the request's live line now (then not again for
        ``interval``): at most one edit per request per interval, however many runners there are."""
        with self.store.write() as db:
            db.execute("INSERT OR IGNORE INTO escalation_live (request_id) VALUES (?)", [request_id])
            cur = db.execute(
                "UPDATE escalation_live SET next_edit_at = ? WHERE request_id = ? "
                "AND (next_edit_at IS NULL OR next_edit_at <= ?)",
                [_iso(now + timedelta(seconds=interval)), request_id, _iso(now)],
            )
            return cur.rowcount == 1

    def live_edited(self, request_id: str, now: datetime, wait: float) -> None:
        """The next edit waits ``wait`` seconds (a 429's Retry-After); the kept message is left as it is."""
        with self.store.write() as db:
            db.execute(
                "UPDATE escalation_live SET edited_at = ?, next_edit_at = ? WHERE request_id = ?",
                [_iso(now), _iso(now + timedelta(seconds=wait)), request_id],
            )


def _actor(owner: str) -> str:
    """Steps name the ladder (``escalation``), not the process owning the lease (``escalation:host:pid``)."""
    return owner.split(":", 1)[0]
