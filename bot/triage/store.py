"""Triages and their groups in the step store, so ``batch decide t7.g1`` acts on exactly what was shown.

A triage gets a short number per store (``t7``) and its groups ``t7.g1``, ``t7.g2`` …: two people's
triages never collide. A group keeps its members as they were read (session, revision, decisive
facts, branch, valid decisions): a batch binds those, and a member whose facts have moved since is
skipped at send time, never sent.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.clock import isoformat
from bot.ids import triage_id, triage_number
from bot.store import Store
from bot.store.chain import canonical_json

migrations = Migrations("triage")


@migrations(name="0001_triages")
def _m0001(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE triages (
            num INTEGER PRIMARY KEY AUTOINCREMENT,
            actor TEXT NOT NULL,
            created_at TEXT NOT NULL,
            state TEXT NOT NULL,
            summary TEXT
        )
        """
    )
    db.execute(
        """
        CREATE TABLE triage_groups (
            id TEXT PRIMARY KEY,
            triage_num INTEGER NOT NULL REFERENCES triages(num),
            ord INTEGER NOT NULL,
            data TEXT NOT NULL
        )
        """
    )


@dataclass
class Member:
    """One session as the triage read it: what a batch binds."""

    session_id: str
    revision: int | None
    branch: str
    facts: dict[str, Any]
    valid: list[str]
    verdicts: dict[str, str] = field(default_factory=dict)  # decision → why not (invalid ones only)
    failed_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "revision": self.revision,
            "branch": self.branch,
            "facts": self.facts,
            "valid": self.valid,
            "verdicts": self.verdicts,
            "failed_at": self.failed_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Member:
        """A member as :meth:`to_json` stored it (our own JSON: every field present)."""
        return cls(
            session_id=data.get("session_id", ""),
            revision=data.get("revision"),
            branch=data.get("branch", ""),
            facts=data.get("facts") or {},
            valid=data.get("valid") or [],
            verdicts=data.get("verdicts") or {},
            failed_at=data.get("failed_at"),
        )


@dataclass
class StoredGroup:
    id: str
    triage: str
    data: dict[str, Any]

    @property
    def members(self) -> list[Member]:
        return [Member.from_json(m) for m in self.data.get("members", [])]


def _q(db: Database, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
    cur = db.conn.cursor()
    cur.row_factory = sqlite3.Row
    return cur.execute(sql, list(params))


class TriageStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        store.require(migrations)

    def new(self, actor: str) -> str:
        """A new triage's id, ``t<n>`` (a named installation's ``t<n>.eu-1``, bot/ids.py)."""
        with self.store.write() as db:
            cur = _q(
                db,
                "INSERT INTO triages (actor, created_at, state) VALUES (?, ?, 'running')",
                [actor, isoformat(self.store.clock.now())],
            )
            return triage_id(int(cur.lastrowid or 0), self.store.installation)

    def save_groups(self, triage: str, groups: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        """Replace the triage's groups (the summary grows as sessions are read) and its summary."""
        num = triage_number(triage)
        with self.store.write() as db:
            _q(db, "DELETE FROM triage_groups WHERE triage_num = ?", [num])
            for i, group in enumerate(groups):
                _q(
                    db,
                    "INSERT INTO triage_groups (id, triage_num, ord, data) VALUES (?, ?, ?, ?)",
                    [group["id"], num, i, canonical_json(group)],
                )
            _q(
                db,
                "UPDATE triages SET state = ?, summary = ? WHERE num = ?",
                [summary.get("state", "running"), canonical_json(summary), num],
            )

    def group(self, group_id: str) -> StoredGroup | None:
        with self.store.read() as db:
            row = _q(db, "SELECT * FROM triage_groups WHERE id = ?", [group_id]).fetchone()
        if row is None:
            return None
        return StoredGroup(row["id"], triage_id(row["triage_num"], self.store.installation), json.loads(row["data"]))
