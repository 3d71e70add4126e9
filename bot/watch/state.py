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
    suppressed: int
    errors: int
    failing_since: datetime | None
    last_error: str | None
    counts: dict[str, int] = field(default_factory=dict)
    paused_by: str | None = None
    #: Where the last poll's paging stood (bot.watch.status.cursor_state), shared by every process.
    cursor: dict[str, Any] | None = None
