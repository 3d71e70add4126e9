"""The dry-run and real-pass records, and the R1.2 gate a real pass must clear.

Why it looks like this:
- A dry run and a real pass are rows written before the exec starts, so a crash mid-pass leaves a
  trace; every outcome is also a step in the hash-chained step log, in the same transaction.
- A real pass needs a successful dry run of the same installation, recent enough and not used yet;
  marking it reviewed and claiming it is one ``BEGIN IMMEDIATE`` transaction (plus a unique index), so
  a double click cannot run two passes on one review (R1.2).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from bot.clock import Clock, isoformat, parse_time
from bot.dockerops._config import ReconcilerConfig
from bot.dockerops._exec import ExecResult
from bot.dockerops._schema import migrations
from bot.errors import DockerOpsError
from bot.format import rough_age
from bot.ids import DRYRUN_ID
from bot.redact import redact
from bot.store import Store
from bot.vocab import Step


class ReconcileRefused(DockerOpsError):
    """A real pass refused before anything ran: no usable reviewed dry run (R1.2)."""


def checked_dryrun_id(text: object) -> str:
    """The dry-run id as typed, stripped, or a refusal saying what one looks like."""
    dryrun_id = text.strip() if isinstance(text, str) else ""
    if not DRYRUN_ID.match(dryrun_id):
        raise ReconcileRefused(
            f"{redact(dryrun_id[:80])!r} is not a dry-run id (they look like dry_3f9a1c2b7e10).",
            hint="Run /recover dryrun, review its output, then use the id it shows.",
        )
    return dryrun_id


class ReconcilerRecords:
    """The ``dryruns`` and ``passes`` tables of one store, and the R1.2 gate over them."""

    def __init__(self, store: Store, config: ReconcilerConfig, clock: Clock) -> None:
        store.require(migrations)
        self.store = store
        self.config = config
        self.clock = clock

    def _now(self) -> str:
        text = isoformat(self.clock.now())
        assert text is not None
        return text

    def start_dryrun(self, dry_id: str, project: str, container: str, env: dict[str, str], actor: str) -> None:
        """The ``running`` row, written before the exec starts (R1.1)."""
        with self.store.write() as db:
            db.table("dryruns").insert(
                {
                    "id": dry_id,
                    "installation": project,
                    "container": container,
                    "argv": json.dumps(list(self.config.argv)),
                    "environment": json.dumps(env),
                    "actor": actor,
                    "started_at": self._now(),
                }
            )

    def check(self, db: Database, dryrun_id: str, project: str) -> dict[str, Any]:
        """The R1.2 gate: the dry run exists, is this installation's, succeeded, is recent and unused."""
        cfg = self.config
        try:
            row = db.table("dryruns").get(dryrun_id)
        except NotFoundError:
            raise ReconcileRefused(
                f"No dry run {dryrun_id} in the bot's records.",
                hint="Run /recover dryrun first and review its output (R1.2).",
            ) from None
        if row["installation"] != project:
            raise ReconcileRefused(
                f"Dry run {dryrun_id} was run on installation {row['installation']!r}, not on {project!r}.",
                hint="Run /recover dryrun on this installation and review it first (R1.2).",
            )
        outcome = row["outcome"]
        if outcome != "succeeded":
            why = {
                "failed": f"failed (exit {row['exit_code']})",
                "unknown": "has an unknown outcome (it timed out or its container went away)",
                "running": "has not finished",
            }.get(outcome, outcome)
            raise ReconcileRefused(
                f"Dry run {dryrun_id} {why}: a real pass needs a successful dry run (R1.2).",
                hint="Fix the cause, run /recover dryrun again and review the new one.",
            )
        finished = parse_time(row["finished_at"])
        now = self.clock.now()
        window = timedelta(seconds=cfg.review_window_seconds)
        if finished is None or now - finished > window:
            age = rough_age((now - finished).total_seconds()) if finished else "an unknown time"
            raise ReconcileRefused(
                f"Dry run {dryrun_id} finished {age} ago; a real pass needs one from the last "
                f"{rough_age(cfg.review_window_seconds)} (R1.2).",
                hint="The database may have changed since: run /recover dryrun again and review it.",
            )
        used = list(
            db.table("passes").rows_where(
                "dryrun_id = ? AND outcome != 'not_started'", [dryrun_id], select="id, actor, started_at"
            )
        )
        if used:
            raise ReconcileRefused(
                f"Dry run {dryrun_id} was already used by real pass {used[0]['id']} "
                f"({used[0]['actor']}, {used[0]['started_at']}).",
                hint="The database has changed since: run /recover dryrun again and review it.",
            )
        return dict(row)

    def precheck(self, dryrun_id: str, project: str) -> None:
        """The gate on a read connection: refuse early, before touching Docker (R1.2)."""
        with self.store.read() as db:
            self.check(db, dryrun_id, project)

    def claim_pass(
        self, pass_id: str, dryrun_id: str, project: str, container: str, env: dict[str, str], actor: str
    ) -> None:
        """Check the gate again, mark the dry run reviewed and write the pass row, in one transaction."""
        with self.store.write() as db:
            self.check(db, dryrun_id, project)
            now = self._now()
            db.table("dryruns").update(dryrun_id, {"reviewed_by": actor, "reviewed_at": now})
            db.table("passes").insert(
                {
                    "id": pass_id,
                    "dryrun_id": dryrun_id,
                    "installation": project,
                    "container": container,
                    "argv": json.dumps(list(self.config.argv)),
                    "environment": json.dumps(env),
                    "actor": actor,
                    "reviewed_by": actor,
                    "started_at": now,
                }
            )
            self.store.record_step(
                None,
                actor,
                Step.RECONCILER_REVIEWED,
                {"dryrun_id": dryrun_id, "installation": project, "pass_id": pass_id},
                "reviewed",
                detail={"reviewed_by": actor, "container": container},
                db=db,
            )

    def finish(
        self,
        table: str,
        row_id: str,
        outcome: str,
        result: ExecResult | None,
        actor: str,
        step: str,
        inputs: dict[str, Any],
        detail: dict[str, Any],
    ) -> None:
        """Complete a row and append its step, in one transaction."""
        output = redact(result.output.decode("utf-8", errors="replace")) if result else None
        with self.store.write() as db:
            db.table(table).update(
                row_id,
                {
                    "finished_at": self._now(),
                    "outcome": outcome,
                    "exit_code": result.exit_code if result else None,
                    "duration_ms": int(result.duration_s * 1000) if result else None,
                    "output": output,
                    "output_bytes": result.output_bytes if result else None,
                    "exec_id": result.exec_id if result else None,
                    "pid": result.pid if result else None,
                    "detail": json.dumps(detail),
                },
            )
            self.store.record_step(None, actor, step, inputs, outcome, detail=detail, db=db)

    def get_dryrun(self, dryrun_id: str) -> dict[str, Any] | None:
        """A recorded dry run (for the router's history views and tests)."""
        with self.store.read() as db:
            rows = list(db.table("dryruns").rows_where("id = ?", [dryrun_id]))
        return rows[0] if rows else None

    def get_pass(self, pass_id: str) -> dict[str, Any] | None:
        with self.store.read() as db:
            rows = list(db.table("passes").rows_where("id = ?", [pass_id]))
        return rows[0] if rows else None

    def passes_for(self, dryrun_id: str) -> list[dict[str, Any]]:
        with self.store.read() as db:
            return list(db.table("passes").rows_where("dryrun_id = ?", [dryrun_id], order_by="started_at"))
