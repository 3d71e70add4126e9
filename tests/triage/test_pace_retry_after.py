"""A 429 pauses every thread of a bulk job for as long as the control host says (bot/triage/pace.py),
read by the client's one Retry-After parser (bot/controlhost/_retry.py)."""

from __future__ import annotations

import httpx
import pytest

from bot.triage.pace import DEFAULT_PAUSE, PacedTransport, RateLimiter


class _Paused(RateLimiter):
    def __init__(self) -> None:
        super().__init__(rate=1000, burst=1000)
        self.pauses: list[float] = []

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": "Sun, 29 Nov 2099 10:00:30 -0000"}, None),  # a date: the time until it
        ({"Retry-After": "soon"}, DEFAULT_PAUSE),
        ({"Retry-After": "inf"}, DEFAULT_PAUSE),
        ({}, DEFAULT_PAUSE),
        ({"RateLimit-Reset-Ms": "250", "Retry-After": "9"}, 0.25),
        ({"RateLimit-Reset-Ms": "x", "Retry-After": "3"}, 3.0),
    ],
)
def test_a_429_pauses_for_what_the_host_names(headers: dict[str, str], expected: float | None) -> None:
    limiter = _Paused()
    inner = httpx.MockTransport(lambda request: httpx.Response(429, headers=headers))
    with httpx.Client(transport=PacedTransport(limiter, inner)) as client:
        assert client.get("http://control.test/v1/sessions").status_code == 429
    (pause,) = limiter.pauses
    if expected is None:
        assert pause > 60 * 60 * 24 * 365  # decades away
    else:
        assert pause == expected
