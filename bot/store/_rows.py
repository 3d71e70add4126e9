"""The store's records as typed values, and the one place a table row becomes one.

Kept apart from the SQL so the records can be imported and built (tests, the audit code) without
a database, and so each table's reader is written once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from bot.store.chain import PLAIN_VERSION

# A JSON value as stored in a TEXT column (a control host's answer, a step's inputs).
Json: TypeAlias = dict[str, "Json"] | list["Json"] | str | int | float | bool | None


@dataclass(frozen=True)
class Case:
    """One recovery case: opened by the first step on a session, closed when verification says so."""

    id: int
    session_id: str
    opened_at: str
    opened_by: str
    owner: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    closed_at: str | None = None
    closed_by: str | None = None
    close_reason: str | None = None

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True)
class Step:
    """One entry of the append-only step log."""

    seq: int
    case_id: int | None
    session_id: str | None
    actor: str
    at: str
    step: str
    inputs: dict[str, Any]
    outcome: str
    detail: dict[str, Any] | None
    http_status: int | None
    idempotency_key: str | None
    receipt_id: str | None
    prev_hash: str
    hash: str
    v: int = PLAIN_VERSION
    #: The installation the step belongs to; None (steps from before the column) is the default's.
    installation: str | None = None


@dataclass(frozen=True)
class IdempotencyRecord:
    """A POST to the control host, committed before its first send (the Idempotency-Key rule).

    ``body`` is the exact JSON text sent on every attempt; ``state`` is ``pending`` until a
    definite answer (2xx/4xx) is recorded.
    """

    key: str
    method: str
    path: str
    body: str
    purpose: str
    session_id: str | None
    created_at: str
    state: str = "pending"
    http_status: int | None = None
    response: Json = None
    answered_at: str | None = None
    attempts: int = 0

    @property
    def pending(self) -> bool:
        return self.state == "pending"


def loads(text: str | None) -> Json:
    """A JSON column's value; text that is not JSON comes back as it is."""
    if text is None:
        return None
    try:
        value: Json = json.loads(text)
    except (TypeError, ValueError):
        return text
    return value


def _object(text: str | None) -> dict[str, Any] | None:
    value = loads(text)
    return value if isinstance(value, dict) else None


def case_of(row: Mapping[str, Any]) -> Case:
    return Case(**{k: row[k] for k in Case.__dataclass_fields__})


def step_of(row: Mapping[str, Any]) -> Step:
    values = dict(row)
    values.setdefault("v", PLAIN_VERSION)
    values.setdefault("installation", None)
    values["inputs"] = _object(values["inputs"]) or {}
    values["detail"] = _object(values["detail"])
    return Step(**{k: values[k] for k in Step.__dataclass_fields__})


def record_of(row: Mapping[str, Any]) -> IdempotencyRecord:
    values = {k: row[k] for k in IdempotencyRecord.__dataclass_fields__}
    values["response"] = loads(values["response"])
    return IdempotencyRecord(**values)
