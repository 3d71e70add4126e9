"""SQLite step store: cases, the append-only hash-chained step log, idempotency records."""

from __future__ import annotations

from bot.store._store import Case, IdempotencyRecord, Step, Store
from bot.store.schema import GENESIS_HASH, MIGRATION_SETS, register_migrations

__all__ = [
    "GENESIS_HASH",
    "MIGRATION_SETS",
    "Case",
    "IdempotencyRecord",
    "Step",
    "Store",
    "register_migrations",
]
