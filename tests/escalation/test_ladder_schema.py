"""The ``escalation:`` section of a runbook: its shape, its order rules, and errors with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import RunbookError
from bot.runbook import load_runbooks
from tests.fixtures.escalation import short_ladder_folder

SHIPPED = Path(__file__).resolve().parents[2] / "runbooks"


def _with_escalation(tmp_path: Path, block: str) -> Path:
    return short_ladder_folder(tmp_path, block)


def test_the_shipped_ladder_counts_from_the_request_and_ends_before_the_expiry() -> None:
    spec = load_runbooks(SHIPPED).escalation
    assert spec is not None
    assert [s.kind for s in spec.steps] == ["remind", "mention", "widen"]
    assert spec.end_seconds == 20 * 60 and spec.expiry_seconds == 30 * 60
    assert spec.allows_break_glass("close") and spec.allows_break_glass("abandon")
    assert not spec.allows_break_glass("confirm_completed")  # it asserts evidence
    assert [i for i, _ in spec.due(15 * 60)] == [0, 1]
    assert not spec.ended(19 * 60) and spec.ended(20 * 60)


def test_a_few_seconds_are_accepted_so_tests_can_shorten_the_ladder(tmp_path: Path) -> None:
    folder = _with_escalation(
        tmp_path,
        """
escalation:
  steps:
    - {kind: remind, after: {duration: 1s, help: r}}
    - {kind: mention, after: {duration: 2s, help: m}}
    - {kind: widen, after: {duration: 3s, help: w}, groups: [S0TIER2, U0BACKUP]}
  expiry: {duration: 5s, help: e}
""",
    )
    spec = load_runbooks(folder).escalation
    assert spec is not None and spec.expiry_seconds == 5
    assert spec.widened_groups(2.5) == () and spec.widened_groups(3) == ("S0TIER2", "U0BACKUP")


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            "escalation:\n  steps:\n    - {kind: remind, after: {duration: 5m, help: r}}\n"
            "    - {kind: mention, after: {duration: 2m, help: m}}\n  expiry: {duration: 30m, help: e}",
            "must increase",
        ),
        (
            "escalation:\n  steps:\n    - {kind: remind, after: {duration: 40m, help: r}}\n"
            "  expiry: {duration: 30m, help: e}",
            "before the expiry",
        ),
        (
            "escalation:\n  steps:\n    - {kind: mention, after: {duration: 1m, help: m}, groups: [S0X]}\n"
            "  expiry: {duration: 30m, help: e}",
            "only a 'widen' step names groups",
        ),
        (
            "escalation:\n  steps:\n    - {kind: page, after: {duration: 1m, help: m}}\n"
            "  expiry: {duration: 30m, help: e}",
            "kind",
        ),
        (
            "escalation:\n  steps:\n    - {kind: remind, after: {count: 3, help: m}}\n"
            "  expiry: {duration: 30m, help: e}",
            "{duration: …}",
        ),
        (
            "escalation:\n  steps:\n    - {kind: remind, after: {duration: 1m, help: m}}\n"
            "  expiry: {duration: 30m, help: e}\n  break_glass: {decisions: [confirm_completed_typo]}",
            "no decision named",
        ),
        (
            "escalation:\n  steps:\n    - {kind: remind, after: {duration: 1m, help: m}}\n"
            "  expiry: {duration: 30m, help: e}\n  break_glass: {decisions: [retry_restore]}",
            "not a two-person decision",
        ),
    ],
)
def test_a_bad_ladder_is_refused_with_its_file_and_line(tmp_path: Path, block: str, expected: str) -> None:
    folder = _with_escalation(tmp_path, block)
    with pytest.raises(RunbookError) as caught:
        load_runbooks(folder)
    text = str(caught.value)
    assert "session-recovery.yaml:" in text and expected in text, text
