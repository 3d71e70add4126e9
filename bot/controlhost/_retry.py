"""Retry policy: capped exponential backoff with jitter, honouring Retry-After."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long the client retries a call whose outcome is uncertain.

    ``attempts`` counts every send, the first included. The n-th wait is
    ``min(max_delay, base_delay * 2**(n-1))`` minus up to ``jitter`` of it (so many bots retrying
    together do not hit the control host in lock-step). A Retry-After header wins over the computed
    wait, capped at ``max_retry_after``.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.5
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryPolicy.jitter must be between 0 and 1")

    def delay(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        capped = min(self.max_delay, self.base_delay * (2.0 ** max(0, attempt - 1)))
        draw = rng.random() if rng is not None else random.random()
        return capped * (1 - self.jitter * draw)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date; None when absent or unreadable.

    The one reader of the header, for the client's retries, for the pace of bulk work (a 429
    pauses every thread: bot/triage/pace.py) and for Slack's 429 on the ladder's live line
    (bot/slack/ladder.py). ``now`` is aware; a date without a zone is UTC (HTTP
    dates are GMT). Not a finite number (``inf``, ``nan``) is unreadable, never a wait forever.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())
