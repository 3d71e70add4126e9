"""The store's contract tests run on both engines: ``store`` here is one per engine (tests/fixtures/store.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.services import MIGRATIONS
from bot.clock import ManualClock
from bot.store import Store


@pytest.fixture
def store(store_target: str | Path, clock: ManualClock) -> Store:
    """A step store with the core areas' tables (as the app opens it), on SQLite and on PostgreSQL."""
    return Store(store_target, clock=clock, migrations=MIGRATIONS)


@pytest.fixture
def file_store(db_path: Path, clock: ManualClock) -> Store:
    """The SQLite store alone, for what only a file has (its PRAGMAs, a copy of it, raw sqlite3 edits)."""
    return Store(db_path, clock=clock, migrations=MIGRATIONS)
