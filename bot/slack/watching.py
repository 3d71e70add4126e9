"""Watch mode's voice in Slack: top-level case posts, their threads and the storm message, in place."""

from __future__ import annotations

import json
import threading
from typing import Any

from bot.fleet_router import FleetRouter
from bot.installations.tags import name_lead, tag_message
from bot.messages import Message
from bot.router import Router
from bot.services import Services, build_watcher
from bot.slack.state import Location
from bot.slack.web import SlackOut
from bot.watch import Watcher

#: Pages of 200 messages read back when looking for a dead owner's post (its lease is minutes old).
FIND_PAGES = 10


class SlackWatchPoster:
    """The watcher's :class:`bot.watch.Poster` over the front's own Web API wrapper."""

    def __init__(self, out: SlackOut, installation: str | None = None) -> None:
        self.out = out
        self.installation = installation  # a fleet's: its posts name it and their buttons carry it

    def _named(self, message: Message) -> Message:
        if self.installation is None:
            return message
        return name_lead(tag_message(message, self.installation), self.installation)

    def post(self, channel: str, message: Message, thread_ts: str | None = None) -> str | None:
        return self.out.post(Location(channel, thread_ts), self._named(message))

    def update(self, channel: str, ts: str, message: Message) -> bool:
        return self.out.update(channel, ts, self._named(message))

    def find(self, channel: str, text: str, thread_ts: str | None = None) -> str | None:
        """conversations.history (or .replies under a thread), newest first, for a message whose text
        or blocks contain ``text``; a Slack error raises, so the caller never posts blind."""
        cursor: str | None = None
        for _ in range(FIND_PAGES):
            args: dict[str, Any] = {"channel": channel, "limit": 200, **({"cursor": cursor} if cursor else {})}
            if thread_ts:
                data = self.out.client.conversations_replies(ts=thread_ts, **args).data
            else:
                data = self.out.client.conversations_history(**args).data
            assert isinstance(data, dict)
            for msg in data.get("messages") or []:
                if text in str(msg.get("text", "")) or text in json.dumps(msg.get("blocks") or []):
                    return str(msg["ts"])
            cursor = (data.get("response_metadata") or {}).get("next_cursor") or None
            if not data.get("has_more") or not cursor:
                return None
        return None


def cores_of(router: object) -> list[Services]:
    """The cores a router runs: one, or one per installation of a fleet (none for a stand-in)."""
    if isinstance(router, Router):
        return [router.services]
    if isinstance(router, FleetRouter):
        return list(router.fleet.cores.values())
    return []


def attach_watch(router: object, out: SlackOut, *, start: bool = True) -> Watcher | None:
    """Build the watcher for a router that runs the core (RECOVER_WATCH_CHANNEL set, a runbook
    ``watch:`` section), attach it so ``/recover watch`` reaches it, and poll on a daemon thread.
    A fleet gets one watcher per installation that has a watch channel (the first is returned)."""
    watchers = attach_watches(router, out, start=start)
    return watchers[0] if watchers else None


def attach_watches(router: object, out: SlackOut, *, start: bool = True) -> list[Watcher]:
    """Each installation's own watcher (its client, triage, store and watch channel)."""
    watchers: list[Watcher] = []
    for core in cores_of(router):
        if core.bulk is None:
            continue
        named = isinstance(router, FleetRouter) and not router.fleet.single_default
        watcher = build_watcher(core, SlackWatchPoster(out, core.installation if named else None))
        if watcher is None:
            continue
        core.bulk.watcher = watcher
        if start:
            threading.Thread(target=watcher.run, name=f"recover-watch-{core.installation}", daemon=True).start()
        watchers.append(watcher)
    return watchers

