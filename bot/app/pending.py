"""``/recover pending``: what waits for someone, one line each, with the command that moves it on.

People used to scroll back or run ``handoff`` to find a request id. This lists every open request and
batch with its id, decision, session, requester, age, expiry and who may act on it now. A request's
line is the one pending-request line (bot/escalation/status.py, also the hand-off's, App Home's and the
live line's); who may act is said, never decided, there: the approval itself goes through the one gate
(``approve``/``confirm``), which refuses anyone that line would not name.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bot.app.handoff import expired_line
from bot.app.services import Services
from bot.batch.store import Batch
from bot.escalation.status import expiry_text, pending_line
from bot.format import age
from bot.messages import Message, Reply, ref
from bot.vocab import OPEN_STATES, Policy, RequestState

KIND = "pending"


def _batch_who(b: Batch, approvers: Sequence[str]) -> tuple[str, str]:
    """(who may act now, the verb) for an open batch: a batch has no ladder, its approvers are listed."""
    if b.state == RequestState.REQUESTED and b.policy == Policy.TWO_PERSON:
        # Named as text, not as mentions: listing what waits must not notify a whole approvers' group.
        allowed = f"RECOVER_APPROVERS: {', '.join(approvers)}" if approvers else "anyone"
        return f"a second person ({allowed}; not {ref(b.requester)})", "approve"
    if b.state == RequestState.REQUESTED:
        return f"{ref(b.requester)} confirms (or withdraws)", "confirm"
    return "nobody: approved, being sent", ""


def _batch_line(b: Batch, members: int, now: datetime, approvers: Sequence[str]) -> str:
    who, verb = _batch_who(b, approvers)
    command = f" · `/recover {verb} {b.id}`" if verb else ""
    return (
        f"`{b.id}` {b.decision} on {members} session(s) · {b.state} · by {ref(b.requester)} · "
        f"{age(b.created_at, now)} ago · {expiry_text(b.expires_at, now)} · now: {who}{command}"
    )


def pending_reply(
    request_lines: Sequence[str],
    batches: Sequence[tuple[Batch, int]],
    *,
    now: datetime,
    approvers: Sequence[str],
    verifying: Sequence[tuple[str, str]] = (),
) -> Reply:
    """One message: a line per open request (oldest first, each the one pending-request line), then
    per open batch (with its member count), then per case still being verified after an accepted
    decision (acceptance is not recovery, R5.1)."""
    if not request_lines and not batches and not verifying:
        return Reply.of(
            Message(headline="Nothing is pending: no open request, batch or case being verified.", kind=KIND)
        )
    lines = list(request_lines)
    lines += [_batch_line(b, n, now, approvers) for b, n in batches]
    lines += [f"`{session}` {state}" for session, state in verifying]
    parts = [f"{len(request_lines)} request(s)"] + ([f"{len(batches)} batch(es)"] if batches else [])
    parts += [f"{len(verifying)} case(s) being verified"] if verifying else []
    return Reply.of(Message(headline=f"Pending: {' and '.join(parts)}", lines=lines, kind=KIND))


def pending_of(services: Services, *, with_expired: bool = False) -> Reply:
    """:func:`pending_reply` over the stores: every open request, every open batch with its size; with
    ``with_expired`` (``pending --all``) also the requests expired since the last hand-off, in the
    hand-off's own words."""
    requests = services.decisions.requests.find(states=tuple(OPEN_STATES))
    batches: list[tuple[Batch, int]] = []
    if services.bulk is not None:
        store = services.bulk.batches.batches
        batches = [(b, len(store.members(b.id))) for b in store.find(tuple(OPEN_STATES))]
    now = services.clock.now()
    ctx = services.decisions.ctx
    lines = [pending_line(ctx, r, now).text for r in sorted(requests, key=lambda r: r.created_at)]
    if with_expired:
        lines += [expired_line(r, now) for r in services.decisions.casebook.expired_since_handoff(now)]
    reply = pending_reply(
        lines,
        batches,
        now=now,
        approvers=services.settings.approvers,
        verifying=services.decisions.casebook.verifying(),
    )
    reviews = services.decisions.reviews.message(now)  # open until signed
    if reviews is not None:
        reply.messages.append(reviews)
    return reply
