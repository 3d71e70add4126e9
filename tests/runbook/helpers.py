"""Helpers for runbook tests: edited copies of the repository's runbooks in a temporary directory."""

from __future__ import annotations

import shutil
from pathlib import Path

from bot.runbook.vocabulary import FACT_NAMES
from tests.fixtures.runbook import REPO_RUNBOOKS

SESSION = "session-recovery.yaml"
ISOLATION = "isolation-upgrade.yaml"


def copy_runbooks(tmp_path: Path) -> Path:
    """Copy the repository runbooks into ``tmp_path/runbooks`` and return that directory."""
    target = tmp_path / "runbooks"
    target.mkdir(parents=True, exist_ok=True)
    for name in (SESSION, ISOLATION):
        shutil.copy(REPO_RUNBOOKS / name, target / name)
    return target


def edit(directory: Path, old: str, new: str, name: str = SESSION, count: int = 1) -> tuple[Path, int]:
    """Replace ``old`` by ``new`` (exactly ``count`` occurrences) in a copied runbook.

    Returns the file and the 1-based line where the first replacement starts, so tests can assert the
    loader's ``file:line``.
    """
    path = directory / name
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times in {name}"
    start = text.index(old)
    path.write_text(text.replace(old, new), encoding="utf-8")
    # the line of the first character that differs
    offset = 0
    while offset < min(len(old), len(new)) and old[offset] == new[offset]:
        offset += 1
    return path, text[: start + offset].count("\n") + 1


def facts(**values: object) -> dict[str, object]:
    """A complete facts mapping: every known fact unknown (None) except those given (dots as __)."""
    out: dict[str, object] = dict.fromkeys(FACT_NAMES)
    out.update({"now": "2026-11-29T10:00:00.000Z", "session.id": "ses_1"})
    for key, value in values.items():
        name = key.replace("__", ".")
        assert name in FACT_NAMES, name
        out[name] = value
    return out
