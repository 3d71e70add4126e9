"""Watch mode's voice in Slack: top-level case posts, their threads and the storm message, in place."""

from __future__ import annotations

import json
from typing import Any

from slack_sdk import WebClient

from bot.ids import ScopedId
from bot.installations.tags import name_lead, tag_message
from bot.messages import Message
from bot.slack.state import Location, SlackState
from bot.slack.web import SlackOut

#: Pages of 200 messages read back when looking for a dead owner's post (its lease is minutes old).
FIND_PAGES = 10
#: Pages of 200 members read to find one person in the watch channel (100,000 members).
MEMBER_PAGES = 500


class SlackWatchPoster:
    """The watcher's :class:`bot.watch.Poster` over the front's own Web API wrapper. A case post (a
    top-level message naming its session) opens the case's thread: with the front's ``state`` given,
    it is remembered as that thread, so what people then do on the case (a decision asked from the
    post's buttons, its approval) is said there, not in a thread of its own."""

    def __init__(self, out: SlackOut, state: SlackState | None = None, installation: str | None = None) -> None:
        self.out = out
        self.state = state
        self.installation = installation  # a fleet's: its posts name it and their buttons carry it

    def _named(self, message: Message) -> Message:
        if self.installation is None:
            return message
        return name_lead(tag_message(message, self.installation), self.installation)

    def post(self, channel: str, message: Message, thread_ts: str | None = None) -> str | None:
        ts = self.out.post(Location(channel, thread_ts), self._named(message))
        sid = message.session_id
        if ts and thread_ts is None and sid and self.state is not None:
            session = ScopedId.of(sid, self.installation)  # the key the delivery and the ladder use
            if self.state.thread_of(session) is None:
                self.state.remember_thread(session, Location(channel, ts))
        return ts

    def update(self, channel: str, ts: str, message: Message) -> bool:
        return self.out.update(channel, ts, self._named(message))

    def find(self, channel: str, text: str, thread_ts: str | None = None) -> str | None:
        return find_message(self.out.client, channel, text, thread_ts)


def find_message(client: WebClient, channel: str, text: str, thread_ts: str | None = None) -> str | None:
    """conversations.history (or .replies under a thread), newest first, for a message whose text or
    blocks contain ``text``; a Slack error raises, so the caller never posts blind."""
    cursor: str | None = None
    for _ in range(FIND_PAGES):
        args: dict[str, Any] = {"channel": channel, "limit": 200, **({"cursor": cursor} if cursor else {})}
        if thread_ts:
            data = client.conversations_replies(ts=thread_ts, **args).data
        else:
            data = client.conversations_history(**args).data
        assert isinstance(data, dict)
        for msg in data.get("messages") or []:
            if text in str(msg.get("text", "")) or text in json.dumps(msg.get("blocks") or []):
                return str(msg["ts"])
        cursor = (data.get("response_metadata") or {}).get("next_cursor") or None
        if not data.get("has_more") or not cursor:
            return None
    return None


class SlackChannelMembers:
    """:class:`bot.watch.ChannelMembers` over conversations.members, every page, asked each time (who is
    in the channel changes during an incident); a Slack error raises, so pause and resume refuse."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def is_member(self, channel: str, user: str) -> bool:
        cursor: str | None = None
        for _ in range(MEMBER_PAGES):
            args: dict[str, Any] = {"channel": channel, "limit": 200, **({"cursor": cursor} if cursor else {})}
            data = self.client.conversations_members(**args).data
            assert isinstance(data, dict)
            if user in (data.get("members") or []):
                return True
            cursor = (data.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return False
        return False


__all__ = ["SlackChannelMembers", "SlackWatchPoster", "find_message"]
