"""The SQLite forms the areas write mean the same on both engines (bot/store/_dialect.py, bot/store/_pg.py).

Each form here is one an area uses today; on PostgreSQL it is translated, so a test per form is what
keeps "nothing above the store learns which engine it has" true.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlite_utils.migrations import Migrations

from bot.clock import ManualClock
from bot.store import Store

forms = Migrations("test_dialect_forms")


@forms(name="0001_tables")
def _tables(db) -> None:  # type: ignore[no-untyped-def]
    db.execute("CREATE TABLE keyed (id TEXT PRIMARY KEY, n INTEGER, x REAL, note TEXT)")
    db.execute("CREATE TABLE counted (num INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL)")
    db.execute("CREATE TRIGGER keyed_fixed BEFORE UPDATE OF x ON keyed BEGIN SELECT RAISE(ABORT, 'x is fixed'); END")


@pytest.fixture
def forms_store(store_target: str | Path) -> Store:
    return Store(store_target, ManualClock(), migrations=[forms])


def test_insert_forms_and_lastrowid(forms_store: Store) -> None:
    with forms_store.write() as db:
        first = db.execute("INSERT INTO counted (what) VALUES (?)", ["a"])
        second = db.execute("INSERT INTO counted (what) VALUES (?)", ["b"])
        assert (first.lastrowid, second.lastrowid) == (1, 2)
        db.execute("INSERT INTO keyed (id, n, note) VALUES (?, ?, ?)", ["k1", 1, "one"])
        ignored = db.execute("INSERT OR IGNORE INTO keyed (id, n, note) VALUES (?, ?, ?)", ["k1", 9, "dup"])
        assert ignored.rowcount == 0
        db.execute("INSERT OR REPLACE INTO keyed (id, n, note) VALUES (?, ?, ?)", ["k2", 2, "two"])
        db.execute("INSERT OR REPLACE INTO keyed (id, n, note) VALUES (?, ?, ?)", ["k2", 2, "two again"])
    with forms_store.read() as db:
        rows = db.execute("SELECT * FROM keyed ORDER BY id").fetchall()
        # SELECT * shows the table's own columns only.
        assert [tuple(r) for r in rows] == [("k1", 1, None, "one"), ("k2", 2, None, "two again")]
        # The insertion order SQLite's rowid gives.
        assert [r["id"] for r in db.table("keyed").rows_where(order_by="rowid")] == ["k1", "k2"]


def test_null_matching_equality_and_the_catalog(forms_store: Store) -> None:
    with forms_store.write() as db:
        db.execute("INSERT INTO keyed (id, n, note) VALUES ('a', 1, NULL), ('b', 2, 'x')")
        assert [r[0] for r in db.execute("SELECT id FROM keyed WHERE note IS ?", [None])] == ["a"]
        assert [r[0] for r in db.execute("SELECT id FROM keyed WHERE note IS NOT ?", [None])] == ["b"]
        found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'keyed'").fetchone()
        assert found is not None
        assert [r[1] for r in db.execute("PRAGMA table_info(keyed)").fetchall()] == ["id", "n", "x", "note"]


def test_a_failed_statement_leaves_its_transaction_usable_and_a_trigger_refuses(forms_store: Store) -> None:
    with forms_store.write() as db:
        db.execute("INSERT INTO keyed (id, n) VALUES ('a', 1)")
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO keyed (id, n) VALUES ('a', 2)")
        db.execute("INSERT INTO keyed (id, n) VALUES ('b', 2)")  # SQLite keeps the transaction: so does PG
        with pytest.raises(sqlite3.IntegrityError, match="x is fixed"):
            db.execute("UPDATE keyed SET x = 5 WHERE id = 'a'")
        db.execute("UPDATE keyed SET note = 'ok' WHERE id = 'a'")
    with forms_store.read() as db:
        assert [tuple(r) for r in db.execute("SELECT id, n, note FROM keyed ORDER BY id")] == [
            ("a", 1, "ok"),
            ("b", 2, None),
        ]
