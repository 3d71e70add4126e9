"""The step log: append one hash-chained link, read the log and its head.

The log is append-only (triggers refuse UPDATE and DELETE); each step's hash covers the previous
one's (bot/store/chain.py), so appending reads the head and writes the next link under the store's
write lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from bot.store._rows import Step, step_of
from bot.store.chain import KEYED_VERSION, PLAIN_VERSION, canonical_json, step_hash
from bot.store.schema import GENESIS_HASH


def last_link(db: Database) -> tuple[int, str]:
    """``(seq, hash)`` of the last step; ``(0, GENESIS_HASH)`` for an empty log."""
    row = next(db.table("steps").rows_where(select="seq, hash", order_by="seq DESC", limit=1), None)
    return (int(row["seq"]), str(row["hash"])) if row is not None else (0, GENESIS_HASH)


def append(
    db: Database,
    *,
    session_id: str | None,
    case_id: int | None,
    actor: str,
    step: str,
    inputs: Mapping[str, Any] | None,
    outcome: str,
    detail: Mapping[str, Any] | None,
    http_status: int | None,
    idempotency_key: str | None,
    receipt_id: str | None,
    at: str,
    key: bytes | None,
    installation: str | None = None,
) -> Step:
    """Write the next link (keyed, chain version 2, when ``key`` is given) of ``installation``."""
    seq, prev_hash = last_link(db)
    row: dict[str, Any] = {
        "seq": seq + 1,
        "case_id": case_id,
        "session_id": session_id,
        "actor": actor,
        "at": at,
        "step": step,
        "inputs": canonical_json(dict(inputs or {})),
        "outcome": outcome,
        "detail": canonical_json(dict(detail)) if detail is not None else None,
        "http_status": http_status,
        "idempotency_key": idempotency_key,
        "receipt_id": receipt_id,
        "prev_hash": prev_hash,
        "v": KEYED_VERSION if key else PLAIN_VERSION,
        "installation": installation,
    }
    row["hash"] = step_hash(row, prev_hash, key)
    db.table("steps").insert(row)
    return step_of(row)


def listed(db: Database, session_id: str | None = None, case_id: int | None = None) -> list[Step]:
    """Steps in log order, optionally of one session or one case."""
    clauses: list[str] = []
    params: list[str | int] = []
    if session_id is not None:
        clauses.append("session_id = ?")
        params.append(session_id)
    if case_id is not None:
        clauses.append("case_id = ?")
        params.append(case_id)
    rows = db.table("steps").rows_where(" AND ".join(clauses) or None, params, order_by="seq")
    return [step_of(r) for r in rows]


def named(db: Database, names: Sequence[str], after_seq: int = 0, since: str | None = None) -> list[Step]:
    """Steps of the given names, in log order (across every session), after ``after_seq`` and, with
    ``since``, at or after that time (the index ``steps_by_name`` is on (step, seq))."""
    marks = ", ".join("?" * len(names))
    where, args = f"step IN ({marks}) AND seq > ?", [*names, after_seq]
    if since is not None:
        where, args = where + " AND at >= ?", [*args, since]
    return [step_of(r) for r in db.table("steps").rows_where(where, args, order_by="seq")]


def at_seq(db: Database, seq: int) -> Step | None:
    try:
        return step_of(db.table("steps").get(seq))
    except NotFoundError:
        return None


def last_keyed(db: Database) -> dict[str, Any] | None:
    """The newest keyed step's row (the store checks its key against it)."""
    return next(db.table("steps").rows_where("v = ?", [KEYED_VERSION], order_by="seq DESC", limit=1), None)


def first_keyed_seq(db: Database) -> int | None:
    """The first keyed step (chain version 2): steps after it must all be keyed."""
    row = next(db.table("steps").rows_where("v = ?", [KEYED_VERSION], select="MIN(seq) AS seq"), None)
    return int(row["seq"]) if row is not None and row["seq"] is not None else None
