"""The one list of request states (docs/requests.md) and the shared formatting helpers."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.format import age, as_int, as_str, duration, rough_age, run_time, show
from bot.runbook.vocabulary import APPROVAL_POLICIES
from bot.vocab import OPEN_STATES, Policy, RequestState

ROOT = Path(__file__).resolve().parents[2]


def test_request_states_are_exactly_the_documented_table() -> None:
    text = (ROOT / "docs/requests.md").read_text()
    table = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    assert table == [s.value for s in RequestState]
    open_line = re.search(r"^Open states: (.+?)\. Final", text, flags=re.MULTILINE)
    assert open_line is not None
    assert set(re.findall(r"`([a-z_]+)`", open_line.group(1))) == {s.value for s in OPEN_STATES}


def test_members_are_their_strings() -> None:
    # Rows and steps store plain text: a member must compare and hash as that text.
    assert RequestState.VOID == "void" and {"void": 1}[RequestState.VOID] == 1
    assert f"{RequestState.UNCERTAIN}" == "uncertain"
    assert {p.value for p in Policy} == set(APPROVAL_POLICIES)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.4, "59s"), (60, "1m"), (125, "2m05s"), (3600, "1h00m"), (3780, "1h03m")],
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_age_and_unknowns() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert age("2026-01-01T11:58:30Z", now) == "1m30s"
    assert age("2026-01-01T12:05:00Z", now) == "0s"  # a clock ahead never shows a negative age
    assert age(None, now) == "unknown" and age("yesterday", now) == "unknown"
    assert show(None) == "unknown" and show(False) == "false" and show(0) == "0"


def test_run_time_and_rough_age() -> None:
    assert run_time(1.25) == "1.2 s" and run_time(150) == "2.5 min"
    assert rough_age(40) == "40 s" and rough_age(720) == "12 min" and rough_age(9000) == "2.5 h"


def test_lenient_readers() -> None:
    assert as_int(3) == 3 and as_int(3.0) == 3 and as_int("-4") == -4
    assert as_int(True) is None and as_int(3.5) is None and as_int("3x") is None and as_int(None) is None
    assert (
        as_str("a") == "a" and as_str("") is None and as_str(7) == "7" and as_str(False) is None and as_str({}) is None
    )
