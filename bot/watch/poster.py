"""Where the watcher speaks: the channel's post, update and find (Slack's Web API, the console, a test)."""

from __future__ import annotations

from typing import Protocol

from bot.messages import Message, find_key_line


def key_line(key: str) -> str:
    """The stop's dedup key as said in its post: a watcher taking over a dead owner's claim finds it."""
    return find_key_line(f"Watch key {key}")


class Poster(Protocol):
    """Where the watcher speaks (Slack's chat.postMessage / chat.update, or a test's list)."""

    def post(self, channel: str, message: Message, thread_ts: str | None = None) -> str | None: ...

    def update(self, channel: str, ts: str, message: Message) -> bool: ...

    def find(self, channel: str, text: str, thread_ts: str | None = None) -> str | None:
        """The ts of a message in the channel (or the thread) that contains ``text``, else None;
        raises when the channel cannot be read (then nothing is posted)."""
        ...
