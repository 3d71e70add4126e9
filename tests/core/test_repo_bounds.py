"""The guard that keeps tests inside the repository sees an outside read and lets inside ones pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import repo_bounds

ROOT = repo_bounds.ROOT


def test_a_read_beside_the_checkout_is_recorded() -> None:
    sibling = ROOT.parent / "no-such-folder-beside-the-checkout" / "notes.txt"
    with pytest.raises(OSError):
        sibling.open()
    assert repo_bounds.outside_reads == [str(sibling)]
    repo_bounds.outside_reads.clear()  # this test's own read is the point; do not fail it


def test_a_relative_path_climbing_out_is_recorded() -> None:
    climbing = ROOT / ".." / "shared-beside" / "x.txt"
    assert repo_bounds.outside_the_repository(str(climbing)) == str(ROOT.parent / "shared-beside" / "x.txt")


@pytest.mark.parametrize(
    "inside",
    [ROOT / "README.md", ROOT / "docs" / "notes.txt", ROOT / ".venv" / "bin" / "python"],
)
def test_reads_inside_the_checkout_pass(inside: Path) -> None:
    assert repo_bounds.outside_the_repository(inside) is None


def test_temporary_files_and_hidden_tool_folders_pass(tmp_path: Path) -> None:
    assert repo_bounds.outside_the_repository(tmp_path / "x") is None
    assert repo_bounds.outside_the_repository(ROOT.parent / ".docker" / "config.json") is None
