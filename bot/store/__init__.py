"""SQLite step store: cases, the append-only hash-chained step log, idempotency records."""

from __future__ import annotations

from bot.store._rows import Case, IdempotencyRecord, Json, Step
from bot.store._store import Store
from bot.store.schema import GENESIS_HASH

__all__ = [
    "GENESIS_HASH",
    "Case",
    "IdempotencyRecord",
    "Json",
    "Step",
    "Store",
]
