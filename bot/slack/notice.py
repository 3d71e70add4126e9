"""Break-glass's loud notice in Slack: chat.postMessage to the channel, and to each approver's user id
(Slack opens the DM itself). A post that fails reads as None, and the core then sends nothing.

The poster is handed INTO composition (``bot.app.compose.FrontPorts``, built by ``bot.slack.ports``), so
every installation's core has it from the start, however many installations there are."""

from __future__ import annotations

from bot.messages import Message
from bot.slack.state import Location
from bot.slack.web import SlackOut


class SlackNotice:
    """The core's :class:`bot.decisions.Notice` over the front's own Web API wrapper."""

    def __init__(self, out: SlackOut) -> None:
        self.out = out

    def post(self, where: str, message: Message) -> str | None:
        return self.out.post(Location(where, None), message)


__all__ = ["SlackNotice"]
