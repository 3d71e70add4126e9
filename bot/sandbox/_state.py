"""The sandbox control host's state: one lock over the sessions, and the jobs composed around them.

It follows the runbook (R2, R3, R4) and docs/control-host-api.md's acceptance table directly, written
independently of the bot's diagnosis and decision code so that a misreading of the runbook cannot hide
in both. Every method is called with :attr:`SandboxState.lock` held by the caller (the HTTP layer);
one lock keeps the state consistent under the threaded server.

:class:`SandboxState` owns the lock, the sessions and the scenarios, and is the one interface the HTTP
layer, the schedule and the handle use; each job lives in its own module and is called from here:
``_wire`` (the sessions as the API shows them), ``_build`` (sessions from scenario blocks),
``_lifecycle`` (workers and the scheduler), ``_drive`` and ``_turns`` (what the admin makes happen),
``_acceptance`` and ``_decisions`` (which decision is taken, and what it does), ``_idempotency`` (the
key table and the effect log), ``_incident_run`` (the mass incident) and ``_reads`` (the reads).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bot.clock import Clock
from bot.sandbox import _drive
from bot.sandbox._build import build_session, new_session_blocks
from bot.sandbox._decisions import Decisions
from bot.sandbox._idempotency import EffectLog, IdempotencyRecord, IdempotencyTable
from bot.sandbox._incident import Incident
from bot.sandbox._incident_run import IncidentRun
from bot.sandbox._lifecycle import KEEP_ATTENTION, STOPPED_TTL_SECONDS, Workers
from bot.sandbox._reads import debug_json, event_page, session_page, turn_json, turn_page
from bot.sandbox._scenarios import ID_PATTERN, Scenario
from bot.sandbox._schedule import StopSchedule
from bot.sandbox._turns import Turns
from bot.sandbox._wire import AdminError, ApiError, Session, Turn


class SandboxState:
    """All sandbox state behind one lock. Methods assume the caller holds :attr:`lock`."""

    def __init__(
        self,
        clock: Clock,
        *,
        stopped_ttl: float = STOPPED_TTL_SECONDS,
        ready_behaviour: str = KEEP_ATTENTION,
        ready_names_checkpoint: bool = True,
    ) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.scenarios: dict[str, Scenario] = {}
        self.loaded: list[str] = []  # scenario ids loaded at start (reset reloads these)
        self.effects = EffectLog()
        self.idempotency = IdempotencyTable()
        self.schedule = StopSchedule()  # sessions that stop on a schedule (POST /_sandbox/schedule)
        self.incidents = IncidentRun()
        self.workers = Workers(
            clock,
            self.sessions,
            stopped_ttl=stopped_ttl,
            ready_behaviour=ready_behaviour,
            ready_names_checkpoint=ready_names_checkpoint,
            on_launch=self.incidents.launched,
        )
        self.turns = Turns(self.workers)
        self.decisions = Decisions(self.workers, self.effects)
        self._ids: list[str] | None = None  # sorted session ids (cache for the paginated list)

    @property
    def incident(self) -> Incident | None:
        return self.incidents.incident

    def now(self) -> datetime:
        return self.clock.now()

    # ------------------------------------------------------------------ the sessions

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id) if ID_PATTERN.match(session_id) else None
        if session is None:
            raise ApiError(404, "NOT_FOUND", f"No session {session_id!r}.")
        return session

    def _put(self, session: Session) -> None:
        if session.id not in self.sessions:
            self._ids = None
        self.sessions[session.id] = session

    def _drop(self, session_id: str) -> None:
        del self.sessions[session_id]
        self._ids = None
        self._forget_session(session_id)

    def _forget_session(self, session_id: str) -> None:
        self.effects.forget_session(session_id)
        self.idempotency.forget_session(session_id)

    def sorted_ids(self) -> list[str]:
        if self._ids is None:
            self._ids = sorted(self.sessions)
        return self._ids

    # ------------------------------------------------------------------ loading

    def add_scenarios(self, scenarios: list[Scenario], *, load: bool = True) -> None:
        for scenario in scenarios:
            self.scenarios[scenario.id] = scenario
            if load:
                self.load_scenario(scenario.id)
                if scenario.id not in self.loaded:
                    self.loaded.append(scenario.id)

    def load_scenario(self, scenario_id: str) -> Session:
        """(Re)load one scenario's session from its file contents, replacing any current state."""
        scenario = self.scenarios.get(scenario_id)
        if scenario is None:
            raise AdminError(404, "NOT_FOUND", f"no scenario {scenario_id!r}; known: {sorted(self.scenarios)}")
        session = build_session(
            scenario.session,
            scenario.turns,
            scenario.events,
            scenario.worker_logs,
            self.now(),
            scenario_id=scenario.id,
        )
        self._put(session)
        self._forget_session(session.id)
        return session

    def reset(self) -> None:
        """Back to the start: scenarios reloaded, effects, idempotency records and extra sessions dropped."""
        self.sessions.clear()
        self._ids = None
        self.incidents.clear()
        self.effects.clear()
        self.idempotency.clear()
        self.workers.scheduler_log.clear()
        self.schedule.clear()
        for scenario_id in self.loaded:
            self.load_scenario(scenario_id)

    def create_session(self, spec: Mapping[str, Any]) -> Session:
        session_spec, turns, events, logs = new_session_blocks(spec)
        if session_spec["id"] in self.sessions:
            raise AdminError(409, "EXISTS", f"session {session_spec['id']!r} already exists")
        session = build_session(session_spec, turns, events, logs, self.now())
        self._put(session)
        return session

    def create_incident(
        self,
        count: int,
        *,
        outage_seconds: float = 600.0,
        seed: int = 1,
        prefix: str = "ses_inc",
        started_seconds: float = 900.0,
        causes: tuple[str, ...] = (),
    ) -> Incident:
        """A mass incident: ``count`` stuck sessions with mixed causes (see ``_incident``; ``causes``
        narrows the mix); the outage ends ``outage_seconds`` from now. A previous incident's sessions
        are replaced."""
        mix = self.incidents.causes(
            count, outage_seconds=outage_seconds, seed=seed, prefix=prefix, started_seconds=started_seconds, only=causes
        )
        if self.incidents.incident is not None:
            for sid in [k for k, v in self.sessions.items() if v.incident_cause is not None]:
                self._drop(sid)
            self.incidents.forget_workers()
        taken = [sid for sid in self.sessions if sid.startswith(prefix + "_")]
        if taken:
            raise AdminError(409, "EXISTS", f"sessions with the prefix {prefix!r} exist already: {taken[0]}")
        now = self.now()
        started = self.incidents.start(
            mix, now, outage_seconds=outage_seconds, seed=seed, prefix=prefix, started_seconds=started_seconds
        )
        for session in started:
            self._put(session)
        assert self.incidents.incident is not None
        return self.incidents.incident

    def end_incident_outage(self) -> Incident:
        """The incident's outage ends now: its workers come up from here (``_incident.worker_plan``)."""
        return self.incidents.end_outage(self.now())

    # ------------------------------------------------------------------ time

    def tick(self) -> None:
        """Worker-side time effects: the planned fate of incident workers, scheduled stops, the
        stopped-TTL and a store outage that outlasts the startup budget (R2.7)."""
        now = self.now()
        self.incidents.tick(self.sessions, now, self.workers)
        self.schedule.fire(self, now)
        self.workers.tick(now)

    def scheduler_pass(self) -> dict[str, Any]:
        return self.workers.scheduler_pass()

    # ------------------------------------------------------------------ admin: drive the machine

    def fail_restore(self, session_id: str, reason: str) -> Session:
        session = self.get(session_id)
        _drive.fail_restore(self.workers, session, reason)
        return session

    def fail_startup(self, session_id: str, reason: str, error: str | None = None) -> Session:
        session = self.get(session_id)
        _drive.fail_startup(self.workers, session, reason, error)
        return session

    def worker_ready(self, session_id: str) -> Session:
        session = self.get(session_id)
        _drive.worker_ready(self.workers, session)
        return session

    def store_outage(self, session_id: str, on: bool) -> Session:
        session = self.get(session_id)
        _drive.store_outage(self.workers, session, on)
        return session

    def worker_stop(self, session_id: str, kind: str, *, old_api: bool = False) -> Session:
        _drive.check_stop_kind(kind)  # a bad kind is a 400 before an unknown session is a 404
        session = self.get(session_id)
        _drive.worker_stop(self.workers, session, kind, old_api=old_api)
        return session

    def stray_workers(self, session_id: str, count: int) -> Session:
        session = self.get(session_id)
        _drive.stray_workers(session, count)
        return session

    def stop(self, session_id: str, code: str, reason: str | None, failures: int | None) -> Session:
        session = self.get(session_id)
        _drive.stop(self.workers, session, code, reason, failures)
        return session

    def settle(self, session_id: str) -> Session:
        session = self.get(session_id)
        _drive.settle(self.workers, session)
        return session

    def reclamation(self, session_id: str, held: bool) -> Session:
        session = self.get(session_id)
        session.reclamation_claim = held
        return session

    def start_turn(self, session_id: str, turn_id: str | None = None) -> Turn:
        return self.turns.start(self.get(session_id), turn_id)

    def interrupt(
        self,
        session_id: str,
        terminal_reason: str | None,
        checkpoint_committed: bool,
        turn_id: str | None = None,
    ) -> Turn:
        return self.turns.interrupt(self.get(session_id), terminal_reason, checkpoint_committed, turn_id)

    # ------------------------------------------------------------------ public API

    def list_sessions(
        self, admission_state: str | None, status: str | None, cursor: str | None, limit: int
    ) -> dict[str, Any]:
        return session_page(self.sessions, self.sorted_ids(), admission_state, status, cursor, limit)

    def list_turns(self, session_id: str, status: str | None, cursor: str | None, limit: int) -> dict[str, Any]:
        return turn_page(self.get(session_id), status, cursor, limit)

    def get_turn(self, session_id: str, turn_id: str) -> dict[str, Any]:
        return turn_json(self.get(session_id), turn_id)

    def list_events(self, session_id: str, after: int, limit: int) -> dict[str, Any]:
        return event_page(self.get(session_id), after, limit)

    def debug_session(self, session_id: str) -> dict[str, Any]:
        return debug_json(self.get(session_id))

    def replay(self, key: str, method: str, path: str, body: str) -> IdempotencyRecord | None:
        return self.idempotency.replay(key, method, path, body)

    def remember(
        self,
        key: str,
        method: str,
        path: str,
        body: str,
        status: int,
        response: dict[str, Any],
        session_id: str,
    ) -> None:
        self.idempotency.remember(IdempotencyRecord(key, method, path, body, status, response, session_id, self.now()))

    def decide(self, session_id: str, body: Any, key: str) -> dict[str, Any]:
        return self.decisions.decide(self.get(session_id), body, key)

    def resume(self, session_id: str, body: Any, key: str) -> dict[str, Any]:
        return self.decisions.resume(self.get(session_id), body, key)
