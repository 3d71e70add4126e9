"""The suite's markers select what they say: ``-m subprocess`` the tests that start a real process,
``-m property`` the hypothesis tests (marked by tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FILES = ["tests/console/test_console_script.py", "tests/core/test_cli.py", "tests/gate/test_gate_property.py"]

pytestmark = pytest.mark.subprocess


def _collected(marker: str) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            marker,
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            *FILES,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_subprocess_selects_the_process_tests_and_only_those() -> None:
    listed = _collected("subprocess")
    assert (
        "tests/console/test_console_script.py::test_ctrl_c_in_the_resume_wait_is_recorded_and_never_replayed" in listed
    )
    assert "tests/core/test_cli.py::test_an_unreadable_store_is_one_line" in listed
    assert "tests/core/test_cli.py::test_every_command_help_shows_an_example" not in listed  # in-process
    assert not [t for t in listed if "test_gate_property" in t]


def test_property_selects_the_hypothesis_tests() -> None:
    listed = _collected("property")
    assert [t.split("::")[0] for t in listed] == ["tests/gate/test_gate_property.py"], listed
