"""How values are shown to people, and read leniently from outside, in one place.

Every front and every core message uses these, so "unknown", durations and booleans read the same
in a diagnosis, a request, a reconciler run and a hand-off.
"""

from __future__ import annotations

from datetime import datetime

from bot.clock import parse_time

UNKNOWN = "unknown"


def show(value: object) -> str:
    """A value for people: ``None`` is "unknown" (never a crash, never an empty cell)."""
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def duration(seconds: float) -> str:
    """A span for timers, waits and expiries, whole seconds: ``45s``, ``2m05s``, ``1h03m``."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, sec = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s" if sec else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def age(since: str | None, now: datetime) -> str:
    """How long ago an ISO time was, as :func:`duration`; "unknown" when it cannot be read."""
    start = parse_time(since)
    if start is None:
        return UNKNOWN
    return duration(max(0.0, (now - start).total_seconds()))


def run_time(seconds: float) -> str:
    """A measured run time, to a tenth: ``12.3 s``, ``4.2 min`` (a command's own duration)."""
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def rough_age(seconds: float) -> str:
    """A coarse age or window: ``40 s``, ``12 min``, ``2.5 h`` (how old a record is)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def as_str(value: object) -> str | None:
    """A text field read leniently: text, or a number as text; empty text is as good as missing (``None``)."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def as_int(value: object) -> int | None:
    """A whole number read leniently (``3``, ``3.0``, ``"3"``); a boolean or anything else is ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None
