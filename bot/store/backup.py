"""A consistent online copy of the step store and the files beside it (``recover-bot backup DEST``).

Why SQLite's backup API and not ``cp``: the store is in WAL mode, so the main file alone misses every
commit not yet checkpointed, and a copy taken while the bot writes can be torn. The backup API copies
one consistent snapshot (a read transaction: the bot keeps writing meanwhile) into a single
self-contained file (journal mode DELETE, no ``-wal`` beside it). Each companion database (the Slack
inbox, ``<store>.inbox``) is copied the same way, on its own snapshot: it holds events not yet handled,
which Slack would not send again. The copy is written beside DEST, checked, then moved into place, so
DEST is either complete or absent; an existing file is never overwritten.

For continuous replication off the host, Litestream streams both files (deploy/litestream/).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bot.errors import StoreError

BUSY_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class Copied:
    """One database copied: where from, where to, its size and (for the store) its step count."""

    source: Path
    dest: Path
    size: int
    steps: int | None


def backup(store: str | Path, dest: str | Path, *, companions: Iterable[Callable[[Path], Path]] = ()) -> list[Copied]:
    """Copy ``store`` to ``dest`` and each existing companion (``f(store)``) to ``f(dest)``.

    Raises :class:`StoreError` with one actionable line: no store, DEST (or a companion's) exists,
    DEST's folder missing.
    """
    source, target = Path(store), Path(dest)
    if not source.is_file():
        raise StoreError(f"no step store at {source}: give the bot's RECOVER_DB (or --db)")
    pairs = [(source, target)] + [(f(source), f(target)) for f in companions]
    pairs = [(s, d) for s, d in pairs if s == source or s.is_file()]
    for _, d in pairs:
        if d.exists():
            raise StoreError(f"{d} exists: a backup never overwrites; give a new file name")
    if not target.parent.is_dir():
        raise StoreError(f"{target.parent} is not a folder: create it first, or give another DEST")
    return [copy_database(s, d, count_steps=s == source) for s, d in pairs]


def copy_database(source: Path, dest: Path, *, count_steps: bool = False) -> Copied:
    """One consistent snapshot of ``source`` in ``dest`` (written beside it, checked, then renamed)."""
    if dest.exists() or dest.resolve() == source.resolve():
        raise StoreError(f"{dest} exists: a backup never overwrites; give a new file name")
    partial = dest.with_name(dest.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    try:
        steps = _snapshot(source, partial, count_steps)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    os.replace(partial, dest)
    _fsync_dir(dest.parent)
    return Copied(source, dest, dest.stat().st_size, steps)


def _snapshot(source: Path, partial: Path, count_steps: bool) -> int | None:
    try:
        src = sqlite3.connect(source, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            dst = sqlite3.connect(partial)
            try:
                src.backup(dst)  # all pages in one step: one read transaction, one snapshot
                dst.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
                (check,) = dst.execute("PRAGMA quick_check").fetchone()
                if check != "ok":
                    raise StoreError(f"the copy of {source} failed its check ({check}); nothing was written")
                if not count_steps:
                    return None
                return _steps(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot copy {source}: {exc}") from exc


def step_count(path: str | Path) -> int:
    """How many steps a store file holds (what a backup or a restore is compared by)."""
    conn = sqlite3.connect(path)
    try:
        return _steps(conn)
    finally:
        conn.close()


def _steps(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM steps").fetchone()[0])


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
