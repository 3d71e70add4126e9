"""The one bounded poll under every wait (R3.9, R4.2, uncertain sends): it ends at its deadline."""

from __future__ import annotations

from datetime import timedelta

from bot.clock import ManualClock
from bot.decisions._poll import Pace, poll


def test_poll_stops_at_the_deadline_and_cuts_the_last_pause() -> None:
    clock = ManualClock()
    start = clock.now()
    calls: list[float] = []

    def attempt() -> str | None:
        calls.append((clock.now() - start).total_seconds())
        return None

    assert poll(clock, start + timedelta(seconds=10), Pace(4), attempt) is None
    assert calls == [0, 4, 8, 10]  # the last pause is cut to the 2 s left
    assert clock.now() == start + timedelta(seconds=10)


def test_poll_doubles_up_to_the_cap_and_returns_the_first_answer() -> None:
    clock = ManualClock()
    start = clock.now()
    pauses: list[float] = []
    answers = iter([None, None, None, None, "done"])

    def attempt() -> str | None:
        pauses.append((clock.now() - start).total_seconds())
        return next(answers)

    assert poll(clock, start + timedelta(seconds=600), Pace(1, cap=4), attempt, attempt_first=False) == "done"
    assert pauses == [1, 3, 7, 11, 15]  # pauses 1, 2, 4, 4, 4


def test_poll_with_no_time_left_tries_once_and_never_sleeps() -> None:
    clock = ManualClock()
    start = clock.now()
    tries: list[int] = []
    waited: list[int] = []
    assert poll(clock, start, Pace(5), lambda: tries.append(1), waited=lambda: waited.append(1)) is None
    assert tries == [1] and waited == [] and clock.now() == start
