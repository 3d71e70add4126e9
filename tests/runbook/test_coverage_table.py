"""docs/runbook-coverage.md stays true: one row per rule of the runbooks' ``rules:``, and every test a row
names is one pytest collects (a renamed or deleted test fails here, not silently in the table)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.runbook import load_runbooks

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "docs/runbook-coverage.md"
ROW = re.compile(r"^\| (R\d+\.\d+) \| (enforced|surfaced) \| (.+) \| `([^`]+)` \|$")


def rows(text: str) -> list[tuple[str, str]]:
    """(rule, test node id) for every table row; a malformed rule row is an error, not skipped."""
    out = []
    for line in text.splitlines():
        if line.startswith("| R"):
            match = ROW.match(line)
            assert match, f"malformed row in {TABLE.name}: {line}"
            out.append((match.group(1), match.group(4)))
    return out


def uncollected(node_ids: list[str]) -> list[str]:
    """The node ids pytest does not collect (each may name a parametrized test without its parameters).

    The files are collected whole (a missing node id would make pytest collect nothing at all).
    """
    files = sorted({n.split("::", 1)[0] for n in node_ids if (REPO / n.split("::", 1)[0]).is_file()})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = [line.strip() for line in result.stdout.splitlines()]
    return [n for n in node_ids if not any(c == n or c.startswith(n + "[") for c in collected)]


def test_every_rule_has_exactly_one_row() -> None:
    rules = set(load_runbooks(REPO / "runbooks").rules)
    assert len(rules) >= 47
    named = [rule for rule, _ in rows(TABLE.read_text(encoding="utf-8"))]
    assert sorted(set(named)) == sorted(named), "a rule has two rows"
    assert not rules - set(named), f"rules without a row: {sorted(rules - set(named))}"
    assert not set(named) - rules, f"rows for rules no runbook defines: {sorted(set(named) - rules)}"


@pytest.mark.subprocess
def test_every_test_named_is_collected() -> None:
    tests = [test for _, test in rows(TABLE.read_text(encoding="utf-8"))]
    assert all(t.startswith("tests/") and "::" in t for t in tests)
    assert uncollected(tests) == []


@pytest.mark.subprocess
def test_the_check_catches_a_test_that_does_not_exist() -> None:
    # The guard itself can fail: a renamed test is reported, an existing one is not.
    real = "tests/runbook/test_coverage_table.py::test_every_rule_has_exactly_one_row"
    gone = "tests/runbook/test_coverage_table.py::test_that_was_renamed"
    assert uncollected([real, gone]) == [gone]
