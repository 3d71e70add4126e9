"""Watch mode's voice in Slack: top-level case posts, their threads and the storm message, in place."""

from __future__ import annotations

import threading

from bot.messages import Message
from bot.router import Router
from bot.services import build_watcher
from bot.slack.state import Location
from bot.slack.web import SlackOut
from bot.watch import Watcher


class SlackWatchPoster:
    """The watcher's :class:`bot.watch.Poster` over the front's own Web API wrapper."""

    def __init__(self, out: SlackOut) -> None:
        self.out = out

    def post(self, channel: str, message: Message, thread_ts: str | None = None) -> str | None:
        return self.out.post(Location(channel, thread_ts), message)

    def update(self, channel: str, ts: str, message: Message) -> bool:
        return self.out.update(channel, ts, message)


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

