"""Watch mode's voice in Slack: top-level case posts, their threads and the storm message, in place."""

from __future__ import annotations

from bot.messages import Message
from bot.slack.state import Location
from bot.slack.web import SlackOut


class SlackWatchPoster:
    """The watcher's :class:`bot.watch.Poster` over the front's own Web API wrapper."""

    def __init__(self, out: SlackOut) -> None:
        self.out = out

    def post(self, channel: str, message: Message, thread_ts: str | None = None) -> str | None:
        return self.out.post(Location(channel, thread_ts), message)

    def update(self, channel: str, ts: str, message: Message) -> bool:
        return self.out.update(channel, ts, message)
