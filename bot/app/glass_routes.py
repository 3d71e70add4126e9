"""The router's part for break-glass: ``break-glass``, ``review``, and the ``confirm`` that a pending
break-glass waits for (one job: which of the three the words mean, and the room that answers).

``confirm <request_id>`` keeps its two uses (docs/commands.md); a third is routed here only when the
acting person's own ``break-glass`` of that request waits for its typed confirmation.
"""

from __future__ import annotations

from bot.app.services import Services
from bot.errors import CommandError
from bot.messages import Reply, Reporter
from bot.runbook import ParsedCommand
from bot.vocab import StepKind

#: The step kinds this module answers (``confirm`` only when a break-glass waits for it).
GLASS_KINDS = (StepKind.BREAK_GLASS, StepKind.REVIEW)


def glass_route(services: Services, cmd: ParsedCommand, actor: str) -> bool:
    """Is ``cmd`` one of ours: ``break-glass``, ``review``, or the confirm a break-glass waits for?"""
    if cmd.kind in GLASS_KINDS:
        return True
    request_id = cmd.arg("request_id") or ""
    return cmd.kind == StepKind.CONFIRM and services.decisions.glass.asked(actor, request_id) is not None


def glass_dispatch(
    services: Services, cmd: ParsedCommand, *, actor: str, channel: str | None, reporter: Reporter
) -> Reply:
    glass = services.decisions.glass
    request_id = cmd.arg("request_id")
    if not request_id:
        raise CommandError(f"`{cmd.name}` needs <request_id>.", usage=cmd.spec.usage if cmd.spec else None)
    if cmd.kind == StepKind.BREAK_GLASS:
        return glass.ask(actor, channel, request_id, cmd.flag_text("incident") or "", cmd.flag_text("reason") or "")
    if cmd.kind == StepKind.REVIEW:
        return services.decisions.reviews.review(
            actor, channel, request_id, bool(cmd.flag("ok")), cmd.flag_text("concern")
        )
    if cmd.flag_text("effects") is not None:
        raise CommandError("--effects belongs to the effects re-check; a break-glass confirm takes no flags.")
    return glass.confirm(actor, channel, request_id, reporter)
