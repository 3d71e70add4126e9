"""A pending request's place on its ladder in one line (``pending``): who may approve now, the next
escalation step and when, and when break-glass opens (the one window rule, bot/decisions/_glassrule.py)."""

from __future__ import annotations

from datetime import datetime

from bot.clock import parse_time
from bot.decisions._context import DecisionContext
from bot.decisions._glassrule import window_opens
from bot.decisions._ladder_rows import unsaid_steps
from bot.decisions._requests import DecisionRequest
from bot.escalation.ladder import PENDING_STATES, eligible_now, next_step, spec_of
from bot.escalation.text import who_text
from bot.format import duration
from bot.runbook.escalation import EscalationSpec


def ladder_line(ctx: DecisionContext, req: DecisionRequest, now: datetime) -> str | None:
    """``may approve now: … · next escalation: mention in 3m`` for a pending two-person request with a
    ladder; None otherwise."""
    spec = spec_of(ctx, req)
    if spec is None or req.state not in PENDING_STATES:
        return None
    nxt = next_step(ctx, req)
    if nxt is None:
        upcoming = "none (the ladder ran to its end)"
    else:
        _i, step, at = nxt
        left = ((at or now) - now).total_seconds()
        upcoming = f"{step.kind} in {duration(left)}" if left > 0 else f"{step.kind} now (due)"
    line = f"may approve now: {who_text(eligible_now(ctx, req, now))} · next escalation: {upcoming}"
    unsaid = unsaid_steps(ctx.store, req.id)
    if unsaid:  # said nowhere yet: no approver saw them, and break-glass stays closed until they are posted
        steps = ", ".join(spec.steps[i].kind if i < len(spec.steps) else str(i + 1) for i in unsaid)
        return f"{line} · not posted in Slack yet: {steps} (tried again every few seconds; no break-glass until then)"
    glass = glass_text(spec, req, now)
    return line if glass is None else f"{line} · {glass}"


def glass_text(spec: EscalationSpec | None, req: DecisionRequest, now: datetime) -> str | None:
    """When the requester may break glass (``break-glass: in 20m, if still unapproved``), or that the
    runbook allows none for this decision; the command re-checks every condition when it is typed."""
    if spec is None:
        return None
    if not spec.allows_break_glass(req.decision):
        return f"no break-glass for `{req.decision}`"
    requested_at = parse_time(req.created_at)
    if requested_at is None:
        return None
    condition = ("if still unapproved" if "ladder_ended" in spec.break_glass.when
                 else "if no approver other than the requester exists")
    left = (window_opens(spec, requested_at) - now).total_seconds()
    if left > 0:
        return f"break-glass: in {duration(left)}, {condition}"
    return f"break-glass: open to the requester until the expiry, {condition} (`/recover break-glass {req.id} …`)"
