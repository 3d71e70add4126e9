"""A ``decide`` identical to an open request on the same session points to it instead of making a second.

Why: the same decision arrives twice through a replayed or re-delivered Slack request, a double submit
of the form, or two people typing the same line; a second request would ask for a second approval and
could send a second POST with a new Idempotency-Key. Identical means the same session, decision, turn,
evidence, effects account, reason and requester; open means any state before a final one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlite_utils import Database

from bot.decisions._requests import OPEN_STATES, REQUESTS, DecisionRequest, RequestStore
from bot.decisions._text import irreversible_line
from bot.messages import Button, Message, approval_buttons
from bot.runbook.usage import typed_line
from bot.vocab import Policy, RequestState

_FIELDS = ("session_id", "decision", "requester", "turn_id", "evidence_ref", "effects", "reason")


def identical_open(
    requests: RequestStore, content: Mapping[str, Any], *, db: Database | None = None
) -> DecisionRequest | None:
    """The open request with the same content as ``content``, if any (inside ``db``'s transaction)."""
    if db is None:
        with requests.store.read() as rdb:
            return identical_open(requests, content, db=rdb)
    marks = ", ".join("?" for _ in OPEN_STATES)
    where = " AND ".join(f"{name} IS ?" for name in _FIELDS)  # IS: NULL matches NULL
    rows = db.table(REQUESTS).rows_where(
        f"{where} AND state IN ({marks})",
        [*(content.get(name) for name in _FIELDS), *OPEN_STATES],
        select="id",
        order_by="created_at",
        limit=1,
    )
    row = next(rows, None)
    return requests.get(str(row["id"]), db=db) if row else None


def repeats(same: DecisionRequest | None, *, yes: bool) -> DecisionRequest | None:
    """``same`` unless this decide carries the confirmation the earlier one was waiting for (``--yes``
    after a single-person request asked for it): that one proceeds as a confirmed decide."""
    if same is None or (yes and same.state == RequestState.REQUESTED and same.policy != Policy.TWO_PERSON):
        return None
    return same


def pointer_message(req: DecisionRequest, *, irreversible: bool = False) -> Message:
    """What a repeated ``decide`` answers: the existing request, and how to act on it."""
    lines = [f"Nothing new was created: this is request `{req.id}` again, made at {req.created_at}."]
    buttons: list[Button] = []
    if req.state == RequestState.REQUESTED and req.policy == Policy.TWO_PERSON:
        lines.append(f"It waits for a second person: {typed_line('approve', req.id)}")
        if irreversible:
            lines.append(irreversible_line(req.decision))
        buttons.append(approval_buttons(req.id, req.decision, req.session_id, irreversible=irreversible)[0])
    elif req.state == RequestState.REQUESTED:
        lines.append(
            f"It waits for its confirmation: the button, or {typed_line('confirm', req.id)}; "
            f"to withdraw it: {typed_line('reject', req.id)}"
        )
    else:
        lines.append(f"It is {req.state}; `{typed_line('history', req.session_id)}` shows its steps.")
    return Message(
        headline=f"Already requested: `{req.decision}` on `{req.session_id}` (request {req.id}, {req.state})",
        level="info",
        lines=lines,
        buttons=buttons,
        session_id=req.session_id,
    )
