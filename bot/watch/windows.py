"""Local-time windows of the runbook's watch data: quiet hours and shift changes, in their time zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo


def within(start: str, end: str, zone: str, now: datetime) -> bool:
    """``now`` falls in [start, end) local time (``HH:MM``); an end before the start spans midnight."""
    local = now.astimezone(ZoneInfo(zone)).strftime("%H:%M")
    return start <= local < end if start <= end else (local >= start or local < end)


def shift_changes(times: list[str], zone: str, now: datetime) -> list[datetime]:
    """The shift changes of yesterday and today up to ``now``, oldest first (UTC)."""
    tz = ZoneInfo(zone)
    today = now.astimezone(tz).date()
    out: list[datetime] = []
    for day in (today - timedelta(days=1), today):
        for text in times:
            hour, minute = (int(p) for p in text.split(":"))
            at = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz).astimezone(UTC)
            if at <= now:
                out.append(at)
    return sorted(out)
