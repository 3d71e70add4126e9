"""A two-person request's due ladder steps as store rows, and the fence every ending path passes.

The rows (``escalation_steps``) are made with the request, in its transaction; the runner
(bot/escalation) claims, posts and marks them. This module holds what the decisions core itself must
do with them, so that a reminder is never posted after the request was decided, withdrawn, voided or
expired (the argument is in bot/escalation/runner.py):

- :func:`fence`, before an ending transition's write transaction: the request's claimable rows are
  *held* (no runner may claim them while held), then it waits, bounded by the lease, until no claim
  of the request is in flight;
- :func:`settle`, inside :meth:`RequestStore.transition` (the one place a state changes), when the
  request leaves ``requested``/``recheck``: a claim still in flight refuses the transition
  (:class:`LadderBusy`, rolled back: only if the hold lapsed between the fence and the commit), and
  every row not yet claimed is cancelled in the same commit — except the expiry's announcement, which
  an expiry leaves due; a dead owner's lapsed claim is left for a runner to look for in the thread.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.clock import Clock, isoformat
from bot.errors import DecisionError
from bot.messages import Button, Message, plain
from bot.store import Store

migrations = Migrations("escalation")
ROWS = "escalation_steps"
#: A row's states: ``due`` (claimable from ``due_at``), ``held`` (an ending path is deciding the request),
#: ``claimed`` (a runner posts it under its lease), ``posted``, ``cancelled`` (the request ended first),
#: ``unsaid`` (due, but the front had nowhere to say it, e.g. no thread of the request's found: claimable
#: again on every pass, and never counted as said; see :func:`unsaid_steps`).
DUE, HELD, CLAIMED, POSTED, CANCELLED, UNSAID = "due", "held", "claimed", "posted", "cancelled", "unsaid"
#: The expiry's announcement is row -1 of a request (kind ``expired``): due at the expiry.
EXPIRY_INDEX = -1
PENDING = ("requested", "recheck")
#: How long an ending path holds the rows (it commits well within this; a crash lets them go).
HOLD_SECONDS = 30.0
#: A claim's lease: the runner posts only with at least POST_MARGIN of it left, and Slack's client
#: times out within that margin, so no post happens after the lease (bot/escalation/runner.py).
LEASE_SECONDS = 30.0
POST_MARGIN = 20.0


@migrations(name="0001_escalation_steps")
def _m0001(db: Database) -> None:
    """Each due ladder step of a request, and the request's live line and remind bookkeeping."""
    for sql in (
        f"""CREATE TABLE {ROWS} (
            request_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            session_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            due_at TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'due',
            claimed_by TEXT,
            lease_until TEXT,
            held_until TEXT,
            posted_at TEXT,
            ts TEXT,
            PRIMARY KEY (request_id, idx))""",
        f"CREATE INDEX {ROWS}_due ON {ROWS}(state, due_at)",
        """CREATE TABLE escalation_live (
            request_id TEXT PRIMARY KEY,
            edited_at TEXT,
            next_edit_at TEXT,
            message TEXT)""",
    ):
        db.execute(sql)


class LadderBusy(DecisionError):
    """A ladder step of the request is being posted right now: the decision waits for it (retry)."""


def _iso(when: datetime) -> str:
    text = isoformat(when)
    assert text is not None
    return text


def enabled(store: Store) -> bool:
    return store.applied(migrations.name)


def schedule(db: Database, store: Store, request: Any, steps: Sequence[tuple[str, float]], expiry: str) -> None:
    """The rows of a new request (in its transaction): each ladder step (kind, seconds from the
    request) and the expiry's announcement at ``expiry``."""
    if not enabled(store):
        return
    from bot.clock import parse_time

    created = parse_time(request.created_at)
    assert created is not None
    rows: list[dict[str, Any]] = [
        {
            "request_id": request.id,
            "idx": i,
            "session_id": request.session_id,
            "kind": kind,
            "due_at": _iso(created + timedelta(seconds=after)),
            "state": DUE,
        }
        for i, (kind, after) in enumerate(steps)
    ]
    rows.append(
        {
            "request_id": request.id,
            "idx": EXPIRY_INDEX,
            "session_id": request.session_id,
            "kind": "expired",
            "due_at": expiry,
            "state": DUE,
        }
    )
    db.table(ROWS).insert_all(rows)


