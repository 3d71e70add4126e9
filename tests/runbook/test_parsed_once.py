"""A runbook set is parsed once per process while its files are unchanged: every core of a fleet (and
every test that composes one) reads the same runbooks. An edit is read again; a copy is the caller's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bot.errors import RunbookError
from bot.runbook import load_runbooks, loader
from tests.fixtures.runbook import REPO_RUNBOOKS


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    target = tmp_path / "runbooks"
    shutil.copytree(REPO_RUNBOOKS, target)
    return target


def test_unchanged_files_are_not_parsed_again_and_each_caller_gets_its_own_copy(
    copied: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parses: list[int] = []
    real = loader._parse
    monkeypatch.setattr(loader, "_parse", lambda files: parses.append(len(files)) or real(files))
    first, second = load_runbooks(copied), load_runbooks(copied)
    assert len(parses) == 1
    assert first is not second and first.commands is not second.commands
    first.commands.clear()  # what one core does to its copy reaches no other
    assert load_runbooks(copied).commands == second.commands != []


def test_an_edited_file_is_parsed_again_and_a_broken_edit_is_refused(copied: Path) -> None:
    load_runbooks(copied)
    main = copied / "session-recovery.yaml"
    text = main.read_text(encoding="utf-8")
    main.write_text(text.replace("version:", "versio:", 1), encoding="utf-8")
    stat = main.stat()
    os.utime(main, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with pytest.raises(RunbookError, match="session-recovery.yaml"):
        load_runbooks(copied)
    main.write_text(text, encoding="utf-8")
    assert load_runbooks(copied).commands
