"""What ``RECOVER_DB`` still holds open of the ``default`` installation, for a fleet that no longer serves it.

Why: before an installations file, the one installation (``default``) kept its cases, requests,
batches and unanswered sends in ``RECOVER_DB`` itself (bot/ids.py ``store_path``). A file that names
only other installations gives each its own store beside it, so nothing would serve those rows any
more: a pending approval would never expire or escalate, an unanswered send never be reconciled, and
a bare id typed for them would reach another installation's core. The fleet's composition asks
:func:`default_leftovers` at start and refuses to run, naming the rows, until the operator either
serves ``default`` again (an entry named ``default``) or finishes them with the bot as it was.
Finished history is not open work: it stays in the file for ``audit`` and is never refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from bot.vocab import OPEN_STATES

#: At most this many ids named per kind (the count says the rest).
NAMED = 3

_OPEN = sorted(str(s) for s in OPEN_STATES)
_MARKS = ", ".join("?" for _ in _OPEN)

#: (what a line calls them, table, the id column, the condition of an open row, its arguments)
_KINDS: tuple[tuple[str, str, str, str, Sequence[str]], ...] = (
    ("open request(s)", "decision_requests", "id", f"state IN ({_MARKS})", _OPEN),
    ("open batch(es)", "batches", "id", f"state IN ({_MARKS})", _OPEN),
    ("open case(s) of session(s)", "cases", "session_id", "closed_at IS NULL", ()),
    ("unanswered send(s) of session(s)", "idempotency", "COALESCE(session_id, key)", "state = 'pending'", ()),
)


def _open_rows(conn: sqlite3.Connection) -> list[str]:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    found = []
    for what, table, column, where, args in _KINDS:
        if table not in tables:
            continue
        ids = [str(r[0]) for r in conn.execute(f"SELECT {column} FROM {table} WHERE {where} ORDER BY 1", list(args))]  # noqa: S608
        if ids:
            more = f" and {len(ids) - NAMED} more" if len(ids) > NAMED else ""
            found.append(f"{len(ids)} {what} {', '.join(ids[:NAMED])}{more}")
    return found


def default_leftovers(db_path: Path, served: Sequence[str]) -> str | None:
    """One line naming the default installation's open rows in ``db_path`` when ``served`` (the
    installations file's names) lacks ``default``; None when nothing is open or the file is new."""
    if not db_path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None  # opening it for real says what is wrong with it
    try:
        found = _open_rows(conn)
    finally:
        conn.close()
    if not found:
        return None
    return (
        f"RECOVER_DB {db_path} holds installation `default`'s open work from before the installations file: "
        f"{'; '.join(found)}. The installations file serves {', '.join(served)} only, so nothing would finish "
        "them: add an entry named `default` (its control host) to serve them, or finish them with the bot "
        "started without RECOVER_INSTALLATIONS_FILE first."
    )


__all__ = ["NAMED", "default_leftovers"]
