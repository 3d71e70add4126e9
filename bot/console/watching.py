"""The demo's watch channel: the console itself, so ``:stop <scenario>`` and ``:incident <count>`` show
the watcher at work.

A :class:`bot.watch.Poster` that prints what the watcher would post in Slack and remembers it, so a
claim taken over later is found by its key here as in a Slack channel. The demo's watcher is on from
the console's start (``/recover watch`` says so); what is stuck then is known, not new (R2.1: a stop
is posted once, when it happens). No loop runs it: ``:stop`` and ``:incident`` each poll it once.
``:incident`` is a checkpoint store's outage in the sandbox (its incident machinery, one cause),
``:fix`` ends it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from bot.messages import Message
from bot.redact import redact
from bot.watch import Watcher


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


#: What makes the demo's watcher poll: no loop runs it, each of these commands polls it once.
DEMO_POLLS_ON = "at the next `:stop` or `:incident` (the demo's watch polls on those, not on a timer)"
#: The demo's mass incident: a checkpoint store's outage, the sessions stopped at the restore limit (R2.7).
INCIDENT_CAUSES = ("transient",)
INCIDENT_OUTAGE_SECONDS = 3600.0  # until `:fix` ends it
#: What the demo says at its start about its watcher (only when it has one).
DEMO_WATCH_LINE = (
    "Watch is on, posting here; the sessions above that are stuck already are known, not new. "
    "`:incident <count>` starts a mass incident (a checkpoint-store outage), `:fix` ends it."
)


def _poll(watcher: Watcher, write: Callable[[str], None], fail: Callable[[str], None]) -> None:
    result = watcher.poll_once()
    if not result.complete:
        fail(f"Watch could not read the listing: {result.error}")
    elif not result.claimed:
        write("Watch posted nothing new: each stop is posted once (`/recover watch` shows its state).")


def stop_and_watch(
    sandbox: Any,
    watcher: Watcher | None,
    arg: str,
    write: Callable[[str], None],
    fail: Callable[[str], None],
) -> None:
    """``:stop <session>``: the sandbox stops it (recovery_required), and the watcher polls once,
    posting what is new to the console as it would to the watch channel (R2.1, R3.1)."""
    if sandbox is None:
        fail(":stop works only against the embedded sandbox (recover-bot demo).")
        return
    scenarios = getattr(sandbox, "scenarios", {}) or {}
    session_id = scenarios[arg].session_id if arg in scenarios else arg
    if not session_id:
        fail(
            ":stop takes a scenario's session id, e.g. :stop "
            + next((s.session_id for s in scenarios.values()), "<session_id>")
        )
        return
    if watcher is None:
        fail(":stop needs the runbook's watch: section.")
        return
    try:
        sandbox.admin.stop(session_id)
    except Exception as exc:  # noqa: BLE001 - the sandbox's own error (an unknown session), shown
        fail(f":stop: {redact(str(exc))}")
        return
    write(f"Sandbox: {session_id} stopped (recovery_required). Watch polls once:")
    _poll(watcher, write, fail)


def incident_and_watch(
    sandbox: Any,
    watcher: Watcher | None,
    arg: str,
    write: Callable[[str], None],
    fail: Callable[[str], None],
) -> None:
    """``:incident <count>``: the sandbox's checkpoint store goes down and ``count`` sessions stop at
    the restore limit (R2.7); the watcher polls once and posts the storm, one triage message."""
    if sandbox is None:
        fail(":incident works only against the embedded sandbox (recover-bot demo).")
        return
    if watcher is None:
        fail(":incident needs the runbook's watch: section.")
        return
    try:
        count = int(arg)
    except ValueError:
        fail(":incident takes a number of sessions, e.g. :incident 60")
        return
    try:
        info = sandbox.admin.incident(count, outage_seconds=INCIDENT_OUTAGE_SECONDS, causes=INCIDENT_CAUSES)
    except Exception as exc:  # noqa: BLE001 - the sandbox's own error (a count out of range), shown
        fail(f":incident: {redact(str(exc))}")
        return
    write(
        f"Sandbox: the checkpoint store is down; {info['sessions']} sessions ({info['prefix']}_…) stopped at "
        "the restore limit. `:fix` brings the store back. Watch polls once:"
    )
    _poll(watcher, write, fail)


def end_outage(sandbox: Any, write: Callable[[str], None], fail: Callable[[str], None]) -> None:
    """``:fix``: the incident's checkpoint store answers again; a retry_restore now restores (R2.6)."""
    if sandbox is None:
        fail(":fix works only against the embedded sandbox (recover-bot demo).")
        return
    try:
        info = sandbox.admin.end_outage()
    except Exception as exc:  # noqa: BLE001 - the sandbox's own error (no incident), shown
        fail(f":fix: {redact(str(exc))} (`:incident <count>` starts one)")
        return
    write(
        f"Sandbox: the checkpoint store answers again (outage over at {info['outage_until']}). "
        "The stopped sessions stay stopped until someone decides: `/recover batch decide <group> retry_restore …`."
    )
