"""``/recover pending``: what waits for someone, one line each, with the command that moves it on.

People used to scroll back or run ``handoff`` to find a request id. This lists every open request and
batch with its id, decision, session, requester, age, expiry and who may act on it now. Who may act is
said, never decided, here: the approval itself goes through the one gate (``approve``/``confirm``),
which refuses anyone this line would not name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from bot.batch.store import Batch
from bot.clock import parse_time
from bot.decisions import DecisionRequest
from bot.escalation.status import ladder_line
from bot.format import age, duration
from bot.messages import Message, Reply, ref
from bot.services import Services
from bot.vocab import OPEN_STATES, Policy, RequestState

KIND = "pending"


def _expiry(expires_at: str | None, now: datetime) -> str:
    end = parse_time(expires_at)
    if end is None:
        return "no expiry"
    left = (end - now).total_seconds()
    return f"expires in {duration(left)}" if left > 0 else f"expired {duration(-left)} ago"


def _second(requester: str, approvers: Sequence[str]) -> str:
    # Named as text, not as mentions: listing what waits must not notify a whole approvers' group.
    allowed = f"RECOVER_APPROVERS: {', '.join(approvers)}" if approvers else "anyone"
    return f"a second person ({allowed}; not {ref(requester)})"


def who_now(state: str, policy: str, requester: str, approvers: Sequence[str]) -> tuple[str, str]:
    """(who may act now, the verb they use) for an open request or batch in ``state``."""
    if state == RequestState.REQUESTED:
        if policy == Policy.TWO_PERSON:
            return _second(requester, approvers), "approve"
        return f"{ref(requester)} confirms (or withdraws)", "confirm"
    if state == RequestState.WAITING:
        return "nobody yet: the scheduler must confirm the worker gone first (R3.9)", ""
    if state == RequestState.RECHECK:
        return f"{ref(requester)} or the approver re-checks the effects (R3.10)", "confirm"
    if state == RequestState.UNCERTAIN:
        return "nobody: its send had no definite answer; `replay` finishes it with its key (R0.3)", "replay"
    return "nobody: approved, being sent", ""


def _request_line(r: DecisionRequest, now: datetime, approvers: Sequence[str], ladder: str | None = None) -> str:
    who, verb = who_now(r.state, r.policy, r.requester, approvers)
    command = f" · `/recover {verb} {r.id}`" if verb and verb != "replay" else ""
    # With an escalation ladder, who may approve now is what its widening made it (bot/escalation).
    now_part = ladder if ladder is not None else f"now: {who}"
    return (
        f"`{r.id}` {r.decision} on `{r.session_id}` · {r.state} · by {ref(r.requester)} · "
        f"{age(r.created_at, now)} ago · {_expiry(r.expires_at, now)} · {now_part}{command}"
    )


def _batch_line(b: Batch, members: int, now: datetime, approvers: Sequence[str]) -> str:
    who, verb = who_now(b.state, b.policy, b.requester, approvers)
    command = f" · `/recover {verb} {b.id}`" if verb else ""
    return (
        f"`{b.id}` {b.decision} on {members} session(s) · {b.state} · by {ref(b.requester)} · "
        f"{age(b.created_at, now)} ago · {_expiry(b.expires_at, now)} · now: {who}{command}"
    )


def pending_reply(
    requests: Sequence[DecisionRequest],
    batches: Sequence[tuple[Batch, int]],
    *,
    now: datetime,
    approvers: Sequence[str],
    verifying: Sequence[tuple[str, str]] = (),
    ladders: Mapping[str, str] | None = None,
) -> Reply:
    """One message: a line per open request, then per open batch (with its member count), then per
    case still being verified after an accepted decision (acceptance is not recovery, R5.1)."""
    if not requests and not batches and not verifying:
        return Reply.of(Message(headline="Nothing is pending: no open request, batch or case being verified.", kind=KIND))
    lines = [_request_line(r, now, approvers, (ladders or {}).get(r.id)) for r in sorted(requests, key=lambda r: r.created_at)]
    lines += [_batch_line(b, n, now, approvers) for b, n in batches]
    lines += [f"`{session}` {state}" for session, state in verifying]
    parts = [f"{len(requests)} request(s)"] + ([f"{len(batches)} batch(es)"] if batches else [])
    parts += [f"{len(verifying)} case(s) being verified"] if verifying else []
    return Reply.of(Message(headline=f"Pending: {' and '.join(parts)}", lines=lines, kind=KIND))


def pending_of(services: Services) -> Reply:
    """:func:`pending_reply` over the stores: every open request, every open batch with its size."""
    requests = services.decisions.requests.find(states=tuple(OPEN_STATES))
    batches: list[tuple[Batch, int]] = []
    if services.bulk is not None:
        store = services.bulk.batches.batches
        batches = [(b, len(store.members(b.id))) for b in store.find(tuple(OPEN_STATES))]
    now = services.clock.now()
    ladders = {r.id: line for r in requests if (line := ladder_line(services.decisions.ctx, r, now)) is not None}
    reply = pending_reply(
        requests,
        batches,
        now=now,
        approvers=services.settings.approvers,
        verifying=services.decisions.casebook.verifying(),
        ladders=ladders,
    )
    reviews = services.decisions.reviews.message(now)  # open until signed
    if reviews is not None:
        reply.messages.append(reviews)
    return reply
