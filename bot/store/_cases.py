"""The ``cases`` table: at most one open case per session, its owner and its thread.

Functions over a caller's connection, so opening a case joins the transaction of the step that
needed it (the store decides where transactions begin and end).
"""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from bot.errors import StoreError
from bot.store._rows import Case, case_of


def get(db: Database, case_id: int) -> Case:
    try:
        return case_of(db.table("cases").get(case_id))
    except NotFoundError:
        raise StoreError(f"no case {case_id} in the step store") from None


def find_open(db: Database, session_id: str) -> Case | None:
    rows = db.table("cases").rows_where("session_id = ? AND closed_at IS NULL", [session_id])
    row = next(rows, None)
    return case_of(row) if row is not None else None


def listed_open(db: Database) -> list[Case]:
    """The open cases, in the order they were opened."""
    return [case_of(r) for r in db.table("cases").rows_where("closed_at IS NULL", order_by="id")]


def open_case(db: Database, session_id: str, actor: str, channel: str | None, now: str) -> Case:
    """The session's open case, or a new one (the unique index keeps it one, across processes)."""
    found = find_open(db, session_id)
    if found is not None:
        return found
    table = db.table("cases").insert(
        {"session_id": session_id, "opened_at": now, "opened_by": actor, "channel": channel}
    )
    assert table.last_rowid is not None  # the id is the rowid (INTEGER PRIMARY KEY)
    return get(db, table.last_rowid)


def close(db: Database, case_id: int, actor: str, reason: str, now: str) -> Case:
    db.table("cases").update(case_id, {"closed_at": now, "closed_by": actor, "close_reason": reason})
    return get(db, case_id)


def update(db: Database, case_id: int, values: dict[str, str | None]) -> Case:
    """Set the owner or the thread of a case."""
    get(db, case_id)  # a missing case is a StoreError, not sqlite-utils' NotFoundError
    db.table("cases").update(case_id, values)
    return get(db, case_id)
