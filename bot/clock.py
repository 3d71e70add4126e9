"""Injectable time, so expiry, backoff and waits are tested without sleeping."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What the core needs of time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait; a manual clock advances instead."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to (tests, the sandbox's admin API)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)


def isoformat(when: datetime | None) -> str | None:
    """ISO 8601 with a Z suffix, as the API and the runbook write times."""
    if when is None:
        return None
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: object) -> datetime | None:
    """Parse an ISO 8601 time from the API; None for missing or unreadable values (never a crash)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
