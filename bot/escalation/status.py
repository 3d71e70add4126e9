"""THE pending-request line: one owner for how an open request is said wherever it waits for someone
(``pending``, the hand-off, App Home, the ladder's live line).

One line per request: its id, decision, session, state, requester, age and expiry; who may act now
and the one command that moves it on, pasteable as printed (``approve`` for a two-person request,
``confirm`` for a single-person one, confirmed by its requester, ``review`` for a break-glass use under
review); for a two-person request its ladder's next step and when break-glass is possible and why.

Who may act now is never decided here: it is read through the ladder (:func:`eligible_now`, the
chain's widening) and the one approver rule over the on-call directory (:func:`others_reading`, which
calls ``approver_allowed``); whether break-glass is possible, through the one break-glass rule
(:func:`glass_verdict`), the one the command and the gate use. The approval itself goes through the
gate, which refuses anyone this line would not name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clock import parse_time
from bot.decisions._context import DecisionContext
from bot.decisions._glassrule import glass_verdict, ladder_reach, others_reading, window_opens
from bot.decisions._ladder_rows import unsaid_steps
from bot.decisions._requests import DecisionRequest
from bot.decisions._reviews import OpenReview, ReviewRoom
from bot.escalation.ladder import PENDING_STATES, eligible_now, next_step, spec_of
from bot.format import age, duration
from bot.messages import ref
from bot.vocab import Policy, RequestState


@dataclass(frozen=True)
class PendingLine:
    """A request as every digest says it. ``command`` is what a person pastes (empty when nobody can
    move it on by a command now); ``who`` says who may act now; ``text`` is the whole line."""

    request_id: str
    verb: str
    who: str
    command: str
    text: str


def expiry_text(expires_at: str | None, now: datetime) -> str:
    """``expires in 19m45s`` / ``expired 2m ago`` / ``no expiry`` (requests and batches alike)."""
    end = parse_time(expires_at)
    if end is None:
        return "no expiry"
    left = (end - now).total_seconds()
    return f"expires in {duration(left)}" if left > 0 else f"expired {duration(-left)} ago"


def _people(reading: dict[str, Any], listed: Sequence[str], requester: str) -> str:
    """The people the approver rule found, as text (never mentions: a digest must not notify anyone),
    and any group the directory could not read (it may hold an approver: said, not guessed)."""
    others = [str(o) for o in reading.get("others") or []]
    unread = [g for g in listed if g.startswith("S") and g not in (reading.get("groups") or {})]
    said = f"{', '.join(others)} (not {requester})" if others else f"nobody but the requester {requester}"
    return said + (f"; user group(s) {', '.join(unread)} could not be read" if unread else "")


def who_may_approve(ctx: DecisionContext, req: DecisionRequest, now: datetime) -> str:
    """Who may approve a two-person ``req`` now: RECOVER_APPROVERS and what its ladder widened to
    (:func:`eligible_now`), groups read through the directory, each person by the one approver rule."""
    eligible = eligible_now(ctx, req, now)
    if eligible.anyone:
        return f"any second person (not {req.requester})"
    reading, _ = others_reading(req.requester, ctx.approvers, eligible.widened, ctx.directory, ctx.console_users)
    return _people(reading, [*ctx.approvers, *eligible.widened], req.requester)


def _who_and_verb(ctx: DecisionContext, req: DecisionRequest, now: datetime) -> tuple[str, str]:
    if req.state == RequestState.REQUESTED:
        if req.policy == Policy.TWO_PERSON:
            return f"may approve now: {who_may_approve(ctx, req, now)}", "approve"
        # A single-person request is confirmed by its requester (typed or its button); `approve` refuses it.
        return f"now: {ref(req.requester)} confirms (or withdraws)", "confirm"
    if req.state == RequestState.RECHECK:
        return f"now: {ref(req.requester)} or the approver re-checks the effects (R3.10)", "confirm"
    if req.state == RequestState.WAITING:
        return "now: nobody yet: the scheduler must confirm the worker gone first (R3.9)", ""
    if req.state == RequestState.UNCERTAIN:
        return "now: nobody: its send had no definite answer; the bot finishes it with its stored key", ""
    return "now: nobody: approved, being sent", ""


def _ladder(ctx: DecisionContext, req: DecisionRequest, now: datetime) -> list[str]:
    """The ladder's next step and, for a request still unapproved, when break-glass is possible and why."""
    spec = spec_of(ctx, req)
    if spec is None or req.state not in PENDING_STATES:
        return []
    nxt = next_step(ctx, req)
    if nxt is None:
        upcoming = "none (the ladder ran to its end)"
    else:
        _i, step, at = nxt
        left = ((at or now) - now).total_seconds()
        upcoming = f"{step.kind} in {duration(left)}" if left > 0 else f"{step.kind} now (due)"
    parts = [f"next escalation: {upcoming}"]
    unsaid = unsaid_steps(ctx.store, req.id)
    if unsaid:  # said nowhere yet: no approver saw them, and break-glass by the ladder's end waits for them
        steps = ", ".join(spec.steps[i].kind if i < len(spec.steps) else str(i + 1) for i in unsaid)
        parts.append(f"not posted in Slack yet: {steps} (tried again every few seconds)")
    requested_at = parse_time(req.created_at)
    if req.state != RequestState.REQUESTED or requested_at is None:
        return parts
    if not spec.allows_break_glass(req.decision):
        return [*parts, f"no break-glass for `{req.decision}`"]
    # The one rule, as the command will apply it when typed: the approvers the ladder reaches, now or later.
    reach = ladder_reach(spec, eligible_now(ctx, req, now).widened)
    _, no_other = others_reading(req.requester, ctx.approvers, reach, ctx.directory, ctx.console_users)
    verdict = glass_verdict(spec, req.decision, requested_at, now, parse_time(req.expires_at), no_other)
    if verdict.allowed_by is not None:
        return [
            *parts,
            f"break-glass: possible now for {req.requester}, because {verdict.why} "
            f'(`/recover break-glass {req.id} --incident … --reason "…"`)',
        ]
    left = (window_opens(spec, requested_at) - now).total_seconds()
    if "ladder_ended" in spec.break_glass.when and left > 0 and verdict.problem != "the request has expired":
        not_now = f" (not now: {no_other})" if no_other else ""
        return [*parts, f"break-glass: in {duration(left)}, if still unapproved{not_now}"]
    return [*parts, f"break-glass: not possible ({verdict.problem})"]


