"""The running mass incident: its sessions built, and their new workers failing or coming up on time.

``_incident`` says what an incident looks like and how each cause's next worker behaves; this module
applies that plan to the state as the sandbox clock moves, through the worker lifecycle (``Workers``),
so an incident worker fails and reports ready exactly as any other worker does.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from bot.sandbox._build import build_session
from bot.sandbox._incident import Incident, assign_causes, session_spec, worker_plan
from bot.sandbox._lifecycle import Workers
from bot.sandbox._scenarios import ID_PATTERN
from bot.sandbox._wire import AdminError, Session


class IncidentRun:
    """The current incident (or None) and its sessions whose starting worker has a plan."""

    def __init__(self) -> None:
        self.incident: Incident | None = None
        self._starting: set[str] = set()

    @staticmethod
    def causes(
        count: int, *, outage_seconds: float, seed: int, prefix: str, started_seconds: float, only: tuple[str, ...] = ()
    ) -> list[str]:
        """The causes of ``count`` sessions (``only``: of those causes alone), or the admin's 400 for
        options the sandbox cannot follow."""
        if not ID_PATTERN.match(f"{prefix}_00000") or outage_seconds < 0 or started_seconds < 300:
            raise AdminError(
                400, "BAD_REQUEST", "prefix must make valid ids, outage_seconds >= 0, started_seconds >= 300"
            )
        try:
            return assign_causes(count, seed, only)
        except ValueError as exc:
            raise AdminError(400, "BAD_REQUEST", str(exc)) from None

    def forget_workers(self) -> None:
        self._starting.clear()

    def start(
        self,
        causes: list[str],
        now: datetime,
        *,
        outage_seconds: float,
        seed: int,
        prefix: str,
        started_seconds: float,
    ) -> list[Session]:
        """The incident's sessions (for the caller to add); the outage ends ``outage_seconds`` from now."""
        rng = random.Random(seed)
        counts: dict[str, int] = {}
        sessions: list[Session] = []
        for index, cause in enumerate(causes, start=1):
            spec = session_spec(index, cause, prefix, rng, started_seconds)
            session = build_session(spec["session"], spec["turns"], spec["events"], spec["worker_logs"], now)
            session.incident_cause = cause
            sessions.append(session)
            counts[cause] = counts.get(cause, 0) + 1
        self.incident = Incident(
            started_at=now - timedelta(seconds=started_seconds),
            outage_until=now + timedelta(seconds=outage_seconds),
            prefix=prefix,
            counts=counts,
        )
        return sessions

    def end_outage(self, now: datetime) -> Incident:
        """The outage ends at ``now`` (the store answers again); 404 without an incident."""
        if self.incident is None:
            raise AdminError(404, "NOT_FOUND", "no incident in force")
        self.incident = self.incident.ended(now)
        return self.incident

    def clear(self) -> None:
        self.incident = None
        self._starting.clear()

    def launched(self, session: Session, at: datetime) -> None:
        """A new worker of an incident session: planned; during the outage it first waits for the store."""
        if session.incident_cause is None or self.incident is None:
            return
        self._starting.add(session.id)
        kind, _, _ = worker_plan(session.incident_cause, session.checkpoint is not None, at, self.incident)
        if kind == "ready" and self.incident.active(at):
            session.store_outage = True  # R2.6: the worker retries inside until the store answers

    def tick(self, sessions: dict[str, Session], now: datetime, workers: Workers) -> None:
        """Incident workers: fail, or come up once the outage is over (``_incident.worker_plan``)."""
        incident = self.incident
        if incident is None:
            return
        for sid in sorted(self._starting):
            session = sessions.get(sid)
            execution = session.execution if session else None
            if session is None or execution is None or not execution.alive or execution.phase != "starting":
                self._starting.discard(sid)
                continue
            restoring = session.checkpoint is not None
            kind, at, reason = worker_plan(
                session.incident_cause or "transient", restoring, execution.started_at or now, incident
            )
            if now < at:
                continue
            self._starting.discard(sid)
            if session.store_outage:
                session.store_outage = False
                session.log_json(min(at, incident.outage_until), "worker.checkpoint.store_available")
            if kind == "ready":
                workers.ready(session, at)
                continue
            if reason == "execution_gone":
                session.log_text(at, "Killed")
            else:
                code = "INCOMPATIBLE_CHECKPOINT" if reason == "incompatible_checkpoint" else "CHECKPOINT_UNAVAILABLE"
                session.log_json(
                    at,
                    "worker.checkpoint.restore_refused",
                    level="error",
                    code=code,
                    checkpoint_id=session.checkpoint.id if session.checkpoint else None,
                )
            workers.failed(session, "RESTORE_FAILED" if restoring else "STARTUP_FAILED", reason, at)
