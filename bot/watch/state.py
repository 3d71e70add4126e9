"""The watcher's state as ``/recover watch`` and ``/healthz`` read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class WatchStatus:
    """What ``/recover watch`` shows."""

    paused_until: datetime | None
    paused: bool
    last_poll: datetime | None
    next_poll: datetime | None
    seen: int
    posted: int
    #: Folded into a storm's triage message (or, in older stores, dropped by a pause).
    suppressed: int
    errors: int
    failing_since: datetime | None
    last_error: str | None
    counts: dict[str, int] = field(default_factory=dict)
    paused_by: str | None = None
    #: Stops held by the pause: named in one digest at its end, each still-stuck one posted then.
    held: int = 0
    #: Where the last poll's paging stood (bot.watch.status.cursor_state), shared by every process.
    cursor: dict[str, Any] | None = None
    #: What makes it poll when no loop runs it (the demo's console commands); None: its interval.
    polls_on: str | None = None
    #: Who holds the installation's poll lease now (one bot polls; the others stand by), None: nobody.
    poller: str | None = None
    #: Whether that is this bot's watcher.
    polling: bool = False
