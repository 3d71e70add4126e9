"""The suite's one wait: it returns the first truthy value, and on timeout says what it waited for."""

from __future__ import annotations

import time

import pytest

from tests.fixtures.waiting import eventually


def test_returns_the_first_truthy_value() -> None:
    seen: list[int] = []

    def grows() -> list[int] | None:
        seen.append(len(seen))
        return list(seen) if len(seen) >= 3 else None

    assert eventually(grows, 5, "three polls") == [0, 1, 2]


def test_an_exception_is_a_not_yet() -> None:
    calls = iter([ValueError("not listening"), 7])

    def flaky() -> int:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert eventually(flaky, 5, "a listening server") == 7


def test_timeout_names_what_and_the_last_value() -> None:
    began = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        eventually(lambda: 0, 0.2, "the count to move")
    assert time.monotonic() - began >= 0.2
    assert "the count to move" in str(failed.value)
    assert "last saw 0" in str(failed.value)


def test_timeout_names_the_last_exception() -> None:
    def broken() -> bool:
        raise ConnectionRefusedError("refused")

    with pytest.raises(pytest.fail.Exception) as failed:
        eventually(broken, 0.1, "the sandbox")
    assert "the sandbox" in str(failed.value)
    assert "last raised ConnectionRefusedError: refused" in str(failed.value)