def fence(store: Store, clock: Clock, request_id: str, *, wait: float = LEASE_SECONDS) -> None:
    """Before an ending transition: hold the request's claimable rows, then wait (at most ``wait``)
    until no claim of it is in flight. Holding needs no undo: a hold lapses by itself."""
    if not enabled(store):
        return
    deadline = clock.now() + timedelta(seconds=wait)
    # A post takes real time whatever the store's clock says (a simulated one never moves by itself).
    real_deadline = time.monotonic() + wait
    while True:
        now = clock.now()
        with store.write() as db:
            db.execute(
                f"UPDATE {ROWS} SET state = ?, held_until = ? WHERE request_id = ? AND idx <> ? AND "  # noqa: S608
                "(state IN (?, ?) OR (state = ? AND held_until < ?) OR (state = ? AND lease_until < ?))",
                [
                    HELD,
                    _iso(now + timedelta(seconds=HOLD_SECONDS)),
                    request_id,
                    EXPIRY_INDEX,
                    DUE,
                    UNSAID,
                    HELD,
                    _iso(now),
                    CLAIMED,
                    _iso(now),
                ],
            )
            live = _in_flight(db, request_id, now)
        if not live or now >= deadline or time.monotonic() >= real_deadline:
            return
        time.sleep(0.01)


def _in_flight(db: Database, request_id: str, now: datetime) -> bool:
    row = db.execute(
        f"SELECT 1 FROM {ROWS} WHERE request_id = ? AND state = ? AND lease_until >= ? LIMIT 1",  # noqa: S608
        [request_id, CLAIMED, _iso(now)],
    ).fetchone()
    return row is not None


def settle(db: Database, store: Store, request_id: str, before: str, to_state: str, now: datetime) -> None:
    """Inside the transition's transaction: the request leaves pending → refuse while a claim is in
    flight, else cancel every unposted row (an expiry keeps its announcement due)."""
    if before not in PENDING or to_state in PENDING or not enabled(store):
        return
    if _in_flight(db, request_id, now):
        raise LadderBusy(
            f"a ladder step of request {request_id} is being posted right now",
            hint="Try again in a few seconds; nothing was changed.",
        )
    keep = [EXPIRY_INDEX] if to_state == "expired" else []
    marks = "".join(f" AND idx <> {int(k)}" for k in keep)
    # A claim whose owner died mid-post stays claimed: a runner looks for it in the thread, marks it
    # posted if it is there, cancels it if not (never posts it: the request has ended).
    db.execute(
        f"UPDATE {ROWS} SET state = ? WHERE request_id = ? AND state IN (?, ?, ?){marks}",  # noqa: S608
        [CANCELLED, request_id, DUE, HELD, UNSAID],
    )


def unsaid_steps(store: Store, request_id: str) -> list[int]:
    """The request's ladder steps (not the expiry's announcement) that were due and taken up but are not
    known to have been said: the front found nowhere to post them (``unsaid``), or a claim Slack has
    not confirmed (``claimed``: in flight, or its post failed and a runner will look and post again).

    The one reading of "a step was not said", for break-glass (it opens only at the end of a ladder
    the approvers saw), the ladder's end and ``pending``. A ``due`` row a runner never reached
    is not in it: the window rule (bot/decisions/_glassrule.py) is about time only."""
    if not enabled(store):
        return []
    with store.read() as db:
        rows = db.execute(
            f"SELECT idx FROM {ROWS} WHERE request_id = ? AND idx <> ? AND state IN (?, ?) ORDER BY idx",  # noqa: S608
            [request_id, EXPIRY_INDEX, UNSAID, CLAIMED],
        ).fetchall()
    return [int(r[0]) for r in rows]


def remember_message(store: Store, request_id: str, message: Message) -> None:
    """The approval request as first shown, so its live line is edited into exactly that message
    (the runbook's warnings as they were read then, not as a re-read would word them)."""
    if not enabled(store):
        return
    shown = {
        "headline": message.headline,
        "level": message.level,
        "lines": [plain(x) for x in message.lines],
        "facts": [list(f) for f in message.facts],
        "rules": list(message.rules),
        "mentions": list(message.mentions),
        "buttons": [[b.label, b.action, b.value, b.command, b.style, b.confirm] for b in message.buttons],
        "session_id": message.session_id,
        "kind": message.kind,
        "ref": message.ref,
    }
    with store.write() as db:
        db.execute(
            "INSERT INTO escalation_live (request_id, message) VALUES (?, ?) "
            "ON CONFLICT(request_id) DO UPDATE SET message = excluded.message",
            [request_id, json.dumps(shown)],
        )


def shown_message(store: Store, request_id: str) -> Message | None:
    """The approval request as :func:`remember_message` kept it."""
    with store.read() as db:
        row = db.execute("SELECT message FROM escalation_live WHERE request_id = ?", [request_id]).fetchone()
    if row is None or not row[0]:
        return None
    d = json.loads(row[0])
    return Message(
        headline=d["headline"],
        level=d["level"],
        lines=list(d["lines"]),
        facts=[(k, v) for k, v in d["facts"]],
        rules=list(d["rules"]),
        mentions=list(d["mentions"]),
        # An irreversible Approve keeps its confirm dialog (R5.4); rows kept before it was stored have none.
        buttons=[
            Button(b[0], b[1], b[2], command=b[3], style=b[4], confirm=b[5] if len(b) > 5 else None)
            for b in d["buttons"]
        ],
        session_id=d["session_id"],
        kind=d["kind"],
        ref=d["ref"],
    )
