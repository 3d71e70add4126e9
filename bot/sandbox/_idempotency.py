"""Exactly once, as seen from outside: the Idempotency-Key table and the log of committed effects.

The IETF Idempotency-Key draft: the same key with the same request gets the same answer and no second
effect; the same key with another request is refused. The effect log is what lets a test prove it (one
``decision`` effect however many times the request was sent); ``GET /_sandbox/idempotency`` and
``GET /_sandbox/effects`` show both.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clock import isoformat
from bot.sandbox._wire import ApiError, Session


@dataclass
class IdempotencyRecord:
    key: str
    method: str
    path: str
    body: str  # canonical JSON of the request body
    status: int
    response: dict[str, Any]
    session_id: str
    at: datetime


class IdempotencyTable:
    """The stored answers by key; only successful answers are stored (the caller's rule)."""

    def __init__(self) -> None:
        self.records: dict[str, IdempotencyRecord] = {}

    def replay(self, key: str, method: str, path: str, body: str) -> IdempotencyRecord | None:
        """The stored answer for this key, or None; the key reused for another request is a 422."""
        record = self.records.get(key)
        if record is None:
            return None
        if (record.method, record.path, record.body) != (method, path, body):
            raise ApiError(
                422,
                "IDEMPOTENCY_KEY_REUSED",
                "This Idempotency-Key was already used with a different request; use a new key for a new request.",
            )
        return record

    def remember(self, record: IdempotencyRecord) -> None:
        self.records[record.key] = record

    def forget_session(self, session_id: str) -> None:
        for key in [k for k, r in self.records.items() if r.session_id == session_id]:
            del self.records[key]

    def clear(self) -> None:
        self.records.clear()

    def to_json(self, session_id: str | None) -> dict[str, Any]:
        return {
            "records": [
                {
                    "key": r.key,
                    "method": r.method,
                    "path": r.path,
                    "body": json.loads(r.body),
                    "status": r.status,
                    "response": r.response,
                    "session_id": r.session_id,
                    "at": isoformat(r.at),
                }
                for r in self.records.values()
                if session_id is None or r.session_id == session_id
            ]
        }


class EffectLog:
    """Every committed decision and resume, in order, with the key it came under."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._seq = itertools.count(1)

    def add(self, session: Session, kind: str, receipt_id: str, key: str, at: datetime, **detail: Any) -> None:
        self.entries.append(
            {
                "seq": next(self._seq),
                "session_id": session.id,
                "kind": kind,
                "receipt_id": receipt_id,
                "idempotency_key": key,
                "at": isoformat(at),
                "revision": session.revision,
                **detail,
            }
        )

    def forget_session(self, session_id: str) -> None:
        self.entries[:] = [e for e in self.entries if e["session_id"] != session_id]

    def clear(self) -> None:
        self.entries.clear()

    def to_json(self, session_id: str | None) -> dict[str, Any]:
        effects = [e for e in self.entries if session_id is None or e["session_id"] == session_id]
        counts: dict[str, int] = {}
        for effect in self.entries:
            counts[effect["session_id"]] = counts.get(effect["session_id"], 0) + 1
        return {"effects": effects, "counts": counts}
