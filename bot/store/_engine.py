"""Which engine holds the step store, and how a unit of work reaches it.

``RECOVER_DB`` is a SQLite file path (the embedded default) or a ``postgresql://`` URL. Everything
above the store speaks one dialect, sqlite-utils' ``Database`` and SQLite's SQL; on PostgreSQL the
store hands out a :class:`bot.store._pg.PgDatabase`, which speaks the same calls and translates the
few SQLite-only forms (bot/store/_dialect.py). So the same migration steps (sqlite-utils'
``Migrations.apply``) build one schema on both engines, and nothing above the store learns which
engine it has.

Why an engine object and not an ``if`` per call: the store has three engine-specific moments (open a
connection, begin a write, serialise the chain's append) and each engine keeps its own.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Protocol

from sqlite_utils import Database

from bot.dburl import is_pg_url, looks_like_url, refused_url
from bot.errors import StoreError


class Engine(Protocol):
    """One engine's three moments: connect, begin a write, serialise the chain's append."""

    name: str
    # Shown in messages: the file's path, or the URL with its password masked.
    where: str
    # The SQLite file (companion files go beside it); None on a server engine.
    path: Path | None

    def prepare(self) -> None: ...

    def connect(self) -> Database: ...

    def begin_write(self, db: Database) -> None: ...

    def lock_chain(self, db: Database) -> None: ...


class SqliteEngine:
    """One SQLite file: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE`` (see bot/store/_store.py)."""

    name = "sqlite"

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path: Path | None = path
        self._file = path
        self.where = str(path)
        self.busy_timeout = busy_timeout

    def connect(self) -> Database:
        try:
            # isolation_level=None: no implicit BEGINs; every transaction is explicit.
            conn = sqlite3.connect(str(self._file), timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the step store {self._file}: {exc}") from exc
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        return Database(conn, execute_plugins=False)

    def prepare(self) -> None:
        # journal_mode is persistent in the file; switching needs a moment without other writers.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            db = self.connect()
            try:
                mode = db.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"the step store {self._file} cannot use WAL (journal_mode={mode})")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise StoreError(f"cannot prepare the step store {self._file}: {exc}") from exc
                time.sleep(0.05)
            finally:
                db.close()

    def begin_write(self, db: Database) -> None:
        try:
            db.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"the step store {self._file} stayed locked for {self.busy_timeout:.0f} s: {exc}",
                hint="Another process holds a long write; try again.",
            ) from exc

    def lock_chain(self, db: Database) -> None:
        """Nothing to take: ``BEGIN IMMEDIATE`` already holds the file's one write lock."""


def engine_for(target: str | Path, busy_timeout: float) -> Engine:
    """The engine a ``RECOVER_DB`` value names: a path, or a ``postgresql://`` URL; any other URL is refused."""
    text = str(target)
    if isinstance(target, str) and looks_like_url(text):
        if not is_pg_url(text):
            raise StoreError(refused_url(text))
        from bot.store._pg import PgEngine  # psycopg is an optional extra: imported only when asked for

        return PgEngine(text, busy_timeout)
    return SqliteEngine(Path(target), busy_timeout)
