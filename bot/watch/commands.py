"""``/recover watch [pause [--for <duration>] | resume]``: parsed command → the installation's composed watcher."""

from __future__ import annotations

from bot.errors import CommandError
from bot.messages import Reply
from bot.runbook import ParsedCommand
from bot.runbook.values import parse_duration
from bot.watch.watcher import Watcher


def watch_command(watcher: Watcher | None, cmd: ParsedCommand, actor: str) -> Reply:
    if watcher is None:
        raise CommandError(
            "Watch mode is off here: `recover-bot serve` runs it when RECOVER_WATCH_CHANNEL=C… is set "
            "and a runbook has a `watch:` section."
        )
    usage = cmd.spec.usage if cmd.spec else None
    action = cmd.arg("action")
    if action == "pause":
        text = cmd.flag_text("for")
        return watcher.pause(actor, parse_duration(text) if text else None)
    if cmd.flag_text("for"):
        raise CommandError("--for goes with pause: `/recover watch pause --for 2h`.", usage=usage)
    if action == "resume":
        return watcher.resume(actor)
    return watcher.status_reply()
