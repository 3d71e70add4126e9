"""Batches and their members in the step store: the approval state machine and each member's send.

A batch binds its exact members (session, revision, decisive facts) when it is requested; the
content hash over them is written into the hash-chained step log, so a changed row is detected at
approval. Every state change is a compare-and-set inside ``BEGIN IMMEDIATE``: one approval, one
execution, and one send per member, whatever the number of processes.

Batch states: requested → approved → sending → executed; requested → rejected | expired | withdrawn.
Member states: requested → sending → executed | failed (refused, 4xx) | uncertain (no definite
answer); requested → void (facts changed: skipped, never sent).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.clock import isoformat
from bot.ids import DEFAULT_INSTALLATION, IdKind, new_id
from bot.store import Store
from bot.store.chain import canonical_json
from bot.vocab import RequestState

migrations = Migrations("batches")

OPEN_STATES = (RequestState.REQUESTED, RequestState.APPROVED, RequestState.SENDING)
# A value written into one column of a batch or member row (an id, a state, a note, a status, a flag).
Column = str | int | None
CONTENT = (
    "id",
    "requester",
    "channel",
    "decision",
    "reason",
    "cause_fixed",
    "source",
    "policy",
    "created_at",
    "expires_at",
)


@migrations(name="0001_batches")
def _m0001(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE batches (
            id TEXT PRIMARY KEY, requester TEXT NOT NULL, channel TEXT, decision TEXT NOT NULL,
            reason TEXT NOT NULL, cause_fixed TEXT, source TEXT NOT NULL, policy TEXT NOT NULL,
            created_at TEXT NOT NULL, expires_at TEXT NOT NULL, content_hash TEXT NOT NULL,
            excluded TEXT NOT NULL, state TEXT NOT NULL, approved_by TEXT, approved_at TEXT,
            decided_by TEXT, note TEXT, owner TEXT, stop_requested INTEGER NOT NULL DEFAULT 0,
            runner TEXT, updated_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE batch_members (
            batch_id TEXT NOT NULL REFERENCES batches(id), ord INTEGER NOT NULL,
            session_id TEXT NOT NULL, revision INTEGER, facts TEXT NOT NULL, state TEXT NOT NULL,
            idem_key TEXT, method TEXT, path TEXT, body TEXT, http_status INTEGER, code TEXT,
            receipt_id TEXT, detail TEXT, updated_at TEXT NOT NULL,
            PRIMARY KEY (batch_id, session_id)
        )
        """
    )
    db.execute("CREATE INDEX batch_members_state ON batch_members(batch_id, state)")


@migrations(name="0002_batch_verified")
def _m0002(db: Database) -> None:
    # When the members' verification was settled and its one final message said (R5.1): until
    # then the sweep folds the members' verification news into the batch's message.
    db.execute("ALTER TABLE batches ADD COLUMN verified_at TEXT")


@dataclass
class Batch:
    id: str
    requester: str
    channel: str | None
    decision: str
    reason: str
    cause_fixed: str | None
    source: str
    policy: str
    created_at: str
    expires_at: str
    content_hash: str
    excluded: list[dict[str, Any]]
    state: str
    approved_by: str | None
    approved_at: str | None
    decided_by: str | None
    note: str | None
    owner: str | None
    stop_requested: int
    runner: str | None
    updated_at: str
    verified_at: str | None = None


@dataclass
class BatchMember:
    batch_id: str
    ord: int
    session_id: str
    revision: int | None
    facts: dict[str, Any]
    state: str
    idem_key: str | None
    method: str | None
    path: str | None
    body: str | None
    http_status: int | None
    code: str | None
    receipt_id: str | None
    detail: str | None
    updated_at: str


def content_hash(batch: Mapping[str, Any], members: Sequence[Mapping[str, Any]]) -> str:
    """sha256 over what an approver approves: the batch's content and every member as bound."""
    values = {name: batch.get(name) for name in CONTENT}
    values["members"] = [[m["session_id"], m.get("revision"), m.get("facts")] for m in members]
    return hashlib.sha256(canonical_json(values).encode("utf-8")).hexdigest()


def new_batch_id(installation: str = DEFAULT_INSTALLATION) -> str:
    """``bat_…``, with a named installation's name after a dot (bot/ids.py)."""
    return new_id(IdKind.BATCH, installation)