def _under_review(ctx: DecisionContext, req: DecisionRequest) -> OpenReview | None:
    if req.state in PENDING_STATES:
        return None
    return next((r for r in ReviewRoom(ctx).open_reviews() if r.request_id == req.id), None)


def pending_line(ctx: DecisionContext, req: DecisionRequest, now: datetime) -> PendingLine:
    """THE line of ``req`` (see the module docstring); every digest that lists a request calls this."""
    review = _under_review(ctx, req)
    if review is not None:  # sent by break-glass, its review unsigned: the review's own words
        command = f"/recover review {req.id} --ok"
        return PendingLine(req.id, "review", f"anyone but {req.requester} signs", command, review.line(now))
    who, verb = _who_and_verb(ctx, req, now)
    command = f"/recover {verb} {req.id}" if verb else ""
    parts = [
        f"`{req.id}` {req.decision} on `{req.session_id}`",
        req.state,
        f"by {ref(req.requester)}",
        f"{age(req.created_at, now)} ago",
        expiry_text(req.expires_at, now),
        who,
        *_ladder(ctx, req, now),
    ]
    if command:
        parts.append(f"`{command}`")
    return PendingLine(req.id, verb, who, command, " · ".join(parts))


__all__ = ["PendingLine", "expiry_text", "pending_line", "who_may_approve"]
