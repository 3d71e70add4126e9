"""The ladder's words in the request's thread: a reminder (mentions nobody), a mention (the eligible
approvers one by one), a widening (who became eligible), the expiry; the live line of a request."""

from __future__ import annotations

from datetime import datetime

from bot.clock import parse_time
from bot.decisions._requests import DecisionRequest
from bot.format import duration
from bot.messages import Message, find_key_line

KIND = "escalation"


def key_line(request_id: str, index: int | str) -> str:
    """Said in each ladder post: a runner taking over a dead owner's claim finds the post by it."""
    return find_key_line(f"ladder step {request_id}#{index}")


def expires_in(req: DecisionRequest, now: datetime) -> str:
    end = parse_time(req.expires_at)
    if end is None:
        return "no expiry"
    left = (end - now).total_seconds()
    return f"expires in {duration(left)} (at {req.expires_at})" if left > 0 else f"expired at {req.expires_at}"


def _what(req: DecisionRequest) -> str:
    return f"`{req.decision}` on `{req.session_id}` (request {req.id})"


def reminder(req: DecisionRequest, index: int | str, now: datetime) -> Message:
    return Message(
        headline=f"Reminder: {_what(req)} still waits for a second person; it {expires_in(req, now)}",
        lines=[f"/recover approve {req.id}", key_line(req.id, index)],
        session_id=req.session_id,
        kind=KIND,
    )


def mention(req: DecisionRequest, index: int | str, ids: list[str], now: datetime) -> Message:
    who = "" if ids else " (RECOVER_APPROVERS is unset: any second person may approve)"
    return Message(
        headline=f"Approval still needed: {_what(req)}; it {expires_in(req, now)}{who}",
        lines=[f"/recover approve {req.id}", key_line(req.id, index)],
        session_id=req.session_id,
        kind=KIND,
        mentions=list(ids),
    )


def widened(req: DecisionRequest, index: int | str, groups: list[str], now: datetime) -> Message:
    if not groups:
        head = f"The ladder of {_what(req)} reached its widening step; it names nobody more"
    else:
        head = f"Now also eligible to approve {_what(req)}: the people named here; it {expires_in(req, now)}"
    return Message(
        headline=head,
        lines=[f"/recover approve {req.id}", key_line(req.id, index)],
        session_id=req.session_id,
        kind=KIND,
        mentions=list(groups),
    )


def expired(req: DecisionRequest, index: int | str) -> Message:
    return Message(
        headline=f"Expired: {_what(req)} expired at {req.expires_at} with no approval; nothing was sent",
        lines=["Make a new request with `/recover decide …` if it is still needed.", key_line(req.id, index)],
        level="warn",
        session_id=req.session_id,
        kind=KIND,
    )


def live_line(req: DecisionRequest, who: str, nxt: str, now: datetime) -> str:
    """The approval request's live line: the expiry, who may approve now (``who``, as the one
    pending-request line says it: bot/escalation/status.py), the next ladder step."""
    return f"Live: {expires_in(req, now)} · may approve now: {who} · next: {nxt}"
