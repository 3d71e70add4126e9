"""Watch mode's voice in Slack: top-level case posts, their threads and the storm message, in place."""

from __future__ import annotations

import json
import threading
from typing import Any

from slack_sdk import WebClient

from bot.messages import Message
from bot.router import Router
from bot.services import build_watcher
from bot.slack.state import Location
from bot.slack.web import SlackOut
from bot.watch import Watcher

#: Pages of 200 messages read back when looking for a dead owner's post (its lease is minutes old).
FIND_PAGES = 10


class SlackWatchPoster:
    """The watcher's :class:`bot.watch.Poster` over the front's own Web API wrapper."""

    def __init__(self, out: SlackOut) -> None:
        self.out = out

    def post(self, channel: str, message: Message, thread_ts: str | None = None) -> str | None:
        return self.out.post(Location(channel, thread_ts), message)

    def update(self, channel: str, ts: str, message: Message) -> bool:
        return self.out.update(channel, ts, message)

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


def attach_watch(router: object, out: SlackOut, *, start: bool = True) -> Watcher | None:
    """Build the watcher for a router that runs the core (RECOVER_WATCH_CHANNEL set, a runbook
    ``watch:`` section), attach it so ``/recover watch`` reaches it, and poll on a daemon thread."""
    if not isinstance(router, Router) or router.services.bulk is None:
        return None
    watcher = build_watcher(router.services, SlackWatchPoster(out))
    if watcher is None:
        return None
    router.services.bulk.watcher = watcher
    if start:
        threading.Thread(target=watcher.run, name="recover-watch", daemon=True).start()
    return watcher

