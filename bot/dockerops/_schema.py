"""The dockerops tables: reconciler dry runs and real passes (the "dockerops" migration set, passed to the store by
whoever composes the app).

A row is written *before* the exec starts (outcome ``running``) and completed after it, so a bot that
dies mid-pass leaves a row that says a pass was started and its outcome never learnt.
"""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("dockerops")


@migrations(name="0001_dryruns_passes")
def _m0001(db: Database) -> None:
    statements = [
        """
        CREATE TABLE dryruns (
            id TEXT PRIMARY KEY,
            installation TEXT NOT NULL,
            container TEXT NOT NULL,
            argv TEXT NOT NULL,
            environment TEXT NOT NULL,
            actor TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            outcome TEXT NOT NULL DEFAULT 'running'
                CHECK (outcome IN ('running', 'succeeded', 'failed', 'unknown')),
            exit_code INTEGER,
            duration_ms INTEGER,
            output TEXT,
            output_bytes INTEGER,
            exec_id TEXT,
            pid INTEGER,
            detail TEXT,
            reviewed_by TEXT,
            reviewed_at TEXT
        )
        """,
        "CREATE INDEX dryruns_by_installation ON dryruns(installation, started_at)",
        """
        CREATE TABLE passes (
            id TEXT PRIMARY KEY,
            dryrun_id TEXT NOT NULL REFERENCES dryruns(id),
            installation TEXT NOT NULL,
            container TEXT NOT NULL,
            argv TEXT NOT NULL,
            environment TEXT NOT NULL,
            actor TEXT NOT NULL,
            reviewed_by TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            outcome TEXT NOT NULL DEFAULT 'running'
                CHECK (outcome IN ('running', 'succeeded', 'failed', 'unknown', 'not_started')),
            exit_code INTEGER,
            duration_ms INTEGER,
            output TEXT,
            output_bytes INTEGER,
            exec_id TEXT,
            pid INTEGER,
            detail TEXT
        )
        """,
        # R1.2: one reviewed dry run authorises one real pass (a pass that never started frees it).
        "CREATE UNIQUE INDEX passes_one_per_dryrun ON passes(dryrun_id) WHERE outcome != 'not_started'",
    ]
    for sql in statements:
        db.execute(sql)
