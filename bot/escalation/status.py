"""A pending request's place on its ladder in one line (``pending``): who may approve now, and the
next escalation step and when."""

from __future__ import annotations

from datetime import datetime

from bot.decisions._context import DecisionContext
from bot.decisions._requests import DecisionRequest
from bot.escalation.ladder import PENDING_STATES, eligible_now, next_step, spec_of
from bot.escalation.text import who_text
from bot.format import duration


def ladder_line(ctx: DecisionContext, req: DecisionRequest, now: datetime) -> str | None:
    """``may approve now: … · next escalation: mention in 3m`` for a pending two-person request with a
    ladder; None otherwise."""
    if spec_of(ctx, req) is None or req.state not in PENDING_STATES:
        return None
    nxt = next_step(ctx, req)
    if nxt is None:
        upcoming = "none (the ladder ran to its end)"
    else:
        _i, step, at = nxt
        left = ((at or now) - now).total_seconds()
        upcoming = f"{step.kind} in {duration(left)}" if left > 0 else f"{step.kind} now (due)"
    return f"may approve now: {who_text(eligible_now(ctx, req, now))} · next escalation: {upcoming}"
