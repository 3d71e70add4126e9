"""Break-glass's loud notice in Slack: chat.postMessage to the channel, and to each approver's user id
(Slack opens the DM itself). A post that fails reads as None, and the core then sends nothing."""

from __future__ import annotations

from bot.messages import Message
from bot.slack.state import Location
from bot.slack.web import SlackOut


class SlackNotice:
    """The core's :class:`bot.decisions._glass.Notice` over the front's own Web API wrapper."""

    def __init__(self, out: SlackOut) -> None:
        self.out = out

    def post(self, where: str, message: Message) -> str | None:
        return self.out.post(Location(where, None), message)


def attach_notice(router: object, out: SlackOut) -> None:
    """Let a router that runs the core post break-glass notices (a stand-in router is left alone).

    Read by attribute, not by importing the router: the ack side of the front never loads the core."""
    decisions = getattr(getattr(router, "services", None), "decisions", None)
    glass = getattr(decisions, "glass", None)
    if glass is not None:
        glass.notice = SlackNotice(out)