def _q(db: Database, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
    cur = db.conn.cursor()
    cur.row_factory = sqlite3.Row
    return cur.execute(sql, list(params))


def _batch(row: Mapping[str, Any]) -> Batch:
    values = dict(row)
    values["excluded"] = json.loads(values["excluded"])
    return Batch(**values)


def _member(row: Mapping[str, Any]) -> BatchMember:
    values = dict(row)
    values["facts"] = json.loads(values["facts"])
    return BatchMember(**values)


class BatchStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        store.require(migrations)

    def now(self) -> str:
        return isoformat(self.store.clock.now()) or ""

    def insert(self, db: Database, batch: Mapping[str, Any], members: Sequence[Mapping[str, Any]]) -> Batch:
        row = {name: batch.get(name) for name in CONTENT}
        row.update(
            content_hash=content_hash(batch, members),
            excluded=canonical_json(list(batch.get("excluded") or [])),
            state=RequestState.REQUESTED,
            updated_at=self.now(),
        )
        _q(
            db,
            f"INSERT INTO batches ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",  # noqa: S608
            list(row.values()),
        )
        for i, m in enumerate(members):
            _q(
                db,
                "INSERT INTO batch_members (batch_id, ord, session_id, revision, facts, state, updated_at) "
                "VALUES (?, ?, ?, ?, ?, 'requested', ?)",
                [
                    row["id"],
                    i,
                    m["session_id"],
                    m.get("revision"),
                    canonical_json(m.get("facts") or {}),
                    row["updated_at"],
                ],
            )
        got = self.get(str(row["id"]), db=db)
        assert got is not None
        return got

    def get(self, batch_id: str, *, db: Database | None = None) -> Batch | None:
        if db is not None:
            row = _q(db, "SELECT * FROM batches WHERE id = ?", [batch_id]).fetchone()
            return _batch(row) if row else None
        with self.store.read() as rdb:
            return self.get(batch_id, db=rdb)

    def find(self, states: Sequence[str]) -> list[Batch]:
        marks = ", ".join("?" for _ in states)
        with self.store.read() as db:
            rows = _q(db, f"SELECT * FROM batches WHERE state IN ({marks}) ORDER BY created_at", states).fetchall()  # noqa: S608
        return [_batch(r) for r in rows]

    def members(self, batch_id: str, states: Sequence[str] | None = None) -> list[BatchMember]:
        sql = "SELECT * FROM batch_members WHERE batch_id = ?"
        params: list[Any] = [batch_id]
        if states:
            sql += f" AND state IN ({', '.join('?' for _ in states)})"
            params.extend(states)
        with self.store.read() as db:
            rows = _q(db, sql + " ORDER BY ord", params).fetchall()
        return [_member(r) for r in rows]

    def member(self, batch_id: str, session_id: str) -> BatchMember | None:
        with self.store.read() as db:
            row = _q(
                db, "SELECT * FROM batch_members WHERE batch_id = ? AND session_id = ?", [batch_id, session_id]
            ).fetchone()
        return _member(row) if row else None

    def counts(self, batch_id: str) -> dict[str, int]:
        with self.store.read() as db:
            rows = _q(
                db, "SELECT state, count(*) AS n FROM batch_members WHERE batch_id = ? GROUP BY state", [batch_id]
            ).fetchall()
        return {r["state"]: r["n"] for r in rows}

    def codes(self, batch_id: str) -> dict[str, int]:
        with self.store.read() as db:
            rows = _q(
                db,
                "SELECT code, count(*) AS n FROM batch_members WHERE batch_id = ? AND state = 'failed' GROUP BY code",
                [batch_id],
            ).fetchall()
        return {str(r["code"]): r["n"] for r in rows}

    def transition(self, db: Database, batch_id: str, from_states: Sequence[str], to: str, **values: Column) -> bool:
        """Compare-and-set the batch's state; False when another writer moved it first."""
        sets = ["state = ?", "updated_at = ?"] + [f"{k} = ?" for k in values]
        marks = ", ".join("?" for _ in from_states)
        cur = _q(
            db,
            f"UPDATE batches SET {', '.join(sets)} WHERE id = ? AND state IN ({marks})",  # noqa: S608
            [to, self.now(), *values.values(), batch_id, *from_states],
        )
        return cur.rowcount == 1

    def set(self, batch_id: str, **values: Column) -> None:
        with self.store.write() as db:
            sets = ", ".join(f"{k} = ?" for k in values)
            _q(db, f"UPDATE batches SET {sets} WHERE id = ?", [*values.values(), batch_id])  # noqa: S608

    def member_transition(
        self, db: Database, batch_id: str, session_id: str, from_states: Sequence[str], to: str, **values: Column
    ) -> bool:
        sets = ["state = ?", "updated_at = ?"] + [f"{k} = ?" for k in values]
        marks = ", ".join("?" for _ in from_states)
        cur = _q(
            db,
            f"UPDATE batch_members SET {', '.join(sets)} WHERE batch_id = ? AND session_id = ? "  # noqa: S608
            f"AND state IN ({marks})",
            [to, self.now(), *values.values(), batch_id, session_id, *from_states],
        )
        return cur.rowcount == 1

    def member_set(self, db: Database, batch_id: str, session_id: str, **values: Column) -> None:
        sets = ", ".join(f"{k} = ?" for k in values)
        _q(
            db,
            f"UPDATE batch_members SET {sets} WHERE batch_id = ? AND session_id = ?",  # noqa: S608
            [*values.values(), batch_id, session_id],
        )
