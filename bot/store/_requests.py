"""The ``idempotency`` table: each POST's key and exact body, committed before its first send.

Row reads and inserts go through sqlite-utils; the two updates that must not race a concurrent
writer (count an attempt, withdraw only a still pending request) are single SQL statements.
"""

from __future__ import annotations

import sqlite3

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from bot.errors import StoreError
from bot.store._rows import IdempotencyRecord, record_of
from bot.store.chain import canonical_json


def get(db: Database, key: str) -> IdempotencyRecord | None:
    try:
        return record_of(db.table("idempotency").get(key))
    except NotFoundError:
        return None


def _existing(db: Database, key: str) -> IdempotencyRecord:
    record = get(db, key)
    if record is None:
        raise StoreError(f"no idempotency record {key}")
    return record


def insert(
    db: Database, key: str, method: str, path: str, body: str, purpose: str, session_id: str | None, now: str
) -> IdempotencyRecord:
    try:
        db.table("idempotency").insert(
            {
                "key": key,
                "method": method.upper(),
                "path": path,
                "body": body,
                "purpose": purpose,
                "session_id": session_id,
                "created_at": now,
            }
        )
    except sqlite3.IntegrityError as exc:
        raise StoreError(f"an idempotency record with this key already exists: {exc}") from exc
    return _existing(db, key)


def note_attempt(db: Database, key: str) -> int:
    """Count one send; returns the attempt number."""
    cur = db.execute("UPDATE idempotency SET attempts = attempts + 1 WHERE key = ?", [key])
    if cur.rowcount == 0:
        raise StoreError(f"no idempotency record {key}")
    return _existing(db, key).attempts


def finish(db: Database, key: str, http_status: int, response: object, now: str) -> IdempotencyRecord:
    _existing(db, key)
    db.table("idempotency").update(
        key,
        {"state": "answered", "http_status": http_status, "response": canonical_json(response), "answered_at": now},
    )
    return _existing(db, key)


def withdraw(db: Database, key: str, actor: str, why: str, now: str) -> bool:
    """Answer a still pending request as withdrawn; False when it already had an answer."""
    cur = db.execute(
        "UPDATE idempotency SET state = 'answered', response = ?, answered_at = ? WHERE key = ? AND state = 'pending'",
        [canonical_json({"withdrawn": {"by": actor, "why": why}}), now, key],
    )
    return cur.rowcount == 1


def listed(db: Database, session_id: str | None = None, *, pending_only: bool = False) -> list[IdempotencyRecord]:
    """Records in the order they were created (pending ones oldest first: replayed at start-up)."""
    if pending_only:
        rows = db.table("idempotency").rows_where("state = 'pending'", order_by="created_at, rowid")
    elif session_id is None:
        rows = db.table("idempotency").rows_where(order_by="rowid")
    else:
        rows = db.table("idempotency").rows_where("session_id = ?", [session_id], order_by="rowid")
    return [record_of(r) for r in rows]
