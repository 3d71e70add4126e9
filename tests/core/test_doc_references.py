"""The repository speaks of itself: every ``.md`` path it names resolves inside it, and no text points at
a tracker's issue number or at documents a clone does not have.

A clone must be able to follow every pointer. Paths are resolved against the repository root and
against the folder of the file that names them; URLs are not paths.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Where pointers live: code, tests, docs, runbook YAML, benches, deployment files, the README.
SCANNED = ["bot", "tests", "docs", "runbooks", "bench", "deploy", "scripts", ".ci"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ""}

MD_PATH = re.compile(r"(?<![\w/.:-])((?:\.{1,2}/)?[\w.-]+(?:/[\w.-]+)*\.md)\b")
URL = re.compile(r"https?://\S+")
# Built from parts so that this file does not match itself.
ISSUE_REF = re.compile(r"\b" + "iss" + r"ues?\s+#?\d+", re.IGNORECASE)
OUTSIDE = re.compile(r"\.\./shared|shared/docs|shared/seed|the API page", re.IGNORECASE)


def _files() -> list[Path]:
    out = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for top in SCANNED:
        base = ROOT / top
        if not base.exists():
            continue
        for path in base.rglob("*"):
            if not path.is_file() or any(p in {"__pycache__", "out", ".docker-test"} for p in path.parts):
                continue
            if path.suffix in SUFFIXES or path.name == "run":
                out.append(path)
    return sorted(out)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


FILES = _files()


def _inside(path: Path) -> bool:
    """A pointer counts only when it lands inside the repository: a clone has nothing beside it."""
    return path.is_file() and path.resolve().is_relative_to(ROOT)


def _resolves(name: str, where: Path) -> bool:
    return _inside(ROOT / name) or _inside(where.parent / name)


def test_the_scan_sees_the_tree() -> None:
    """Guard against a scan that silently checks nothing."""
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "docs/commands.md", "docs/control-host-api.md", "docs/runbook.md"} <= names
    assert "runbooks/session-recovery.yaml" in names
    assert sum(1 for n in names if n.startswith("bot/")) > 30


def test_every_md_path_resolves_inside_the_repository() -> None:
    dangling = []
    this = Path(__file__).resolve()
    for path in FILES:
        if path == this:  # its examples below are data for the patterns, not pointers
            continue
        for lineno, line in enumerate(_text(path).splitlines(), 1):
            line = URL.sub("", line)
            for match in MD_PATH.finditer(line):
                if not _resolves(match.group(1), path):
                    dangling.append(f"{path.relative_to(ROOT)}:{lineno}: {match.group(1)}")
    assert not dangling, "pointers a clone cannot follow:\n" + "\n".join(dangling)


def test_no_text_points_outside_or_at_an_issue_number() -> None:
    found = []
    this = Path(__file__).resolve()
    for path in FILES:
        if path == this:
            continue
        for lineno, line in enumerate(_text(path).splitlines(), 1):
            for pattern in (ISSUE_REF, OUTSIDE):
                m = pattern.search(line)
                if m:
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {m.group(0)!r}")
    assert not found, "say what the pointer means instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("see ../shared/docs/commands.md", True),
        ("Targets (" + "issue 3): fast", True),
        ("as the API page says", True),
        ("see docs/commands.md (R3.9)", False),
    ],
)
def test_the_patterns_catch_what_they_should(text: str, bad: bool) -> None:
    hit = bool(ISSUE_REF.search(text) or OUTSIDE.search(text))
    dangling = any(not _resolves(m.group(1), ROOT / "README.md") for m in MD_PATH.finditer(text))
    assert (hit or dangling) is bad


def test_a_pointer_to_a_file_outside_the_repository_does_not_resolve(tmp_path: Path) -> None:
    """A file that exists beside or above the checkout is still a pointer a user's clone cannot follow."""
    outside = tmp_path / "notes.md"
    outside.write_text("x")
    name = os.path.relpath(outside, ROOT)
    assert name.startswith("..")
    assert not _resolves(name, ROOT / "README.md")
    assert _resolves("docs/commands.md", ROOT / "README.md")
