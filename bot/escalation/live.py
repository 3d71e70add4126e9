"""The approval request with its live line: the message as first shown, the line first."""

from __future__ import annotations

from dataclasses import replace

from bot.decisions import _text as decisions_text
from bot.decisions._context import DecisionContext
from bot.decisions._ladder_rows import shown_message
from bot.decisions._requests import DecisionRequest
from bot.messages import Message

LIVE_PREFIX = "Live: "


def live_message(ctx: DecisionContext, req: DecisionRequest, line: str) -> Message:
    """The request's approval message (as kept when it was first shown) with ``line`` in front; a
    request shown before the ladder existed is rendered again from its stored content."""
    shown = shown_message(ctx.store, req.id)
    if shown is None:
        shown = decisions_text.approval_request_message(
            req, ctx.mentions(), list(ctx.policy(req.decision).rules), irreversible=ctx.irreversible(req.decision)
        )
    kept = [x for x in shown.lines if not x.startswith(LIVE_PREFIX)]
    return replace(shown, lines=[line, *kept])
