"""Watch mode's voice in Slack: top-level case posts, their threads and the storm message, in place."""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

from slack_sdk import WebClient

from bot.app.fleet_router import FleetRouter
from bot.app.handoff import watch_handoff
from bot.app.router import Router
from bot.app.services import Services, build_watcher
from bot.installation_ids import ScopedId
from bot.installations.tags import name_lead, tag_message
from bot.messages import Message
from bot.slack.state import Location, SlackState
from bot.slack.web import SlackOut
from bot.watch import Watcher

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


class _Front(Protocol):
    """The Slack front's parts watch mode uses (bot.slack.app.SlackBot)."""

    @property
    def router(self) -> object: ...

    @property
    def out(self) -> SlackOut: ...

    @property
    def state(self) -> SlackState: ...


def cores_of(router: object) -> list[Services]:
    """The cores a router runs: one, or one per installation of a fleet (none for a stand-in)."""
    if isinstance(router, Router):
        return [router.services]
    if isinstance(router, FleetRouter):
        return list(router.fleet.cores.values())
    return []


def attach_watch(bot: _Front, *, start: bool = True) -> Watcher | None:
    """Build the watcher for a Slack front whose router runs the core (RECOVER_WATCH_CHANNEL set, a
    runbook ``watch:`` section), attach it so ``/recover watch`` reaches it, and poll on a daemon thread.
    A fleet gets one watcher per installation that has a watch channel (the first is returned)."""
    watchers = attach_watches(bot, start=start)
    return watchers[0] if watchers else None


def attach_watches(bot: _Front, *, start: bool = True) -> list[Watcher]:
    """Each installation's own watcher (its client, triage, store and watch channel)."""
    router, out = bot.router, bot.out
    watchers: list[Watcher] = []
    for core in cores_of(router):
        if core.bulk is None:
            continue
        named = isinstance(router, FleetRouter) and not router.fleet.single_default
        # The case-thread memory is the default installation's only: a named installation's session id
        # may be another's too, and its cases live in its own store.
        poster = SlackWatchPoster(out, None if named else bot.state, core.installation if named else None)
        watcher = build_watcher(core, poster, members=SlackChannelMembers(out.client), handoff=watch_handoff(core))
        if watcher is None:
            continue
        core.bulk.watcher = watcher
        if start:
            threading.Thread(target=watcher.run, name=f"recover-watch-{core.installation}", daemon=True).start()
        watchers.append(watcher)
    return watchers
