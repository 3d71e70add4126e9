"""Only the gate sends, by type: the control host client's ``send`` (the one POST method) takes a
:class:`Permit`, which only the gate's seal makes. A module that sends a stored record without the gate
does not type-check (strict mypy, as scripts/test.sh runs it), and a Permit made without the seal is
refused at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.controlhost import Permit
from bot.store import IdempotencyRecord

REPO = Path(__file__).resolve().parents[2]

_BYPASS = """\
from bot.controlhost import ControlHostClient, Permit, Receipt
from bot.store import IdempotencyRecord


def send_without_the_gate(client: ControlHostClient, record: IdempotencyRecord) -> Receipt:
    return client.send(record)


def forge_a_permit(client: ControlHostClient, record: IdempotencyRecord) -> Receipt:
    return client.send(Permit(record, object()))
"""

_THROUGH_THE_TYPE = """\
from bot.controlhost import ControlHostClient, Permit, Receipt


def send_with_a_permit(client: ControlHostClient, permit: Permit) -> Receipt:
    return client.send(permit)
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "elsewhere.py"
    module.write_text(source, encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            str(REPO / "pyproject.toml"),
            str(module),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=240,
    )


@pytest.mark.subprocess
@pytest.mark.slow
def test_mypy_rejects_a_send_without_a_permit(tmp_path: Path) -> None:
    result = _mypy(tmp_path, _BYPASS)
    assert result.returncode == 1, result.stdout + result.stderr
    # Both bypasses are named: the bare record, and a Permit made without the gate's seal.
    assert 'Argument 1 to "send" of "ControlHostClient" has incompatible type "IdempotencyRecord"' in result.stdout
    assert 'Argument 2 to "Permit" has incompatible type "object"' in result.stdout


@pytest.mark.subprocess
@pytest.mark.slow
def test_mypy_accepts_a_send_of_a_permit(tmp_path: Path) -> None:
    # The same command passes on a file that sends a Permit it was given: the rejection above is the
    # type's doing, not a broken mypy run.
    result = _mypy(tmp_path, _THROUGH_THE_TYPE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_permit_without_the_seal_is_refused() -> None:
    record = IdempotencyRecord.__new__(IdempotencyRecord)
    with pytest.raises(TypeError, match="made by the gate only"):
        Permit(record, object())  # type: ignore[arg-type]
