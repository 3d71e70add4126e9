"""The watcher's state as ``/recover watch`` and ``/healthz`` read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


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
