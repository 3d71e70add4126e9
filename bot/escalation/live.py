"""The approval request with its live line: the message as first shown, the line first."""

from __future__ import annotations

from dataclasses import replace

from bot.decisions._approvals import first_shown
from bot.decisions._context import DecisionContext
from bot.decisions._requests import DecisionRequest
from bot.messages import Message

LIVE_PREFIX = "Live: "


def live_message(ctx: DecisionContext, req: DecisionRequest, line: str) -> Message:
    """The request's approval message (as kept when it was first shown) with ``line`` in front; a
    request shown before the ladder existed is rendered again from its stored content."""
    shown = first_shown(ctx, req)
    kept = [x for x in shown.lines if not x.startswith(LIVE_PREFIX)]
    return replace(shown, lines=[line, *kept])
