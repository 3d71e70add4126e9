"""The one bounded poll every wait of the decisions core runs on.

Why one helper: waiting for the scheduler to confirm the worker gone (R3.9), riding out a workspace
reclamation (R4.2) and finishing an uncertain send in the background all repeat "try, pause, try
again until a deadline". Written once, each of them is bounded by construction: a pause is cut to
the time left, the loop ends at the deadline, and time comes from the injected clock only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from bot.clock import Clock

T = TypeVar("T")


@dataclass(frozen=True)
class Pace:
    """How long to pause between attempts: ``every`` seconds, doubling up to ``cap`` when one is given."""

    every: float
    cap: float | None = None

    def next(self, delay: float) -> float:
        return delay if self.cap is None else min(delay * 2, self.cap)


def _nothing() -> None:
    return None


def poll(
    clock: Clock,
    until: datetime,
    pace: Pace,
    attempt: Callable[[], T | None],
    *,
    waited: Callable[[], None] = _nothing,
    attempt_first: bool = True,
) -> T | None:
    """Call ``attempt`` until it answers (anything but None) or ``until`` passes (then None).

    ``waited`` runs after each pause (a progress line); ``attempt_first=False`` pauses before the
    first attempt (a re-send that should not follow its failed send at once).
    """
    delay = pace.every
    if attempt_first:
        answer = attempt()
        if answer is not None:
            return answer
    while True:
        left = (until - clock.now()).total_seconds()
        if left <= 0:
            return None
        clock.sleep(min(delay, left))
        waited()
        delay = pace.next(delay)
        answer = attempt()
        if answer is not None:
            return answer
