"""The demo's watch channel: the console itself, so ``:stop <scenario>`` shows the watcher at work.

A :class:`bot.watch.Poster` that prints what the watcher would post in Slack and remembers it, so a
claim taken over later is found by its key here as in a Slack channel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from bot.messages import Message


class ConsoleWatchPoster:
    """Each post is shown at once; its ts is a counter; ``find`` reads back what was shown."""

    def __init__(self, show: Callable[[Message], None]) -> None:
        self.show = show
        self.said: list[tuple[str, str | None, str]] = []  # (ts, thread ts, text)
        self._ts = itertools.count(1)

    def post(self, channel: str, message: Message, thread_ts: str | None = None) -> str | None:
        ts = f"console.{next(self._ts):06d}"
        self.said.append((ts, thread_ts, message.plain_text()))
        self.show(message)
        return ts

    def update(self, channel: str, ts: str, message: Message) -> bool:
        self.show(message)
        return True

    def find(self, channel: str, text: str, thread_ts: str | None = None) -> str | None:
        for ts, thread, said in reversed(self.said):
            if thread == thread_ts and text in said:
                return ts
        return None
