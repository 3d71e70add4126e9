"""The escalation ladder's command: ``/recover remind <request_id>`` (router.py is at its size limit)."""

from __future__ import annotations

from bot.errors import CommandError
from bot.escalation.remind import remind
from bot.escalation.runner import LadderRunner
from bot.messages import Reply
from bot.runbook import ParsedCommand
from bot.services import Services


def ladder_runner(services: Services) -> LadderRunner:
    """The runner the front attached (it posts in Slack), or one that answers in the reply (console)."""
    attached = services.decisions.ladder
    return attached if isinstance(attached, LadderRunner) else LadderRunner(services.decisions.ctx, None)


def remind_command(services: Services, cmd: ParsedCommand, actor: str) -> Reply:
    request_id = cmd.arg("request_id")
    if not request_id:
        raise CommandError("`remind` needs <request_id>.", usage=cmd.spec.usage if cmd.spec else None)
    return remind(ladder_runner(services), actor, request_id)
