"""The demo's watch channel: the console itself, so ``:stop <scenario>`` shows the watcher at work.

A :class:`bot.watch.Poster` that prints what the watcher would post in Slack and remembers it, so a
claim taken over later is found by its key here as in a Slack channel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from bot.handoff import watch_handoff
from bot.messages import Message
from bot.redact import redact
from bot.services import build_watcher
from bot.watch import ConsoleMembers, Watcher


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


def stop_and_watch(
    sandbox: Any,
    router: Any,
    watcher: Watcher | None,
    arg: str,
    show: Callable[[Message], None],
    write: Callable[[str], None],
    fail: Callable[[str], None],
) -> Watcher | None:
    """``:stop <session>``: the sandbox stops it (recovery_required), and the watcher polls once,
    posting what is new to the console as it would to the watch channel (R2.1, R3.1). Returns the
    watcher, built by the first call (the demo's watch channel is the console)."""
    if sandbox is None:
        fail(":stop works only against the embedded sandbox (recover-bot demo).")
        return watcher
    scenarios = getattr(sandbox, "scenarios", {}) or {}
    session_id = scenarios[arg].session_id if arg in scenarios else arg
    if not session_id:
        fail(
            ":stop takes a scenario's session id, e.g. :stop "
            + next((s.session_id for s in scenarios.values()), "<session_id>")
        )
        return watcher
    services = getattr(router, "services", None)
    if watcher is None and services is not None:
        watcher = build_watcher(
            services,
            ConsoleWatchPoster(show),
            channel="console",
            members=ConsoleMembers(),
            handoff=watch_handoff(services),
        )
        if watcher is not None and services.bulk is not None:
            services.bulk.watcher = watcher  # `/recover watch` shows its state, as in Slack
    if watcher is None:
        fail(":stop needs the runbook's watch: section.")
        return None
    try:
        sandbox.admin.stop(session_id)
    except Exception as exc:  # noqa: BLE001 - the sandbox's own error (an unknown session), shown
        fail(f":stop: {redact(str(exc))}")
        return watcher
    write(f"Sandbox: {session_id} stopped (recovery_required). Watch polls once:")
    result = watcher.poll_once()
    if not result.complete:
        fail(f"Watch could not read the listing: {result.error}")
    elif not result.claimed:
        write("Watch posted nothing new: each stop is posted once (`/recover watch` shows its state).")
    return watcher
