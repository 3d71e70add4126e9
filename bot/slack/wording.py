"""Every sentence the Slack front end says on its own (not the core's), in one place."""

from __future__ import annotations

import uuid

from bot.errors import RecoverError
from bot.messages import Message
from bot.redact import redact


def ack_command(text: str) -> str:
    """The instant ephemeral answer to a slash command (Slack's 3 s): nothing has run yet."""
    shown = " ".join(text.split())[:200] or "help"
    return f":hourglass_flowing_sand: `/recover {shown}` received; answers follow in the case's thread."


def recover_error(exc: RecoverError) -> Message:
    """A typed error, for the person who caused it."""
    lines = [redact(exc.message)]
    if exc.hint:
        lines.append(redact(exc.hint))
    code = getattr(exc, "code", None)
    facts = [("code", str(code))] if code else []
    return Message(headline=f"{type(exc).__name__}: not done", level="error", lines=lines, facts=facts)


def unexpected_error() -> tuple[Message, str]:
    """An error we did not expect: a reference for the log, and what to check before retrying."""
    ref = uuid.uuid4().hex[:10]
    return (
        Message(
            headline="recover-bot hit an internal error",
            level="error",
            lines=[
                f"Reference `{ref}` is in the bot's log.",
                "Check `/recover history <session_id>` before repeating the command: a request may have been sent.",
            ],
        ),
        ref,
    )


def modal_unavailable(session_id: str, decision: str) -> Message:
    return Message(
        headline="Could not open the decision form",
        level="warn",
        lines=[f'Type it instead: `/recover decide {session_id} {decision} --reason "…"`'],
        session_id=None,
    )
