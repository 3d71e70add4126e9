"""The store's own schema, as a named sqlite-utils migration set.

Every area owns its tables in its own :class:`Migrations` set (``decisions``, ``dockerops``,
``triage``, ``batches``, ``slack``). Nothing registers itself: whoever composes the app passes the
sets to :class:`bot.store.Store` (``migrations=``), which applies this core set first, then those.
Set names are what the file records as applied, so they never change.

Migrations run inside the store's ``BEGIN IMMEDIATE`` lock (sqlite-utils nests its own ``atomic()``
as a savepoint), so two processes opening a fresh file at once cannot both create a table. Keep
migrations transactional: a ``transactional=False`` migration (e.g. ``VACUUM``) cannot run here.
"""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

core = Migrations("core")

# The chain starts from this value: the first step's prev_hash.
GENESIS_HASH = "0" * 64


@core(name="0001_cases_steps_idempotency")
def _m0001(db: Database) -> None:
    """Cases, the append-only step log and idempotency records."""
    statements = [
        """
        CREATE TABLE cases (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            opened_at TEXT NOT NULL,
            opened_by TEXT NOT NULL,
            owner TEXT,
            channel TEXT,
            thread_ts TEXT,
            closed_at TEXT,
            closed_by TEXT,
            close_reason TEXT
        )
        """,
        # At most one open case per session, even with two bot processes on one file.
        "CREATE UNIQUE INDEX cases_one_open_per_session ON cases(session_id) WHERE closed_at IS NULL",
        """
        CREATE TABLE steps (
            seq INTEGER PRIMARY KEY,
            case_id INTEGER REFERENCES cases(id),
            session_id TEXT,
            actor TEXT NOT NULL,
            at TEXT NOT NULL,
            step TEXT NOT NULL,
            inputs TEXT NOT NULL,
            outcome TEXT NOT NULL,
            detail TEXT,
            http_status INTEGER,
            idempotency_key TEXT,
            receipt_id TEXT,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL UNIQUE
        )
        """,
        "CREATE INDEX steps_by_session ON steps(session_id, seq)",
        "CREATE INDEX steps_by_case ON steps(case_id, seq)",
        # Append-only, enforced by the database itself, not by the bot's good manners.
        """
        CREATE TRIGGER steps_no_update BEFORE UPDATE ON steps
        BEGIN SELECT RAISE(ABORT, 'steps are append-only: UPDATE is not allowed'); END
        """,
        """
        CREATE TRIGGER steps_no_delete BEFORE DELETE ON steps
        BEGIN SELECT RAISE(ABORT, 'steps are append-only: DELETE is not allowed'); END
        """,
        """
        CREATE TABLE idempotency (
            key TEXT PRIMARY KEY,
            method TEXT NOT NULL,
            path TEXT NOT NULL,
            body TEXT NOT NULL,
            purpose TEXT NOT NULL,
            session_id TEXT,
            created_at TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'answered')),
            http_status INTEGER,
            response TEXT,
            answered_at TEXT,
            attempts INTEGER NOT NULL DEFAULT 0
        )
        """,
        "CREATE INDEX idempotency_pending ON idempotency(state, created_at)",
    ]
    for sql in statements:
        db.execute(sql)


@core(name="0002_chain_version")
def _m0002(db: Database) -> None:
    """Each step records its chain version (1 plain sha256, 2 HMAC under the audit key).

    Existing steps are version 1 and keep verifying as they are (bot/store/chain.py).
    """
    db.execute("ALTER TABLE steps ADD COLUMN v INTEGER NOT NULL DEFAULT 1")


@core(name="0003_step_installation")
def _m0003(db: Database) -> None:
    """Each step records the installation it belongs to (bot/installations/spec.py).

    Existing steps keep NULL (the default installation's) and verify as they are: the chain hash
    covers the column only when it is set (bot/store/chain.py). The index serves the look-ups of one
    kind of step (the binding, the keyed marker) the gate makes before every send.
    """
    db.execute("ALTER TABLE steps ADD COLUMN installation TEXT")
    db.execute("CREATE INDEX steps_by_name ON steps(step, seq)")


@core(name="0004_leases")
def _m0004(db: Database) -> None:
    """Leases with fencing tokens (bot/store/leases.py): one row per job ever held, never deleted, so
    a job's token only ever goes up."""
    db.execute(
        """CREATE TABLE leases (
            job TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            token INTEGER NOT NULL,
            until TEXT NOT NULL
        )"""
    )


@core(name="0005_lease_posting")
def _m0005(db: Database) -> None:
    """What a lease's holder is posting under its token (bot/store/leases.py ``posting``), written in
    the fenced transaction just before the post. Leases written before keep NULL (nothing recorded)."""
    db.execute("ALTER TABLE leases ADD COLUMN posting TEXT")
