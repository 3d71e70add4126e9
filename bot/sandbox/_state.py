"""The sandbox control host's state machine: sessions, workers, turns, decisions, resume.

It follows the runbook (R2, R3, R4) and docs/control-host-api.md's acceptance table directly, written
independently of the bot's diagnosis and decision code so that a misreading of the runbook cannot hide
in both. Every method is called with :attr:`SandboxState.lock` held by the caller (the HTTP layer);
one lock keeps the state consistent under the threaded server.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bot.clock import Clock, isoformat
from bot.sandbox._incident import Incident, assign_causes, session_spec, worker_plan
from bot.sandbox._scenarios import (
    ID_PATTERN,
    TERMINAL_REASONS,
    Scenario,
    WorkerLogLine,
    render_log_entries,
    resolve_time,
)
from bot.sandbox._schedule import StopSchedule

# R2.1 / R2.12: after the 1st and 2nd failure the scheduler waits 30 s, then 60 s; the 3rd stops.
BACKOFF_SECONDS = (30, 60)
FAILURE_LIMIT = 3
# R2.6: WORKER_STARTUP_TIMEOUT_SEC, fixed at its default in the current deployment.
WORKER_STARTUP_TIMEOUT_SEC = 3600
# R4.1: a stopped session's workspace volume expires after this [assumed: the runbook names a stopped-TTL
# contract, not its length]; what lived only on the volume is gone, a committed checkpoint stays.
STOPPED_TTL_SECONDS = 7 * 24 * 3600
# R2.15: endings that are not failures (drain: SIGTERM, release with stop_kind "drain").
STOP_KINDS = ("drain", "pause", "terminate", "close", "revoked")
DECISIONS = ("retry_restore", "start_fresh", "abandon", "confirm_completed", "close")
_DECISION_FIELDS = {"decision", "expected_revision", "reason", "target_turn_id", "evidence_ref"}
_RESUME_FIELDS = {"reason"}
# How the host treats a restore/startup attention after an accepted retry_restore / start_fresh, and
# whether its workers ever report ready. The seed does not fix the first (R5.1 only says acceptance is
# not recovery), so the bot must be right against each; the default is the seed's reading and today's.
KEEP_ATTENTION = "keep_attention"  # kept (failures 0) until the next worker reports ready (default)
CLEAR_ATTENTION = "clear_attention"  # cleared in the decision's answer: the answer shows no attention
NEVER_READY = "never_ready"  # workers start and never report ready (nor fail)
# A fast host: a worker a decision launches reports ready by the next request, before any re-read of
# the bot's (attention kept until then, as keep_attention); a late re-read must still count it.
READY_AT_ONCE = "ready_at_once"
READY_BEHAVIOURS = (KEEP_ATTENTION, CLEAR_ATTENTION, NEVER_READY, READY_AT_ONCE)


class ApiError(Exception):
    """An error answer of the public API: status, code, message, retryable."""

    def __init__(self, status: int, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "retryable": self.retryable}}


class AdminError(ApiError):
    """An admin request that the state machine cannot honour (e.g. no worker is restoring)."""


@dataclass
class Attention:
    code: str
    reason: str | None = None
    failures: int | None = None
    retry_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "reason": self.reason,
            "failures": self.failures,
            "retry_at": isoformat(self.retry_at),
        }


@dataclass
class Checkpoint:
    id: str
    committed_at: datetime | None
    covers_turn_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "committed_at": isoformat(self.committed_at),
            "covers_turn_id": self.covers_turn_id,
        }


@dataclass
class Execution:
    """The session's current worker. ``state`` is what the API shows; ``alive`` is the truth.

    A worker that ended stays ``running``/``draining`` in the API until a scheduler pass confirms it
    gone (R1.5, R3.9).
    """

    state: str
    alive: bool
    phase: str = "ready"  # starting (restoring / preparing the workspace) | ready
    generation: int = 1
    started_at: datetime | None = None
    confirmed_gone_at: datetime | None = None
    # Other containers of the session that no scheduler pass has removed yet (hidden from the API):
    # while any is left, abandon / confirm_completed still get RECOVERY_REQUIRED, even though the API
    # shows the execution gone; each pass removes one and moves ``confirmed_gone_at`` (R3.9).
    strays: int = 0
    restore: bool = False  # the claim carried a restore plan (a checkpoint at launch): R2.16

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "confirmed_gone_at": isoformat(self.confirmed_gone_at),
            "generation": self.generation,
        }


@dataclass
class Turn:
    id: str
    status: str
    terminal_reason: str | None = None
    control_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "terminal_reason": self.terminal_reason,
            "control_id": self.control_id,
            "started_at": isoformat(self.started_at),
            "ended_at": isoformat(self.ended_at),
        }


@dataclass
class Event:
    seq: int
    type: str
    name: str
    at: datetime
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "name": self.name,
            **self.fields,
            "at": isoformat(self.at),
        }


@dataclass
class Session:
    id: str
    status: str
    admission_state: str
    revision: int
    resumable: bool | None
    queued_inputs: int
    attention: Attention | None
    checkpoint: Checkpoint | None
    execution: Execution | None
    turns: list[Turn] = field(default_factory=list)  # oldest first
    events: list[Event] = field(default_factory=list)
    logs: list[WorkerLogLine] = field(default_factory=list)
    reclamation_claim: bool = False
    store_outage: bool = False
    scenario_id: str | None = None
    incident_cause: str | None = None  # sandbox only: how this incident session's next workers behave
    relaunch: bool = False  # sandbox only: a drained worker's session continues at the next pass (R1.9)
    stopped_at: datetime | None = None  # sandbox only: when it last became stopped (R4.1's TTL runs from it)
    workspace_expired: bool = False  # sandbox only: the stopped-TTL ended; the volume is gone (R4.1)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "admission_state": self.admission_state,
            "revision": self.revision,
            "resumable": self.resumable,
            "attention": self.attention.to_json() if self.attention else None,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "execution": self.execution.to_json() if self.execution else None,
            "queued_inputs": self.queued_inputs,
        }

    def summary(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "status": self.status,
            "admission_state": self.admission_state,
            "resumable": self.resumable,
        }

    def turn(self, turn_id: str) -> Turn | None:
        return next((t for t in self.turns if t.id == turn_id), None)

    def unknown_turn(self) -> Turn | None:
        """The ``outcome_unknown`` turn heading the queue, if any (R3.8: nothing runs past it)."""
        return next((t for t in self.turns if t.status == "outcome_unknown"), None)


@dataclass
class IdempotencyRecord:
    key: str
    method: str
    path: str
    body: str  # canonical JSON of the request body
    status: int
    response: dict[str, Any]
    session_id: str
    at: datetime


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
        if ready_behaviour not in READY_BEHAVIOURS:
            raise ValueError(f"ready_behaviour must be one of {', '.join(READY_BEHAVIOURS)}, not {ready_behaviour!r}")
        self.lock = threading.RLock()
        self.stopped_ttl = float(stopped_ttl)
        self.ready_behaviour = ready_behaviour
        # False: a host whose worker_ready events do not say which checkpoint was restored (R5.2).
        self.ready_names_checkpoint = ready_names_checkpoint
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.scenarios: dict[str, Scenario] = {}
        self.loaded: list[str] = []  # scenario ids loaded at start (reset reloads these)
        self.effects: list[dict[str, Any]] = []
        self.idempotency: dict[str, IdempotencyRecord] = {}
        self.scheduler_log: list[dict[str, Any]] = []
        self.schedule = StopSchedule()  # sessions that stop on a schedule (POST /_sandbox/schedule)
        self.incident: Incident | None = None
        self._incident_workers: set[str] = set()  # incident sessions whose starting worker has a plan
        self._ids: list[str] | None = None  # sorted session ids (cache for the paginated list)
        self._ready_next: set[str] = set()  # ready_at_once: launched by a decision, ready at the next tick
        self._receipts = itertools.count(1)
        self._effect_seq = itertools.count(1)
        self._controls = itertools.count(1)
        self._turns = itertools.count(1)
        self._checkpoints = itertools.count(1)

    # ------------------------------------------------------------------ loading

    def now(self) -> datetime:
        return self.clock.now()

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
        session = self.build_session(
            scenario.session, scenario.turns, scenario.events, scenario.worker_logs, scenario_id=scenario.id
        )
        self._put(session)
        self._forget_session(session.id)
        return session

    def _put(self, session: Session) -> None:
        if session.id not in self.sessions:
            self._ids = None
        self.sessions[session.id] = session

    def sorted_ids(self) -> list[str]:
        if self._ids is None:
            self._ids = sorted(self.sessions)
        return self._ids

    def reset(self) -> None:
        """Back to the start: scenarios reloaded, effects, idempotency records and extra sessions dropped."""
        self.sessions.clear()
        self._ids = None
        self.incident = None
        self._incident_workers.clear()
        self.effects.clear()
        self.idempotency.clear()
        self.scheduler_log.clear()
        self.schedule.clear()
        for scenario_id in self.loaded:
            self.load_scenario(scenario_id)

    def _forget_session(self, session_id: str) -> None:
        self.effects[:] = [e for e in self.effects if e["session_id"] != session_id]
        for key in [k for k, r in self.idempotency.items() if r.session_id == session_id]:
            del self.idempotency[key]

    def build_session(
        self,
        spec: Mapping[str, Any],
        turns: Any = (),
        events: Any = (),
        logs: Any = (),
        *,
        scenario_id: str | None = None,
    ) -> Session:
        """A session from a (validated) scenario ``session:`` block; relative times use the clock now."""
        now = self.now()

        def t(value: object) -> datetime | None:
            return resolve_time(value, now)

        attention = None
        if spec.get("attention"):
            a = spec["attention"]
            attention = Attention(a["code"], a.get("reason"), a.get("failures"), t(a.get("retry_at")))
        checkpoint = None
        if spec.get("checkpoint"):
            c = spec["checkpoint"]
            checkpoint = Checkpoint(str(c["id"]), t(c.get("committed_at", "now")), c.get("covers_turn_id"))
        execution = None
        if spec.get("execution"):
            e = spec["execution"]
            execution = Execution(
                state=e["state"],
                alive=bool(e.get("alive", e["state"] == "running")),
                phase=e.get("phase", "ready"),
                generation=int(e.get("generation", 1)),
                started_at=t(e.get("started_at", "-10m")),
                confirmed_gone_at=t(e.get("confirmed_gone_at", "now" if e["state"] == "gone" else None)),
                strays=int(e.get("stray_workers", 0)),
            )
        session = Session(
            id=spec["id"],
            status=spec.get("status", "running"),
            admission_state=spec.get("admission_state", "open"),
            revision=int(spec.get("revision", 1)),
            resumable=spec.get("resumable"),
            queued_inputs=int(spec.get("queued_inputs", 0)),
            attention=attention,
            checkpoint=checkpoint,
            execution=execution,
            reclamation_claim=bool(spec.get("reclamation_claim", False)),
            store_outage=bool(spec.get("store_outage", False)),
            scenario_id=scenario_id,
        )
        for turn in turns:
            session.turns.append(
                Turn(
                    id=turn["id"],
                    status=turn["status"],
                    terminal_reason=turn.get("terminal_reason"),
                    control_id=turn.get("control_id"),
                    started_at=t(turn.get("started_at")),
                    ended_at=t(turn.get("ended_at")),
                )
            )
        for event in events:
            extra = {k: v for k, v in event.items() if k not in {"seq", "type", "name", "at"}}
            for name in [k for k in extra if k.endswith("_at")]:
                extra[name] = isoformat(t(extra[name]))  # e.g. retry_at: scenario time → ISO
            at = t(event.get("at", "now"))
            assert at is not None
            self._event(session, str(event["name"]), at, type_=str(event.get("type", "system")), **extra)
        session.logs.extend(render_log_entries(logs, now))
        return session

    # ------------------------------------------------------------------ helpers

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id) if ID_PATTERN.match(session_id) else None
        if session is None:
            raise ApiError(404, "NOT_FOUND", f"No session {session_id!r}.")
        return session

    def _event(self, session: Session, name: str, at: datetime, *, type_: str = "system", **fields: Any) -> Event:
        seq = session.events[-1].seq + 1 if session.events else 1
        event = Event(seq=seq, type=type_, name=name, at=at, fields=fields)
        session.events.append(event)
        return event

    def _log_json(self, session: Session, at: datetime, event: str, **fields: Any) -> None:
        payload = {
            "ts": isoformat(at),
            "level": fields.pop("level", "info"),
            "event": event,
            "session_id": session.id,
        }
        payload.update(fields)
        session.logs.append(WorkerLogLine(at=at, text=json.dumps(payload, separators=(",", ":"))))

    def _log_text(self, session: Session, at: datetime, text: str) -> None:
        session.logs.append(WorkerLogLine(at=at, text=text))

    def _launch(self, session: Session, at: datetime, *, reason: str) -> Execution:
        """A new worker generation claims the session (R2.1: only ever after the backoff)."""
        generation = (session.execution.generation + 1) if session.execution else 1
        session.execution = Execution(
            state="running",
            alive=True,
            phase="starting",
            generation=generation,
            started_at=at,
            restore=session.checkpoint is not None,
        )
        session.status = "running"
        self._event(session, "generation_launched", at, generation=generation, cause=reason)
        if self.ready_behaviour == READY_AT_ONCE and reason in ("retry_restore", "start_fresh", "resume"):
            self._ready_next.add(session.id)
        self._log_json(session, at, "worker.claimed", generation=generation, restore=session.checkpoint is not None)
        if session.incident_cause is not None and self.incident is not None:
            self._incident_workers.add(session.id)
            kind, _, _ = worker_plan(session.incident_cause, session.checkpoint is not None, at, self.incident)
            if kind == "ready" and self.incident.active(at):
                session.store_outage = True  # R2.6: the worker retries inside until the store answers
        if session.store_outage:
            self._log_outage_line(session, at, attempt=1)
        return session.execution

    def _log_outage_line(self, session: Session, at: datetime, *, attempt: int) -> None:
        # R2.6: restoring → restore_unavailable; new generation without checkpoint → store_unavailable.
        name = "worker.checkpoint.restore_unavailable" if session.checkpoint else "worker.checkpoint.store_unavailable"
        self._log_json(
            session,
            at,
            name,
            level="warn",
            attempt=attempt,
            error="connect ECONNREFUSED object-store:9000",
            retry_in_ms=min(1000 * 2 ** (attempt - 1), 30000),
        )

    def _worker_failed(self, session: Session, code: str, reason: str, at: datetime) -> None:
        """The current worker ended before reporting ready: one counted failure (R2.1, R2.3, R2.12)."""
        execution = session.execution
        if execution is not None:
            execution.alive = False
            execution.state = "draining"  # ended; the scheduler has not confirmed it gone yet (R1.5)
            execution.phase = "starting"
        previous = session.attention
        counted = previous.failures if previous and previous.code in {"RESTORE_FAILED", "STARTUP_FAILED"} else 0
        incompatible = code == "RESTORE_FAILED" and reason == "incompatible_checkpoint"
        # R2.3: an incompatible checkpoint is deterministic: it stops right after this launch with
        # failures 1 and retry_at null, whatever failures came before it.
        failures = 1 if incompatible else (counted or 0) + 1
        stop = failures >= FAILURE_LIMIT or incompatible
        retry_at = None if stop else at + timedelta(seconds=BACKOFF_SECONDS[min(failures, 2) - 1])
        session.attention = Attention(code=code, reason=reason, failures=failures, retry_at=retry_at)
        if stop:
            session.status = "failed"
            session.admission_state = "recovery_required"
        else:
            session.status = "idle"
            session.admission_state = "open"
        session.resumable = False
        session.revision += 1
        name = "checkpoint_restore_failed" if code == "RESTORE_FAILED" else "startup_failed"
        self._event(session, name, at, reason=reason, failures=failures, retry_at=isoformat(retry_at))
        self._log_json(session, at, "worker.failed", level="error", error=reason, failures=failures)

    def tick(self) -> None:
        """Worker-side time effects: a store outage that outlasts the startup budget (R2.7), and the
        planned fate of incident workers."""
        now = self.now()
        self._tick_incident(now)
        self.schedule.fire(self, now)
        self._tick_ready_at_once(now)
        for session in self.sessions.values():
            self._tick_workspace(session, now)
            execution = session.execution
            if not (session.store_outage and execution and execution.alive and execution.phase == "starting"):
                continue
            started = execution.started_at or now
            deadline = started + timedelta(seconds=WORKER_STARTUP_TIMEOUT_SEC)
            if now < deadline:
                continue
            # R2.7: the worker's exit after the whole budget counts as ONE failure, at the deadline.
            self._log_outage_line(session, deadline - timedelta(seconds=1), attempt=130)
            self._log_text(
                session,
                deadline,
                f"worker.stopping kind=failed session_id={session.id} "
                f'error="startup timeout after {WORKER_STARTUP_TIMEOUT_SEC}s: checkpoint store unavailable"',
            )
            if session.checkpoint:
                self._worker_failed(session, "RESTORE_FAILED", "restore_unavailable", deadline)
            else:
                self._worker_failed(session, "STARTUP_FAILED", "store_unavailable", deadline)

    def _tick_workspace(self, session: Session, now: datetime) -> None:
        """R4.1: the stopped-TTL contract: a stopped session's volume expires; without a committed
        checkpoint nothing is left to resume from (it was not resumable anyway), with one the session
        resumes from the checkpoint."""
        if session.status != "stopped" or session.workspace_expired:
            return
        if session.stopped_at is None:
            session.stopped_at = now  # stopped as loaded: the TTL runs from the load
            return
        if now < session.stopped_at + timedelta(seconds=self.stopped_ttl):
            return
        session.workspace_expired = True
        self._event(
            session,
            "workspace_expired",
            session.stopped_at + timedelta(seconds=self.stopped_ttl),
            checkpoint_id=session.checkpoint.id if session.checkpoint else None,
        )

    # ------------------------------------------------------------------ scheduler

    def scheduler_pass(self) -> dict[str, Any]:
        """One scheduler pass: confirm ended workers gone (R3.9), relaunch after the backoff (R2.1)."""
        now = self.now()
        confirmed: list[str] = []
        launched: list[str] = []
        for session in sorted(self.sessions.values(), key=lambda s: s.id):
            execution = session.execution
            if execution and not execution.alive and execution.state != "gone":
                execution.state = "gone"
                execution.confirmed_gone_at = now
                session.revision += 1
                self._event(session, "execution_confirmed_gone", now, generation=execution.generation)
                confirmed.append(session.id)
            elif execution and execution.state == "gone" and execution.strays:
                # A stray container of the session found and removed on a later pass (R3.9).
                execution.strays -= 1
                execution.confirmed_gone_at = now
                session.revision += 1
                self._event(session, "execution_confirmed_gone", now, generation=execution.generation, stray=True)
                confirmed.append(session.id)
            if (
                session.relaunch
                and session.admission_state == "open"
                and session.status != "closed"
                and session.execution is not None
                and session.execution.state == "gone"
            ):
                # R1.9, R2.15: a drained worker was not a failure; the session continues at once.
                session.relaunch = False
                self._launch(session, now, reason="drained")
                session.revision += 1
                launched.append(session.id)
                continue
            attention = session.attention
            if (
                attention
                and attention.retry_at is not None
                and attention.retry_at <= now
                and session.admission_state == "open"
                and session.status != "closed"
                and (session.execution is None or session.execution.state == "gone")
            ):
                attention.retry_at = None  # attempting now; failures keep counting until the worker is ready
                self._launch(session, now, reason="backoff_elapsed")
                session.revision += 1
                launched.append(session.id)
        result = {"at": isoformat(now), "confirmed_gone": confirmed, "launched": launched}
        self.scheduler_log.append(result)
        return result

    # ------------------------------------------------------------------ admin: drive the machine

    def _alive_worker(self, session: Session, what: str) -> Execution:
        execution = session.execution
        if execution is None or not execution.alive:
            raise AdminError(
                409,
                "NO_WORKER",
                f"{what}: session {session.id} has no live worker (in backoff? run a scheduler pass after retry_at)",
            )
        return execution

    def fail_restore(self, session_id: str, reason: str) -> Session:
        session = self.get(session_id)
        execution = self._alive_worker(session, "fail_restore")
        if execution.phase != "starting":
            raise AdminError(409, "NOT_STARTING", f"the worker of {session_id} already reported ready")
        if session.checkpoint is None:
            raise AdminError(409, "NO_CHECKPOINT", f"{session_id} has no checkpoint to restore (use fail_startup)")
        now = self.now()
        if reason == "incompatible_checkpoint":
            self._log_json(
                session,
                now,
                "worker.checkpoint.restore_refused",
                level="error",
                code="INCOMPATIBLE_CHECKPOINT",
                checkpoint_id=session.checkpoint.id,
            )
        else:
            self._log_json(
                session,
                now,
                "worker.checkpoint.restore_refused",
                level="error",
                code=reason,
                checkpoint_id=session.checkpoint.id,
            )
        self._worker_failed(session, "RESTORE_FAILED", reason, now)
        return session

    def stop(self, session_id: str, code: str, reason: str | None, failures: int | None) -> Session:
        """Stop a session as the control host does at the 3rd failure (R2.1, R2.12): failed,
        recovery_required, retry_at null, with this attention; for driving the watcher over HTTP."""
        session = self.get(session_id)
        now = self.now()
        if session.execution is not None:
            session.execution.alive = False
        session.attention = Attention(code=code, reason=reason, failures=failures, retry_at=None)
        session.status = "failed"
        session.admission_state = "recovery_required"
        session.resumable = False
        session.revision += 1
        name = {"RESTORE_FAILED": "checkpoint_restore_failed", "STARTUP_FAILED": "startup_failed"}.get(
            code, "session_stopped"
        )
        self._event(session, name, now, reason=reason, failures=failures, code=code)
        return session

    def settle(self, session_id: str) -> Session:
        """The session needs no operator any more (idle, open, no attention): it leaves the listing."""
        session = self.get(session_id)
        session.attention = None
        session.status = "idle"
        session.admission_state = "open"
        session.revision += 1
        self._event(session, "session_settled", self.now())
        return session

    def fail_startup(self, session_id: str, reason: str, error: str | None = None) -> Session:
        session = self.get(session_id)
        execution = self._alive_worker(session, "fail_startup")
        if execution.phase != "starting":
            raise AdminError(409, "NOT_STARTING", f"the worker of {session_id} already reported ready")
        now = self.now()
        text = error or reason
        self._log_text(session, now, f'worker.stopping kind=failed session_id={session.id} error="{text}"')
        self._worker_failed(session, "STARTUP_FAILED", reason, now)
        return session

    def _tick_ready_at_once(self, now: datetime) -> None:
        for sid in sorted(self._ready_next):
            self._ready_next.discard(sid)
            session = self.sessions.get(sid)
            execution = session.execution if session else None
            if session and execution and execution.alive and execution.phase == "starting" and not session.store_outage:
                self._ready(session, now)

    def worker_ready(self, session_id: str) -> Session:
        """The current worker restored / prepared its workspace and reported ready: failures reset."""
        session = self.get(session_id)
        execution = self._alive_worker(session, "worker_ready")
        if self.ready_behaviour == NEVER_READY:
            raise AdminError(409, "NEVER_READY", f"{session_id}: this sandbox runs with ready_behaviour never_ready")
        if session.store_outage and execution.phase == "starting":
            raise AdminError(409, "STORE_OUTAGE", f"{session_id}: the store is out; the worker keeps retrying (R2.6)")
        self._ready(session, self.now())
        return session

    def _ready(self, session: Session, at: datetime) -> None:
        execution = session.execution
        assert execution is not None
        if self.ready_behaviour == NEVER_READY:
            return  # the worker keeps starting: nothing is reported (the bot must not call it recovered)
        execution.phase = "ready"
        if session.attention and session.attention.code in {"RESTORE_FAILED", "STARTUP_FAILED"}:
            session.attention = None
        session.status = "running"
        session.admission_state = "open"
        session.revision += 1
        # checkpoint_id: the checkpoint this worker restored (null: it started without one), what the
        # bot reads as the worker having the checkpoint's context after a resume (R5.2) [assumed].
        restored = session.checkpoint.id if execution.restore and session.checkpoint else None
        named: dict[str, Any] = {"checkpoint_id": restored} if self.ready_names_checkpoint else {}
        self._event(session, "worker_ready", at, generation=execution.generation, **named)
        self._log_json(session, at, "worker.ready", generation=execution.generation)

    def store_outage(self, session_id: str, on: bool) -> Session:
        """Start/end a transient store outage (R2.6): never a failure while within the startup budget."""
        session = self.get(session_id)
        now = self.now()
        if on and not session.store_outage:
            session.store_outage = True
            execution = session.execution
            if execution and execution.alive and execution.phase == "starting":
                self._log_outage_line(session, now, attempt=1)
        elif not on and session.store_outage:
            session.store_outage = False
            # R2.6: the same worker goes on; no new generation, no failure counted.
            self._log_json(session, now, "worker.checkpoint.store_available")
        return session

    def worker_stop(self, session_id: str, kind: str, *, old_api: bool = False) -> Session:
        """The current worker ends without failing: pause, terminate, close, revoked rights or a SIGTERM
        drain. None of them counts as a failure (R2.15); a drained session continues at the next
        scheduler pass (R1.9). ``old_api``: the API predates ``stop_kind`` and refuses it with 400
        (R2.16): the worker logs ``worker.release.stop_kind_refused``, releases again without it, and
        the old API counts the ending by the old rules: one failure when the claim carried a restore."""
        if kind not in STOP_KINDS:
            raise AdminError(400, "BAD_REQUEST", f"kind must be one of {', '.join(STOP_KINDS)}")
        session = self.get(session_id)
        execution = self._alive_worker(session, "worker_stop")
        now = self.now()
        execution.alive = False
        execution.state = "draining"  # ended; the scheduler confirms it gone (R1.5)
        if kind == "drain" and old_api:
            self._log_json(
                session, now, "worker.release.stop_kind_refused", level="warn", status=400, code="BAD_REQUEST"
            )
            self._log_json(session, now, "worker.released", generation=execution.generation)
            if execution.restore:
                self._worker_failed(session, "RESTORE_FAILED", "worker_released", now)
                return session
        else:
            self._log_json(session, now, "worker.released", generation=execution.generation, stop_kind=kind)
        session.status = "idle"
        session.relaunch = kind == "drain"
        session.revision += 1
        self._event(session, "worker_stopped", now, stop_kind=kind, generation=execution.generation)
        return session

    def stray_workers(self, session_id: str, count: int) -> Session:
        """Leave ``count`` containers of the session for later scheduler passes to find (R3.9 tests)."""
        session = self.get(session_id)
        if session.execution is None:
            raise AdminError(409, "NO_WORKER", f"{session_id} has no execution")
        if count < 0:
            raise AdminError(400, "BAD_REQUEST", "count must be >= 0")
        session.execution.strays = count
        return session

    def reclamation(self, session_id: str, held: bool) -> Session:
        session = self.get(session_id)
        session.reclamation_claim = held
        return session

    def start_turn(self, session_id: str, turn_id: str | None = None) -> Turn:
        session = self.get(session_id)
        self._alive_worker(session, "start_turn")
        if session.unknown_turn():
            raise AdminError(409, "OUTCOME_UNKNOWN", f"{session_id}: an outcome_unknown turn heads the queue (R3.8)")
        tid = turn_id or f"turn_sbx{next(self._turns)}"
        if not ID_PATTERN.match(tid) or session.turn(tid):
            raise AdminError(400, "BAD_REQUEST", f"turn id {tid!r} is invalid or already used")
        turn = Turn(id=tid, status="running", started_at=self.now())
        session.turns.append(turn)
        session.status = "running"
        session.revision += 1
        self._event(session, "turn_started", self.now(), turn_id=tid)
        return turn

    def interrupt(
        self,
        session_id: str,
        terminal_reason: str | None,
        checkpoint_committed: bool,
        turn_id: str | None = None,
    ) -> Turn:
        """Interrupt the running turn (R3.1): ``interrupted`` needs both an engine answer and a checkpoint."""
        session = self.get(session_id)
        execution = self._alive_worker(session, "interrupt")
        if terminal_reason is not None and terminal_reason not in TERMINAL_REASONS:
            raise AdminError(400, "BAD_REQUEST", f"terminal_reason must be one of {sorted(TERMINAL_REASONS)} or null")
        if terminal_reason is None and not checkpoint_committed:
            raise AdminError(
                400,
                "BAD_REQUEST",
                "without a committed checkpoint the turn is outcome_unknown: "
                "give terminal_reason interrupt_checkpoint_unavailable",
            )
        if terminal_reason == "interrupt_checkpoint_unavailable" and checkpoint_committed:
            raise AdminError(
                400, "BAD_REQUEST", "interrupt_checkpoint_unavailable means the checkpoint was NOT committed"
            )
        turn = (
            session.turn(turn_id)
            if turn_id
            else next((t for t in reversed(session.turns) if t.status == "running"), None)
        )
        if turn is None:
            turn = self.start_turn(session_id, turn_id)
        if turn.status != "running":
            raise AdminError(409, "NOT_RUNNING", f"turn {turn.id} is {turn.status}, not running")
        now = self.now()
        control_id = f"ctl_sbx{next(self._controls)}"
        turn.control_id = control_id
        turn.ended_at = now
        base = {"turn_id": turn.id, "control_id": control_id}
        t0 = now - timedelta(seconds=6)

        def stage(ms: int, name: str, **extra: Any) -> None:
            self._log_json(
                session,
                t0 + timedelta(milliseconds=ms),
                "worker.turn.interrupt.stage",
                stage=name,
                elapsed_ms=ms,
                **base,
                **extra,
            )

        stage(0, "control_received")
        stage(4, "sdk_interrupt_called")
        if checkpoint_committed:
            session.checkpoint = Checkpoint(f"ckpt_sbx{next(self._checkpoints)}", now, turn.id)
        if terminal_reason == "interrupt_unanswered":
            stage(5004, "engine_terminal", outcome="timeout")
            self._log_text(
                session,
                t0 + timedelta(milliseconds=5005),
                f"turn {turn.id} gave no terminal within 5000ms of its interrupt session_id={session.id}",
            )
        else:
            stage(130, "sdk_interrupt_answered")
            stage(131, "engine_terminal", outcome="stopped")
        stage(5010, "capture_started")
        if terminal_reason == "interrupt_checkpoint_unavailable":
            stage(5400, "capture_finished", outcome="ok")
            stage(5401, "finalize_started")
            stage(5600, "finalize_finished", outcome="failed", reason="CHECKPOINT_UNAVAILABLE")
        elif checkpoint_committed:
            stage(5400, "capture_finished", outcome="ok")
            stage(5401, "finalize_started")
            stage(5600, "finalize_finished", outcome="ok")
        outcome = "interrupted" if terminal_reason is None else "unknown"
        self._log_json(
            session,
            now,
            "control.result",
            operation="interrupt",
            outcome=outcome,
            reason_code="interrupted" if terminal_reason is None else "deadline_exceeded",
            effect_ms=6000,
            duration_ms=6000,
            **base,
        )
        session.revision += 1
        if terminal_reason is None:
            turn.status = "interrupted"
            session.status = "idle"
            self._event(session, "turn_interrupted", now, turn_id=turn.id)
            return turn
        turn.status = "outcome_unknown"
        turn.terminal_reason = terminal_reason
        # R3.1: checkpoint_unavailable → the worker drains; unanswered → the worker ends as failed. Either
        # way the API shows it until a scheduler pass confirms it gone (R3.9).
        execution.alive = False
        execution.state = "draining" if terminal_reason == "interrupt_checkpoint_unavailable" else "running"
        if terminal_reason == "interrupt_unanswered":
            self._log_json(session, now, "worker.failed", level="error", error="interrupt_unanswered")
        # R3.7: failed + recovery_required; queued inputs are not dispatched.
        session.status = "failed"
        session.admission_state = "recovery_required"
        session.resumable = False
        session.attention = Attention("OUTCOME_UNKNOWN", terminal_reason, None, None)
        self._event(session, "turn_outcome_unknown", now, turn_id=turn.id, terminal_reason=terminal_reason)
        return turn

    def create_session(self, spec: Mapping[str, Any]) -> Session:
        from bot.sandbox._scenarios import (
            validate_events,
            validate_log_entries,
            validate_session_spec,
            validate_turns,
        )

        session_spec = spec.get("session", spec)
        turns = spec.get("turns", []) if "session" in spec else []
        events = spec.get("events", []) if "session" in spec else []
        logs = spec.get("worker_logs", []) if "session" in spec else []
        problems = validate_session_spec(session_spec, "session")
        if not problems:
            problems = (
                validate_turns(turns, "session")
                + validate_events(events, "session")
                + validate_log_entries(logs, "session")
            )
        if problems:
            raise AdminError(400, "BAD_REQUEST", "; ".join(problems))
        if session_spec["id"] in self.sessions:
            raise AdminError(409, "EXISTS", f"session {session_spec['id']!r} already exists")
        session = self.build_session(session_spec, turns, events, logs)
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
    ) -> Incident:
        """A mass incident: ``count`` stuck sessions with mixed causes (see ``_incident``); the outage
        ends ``outage_seconds`` from now. A previous incident's sessions are replaced."""
        if not ID_PATTERN.match(f"{prefix}_00000") or outage_seconds < 0 or started_seconds < 300:
            raise AdminError(
                400, "BAD_REQUEST", "prefix must make valid ids, outage_seconds >= 0, started_seconds >= 300"
            )
        try:
            causes = assign_causes(count, seed)
        except ValueError as exc:
            raise AdminError(400, "BAD_REQUEST", str(exc)) from None
        if self.incident is not None:
            for sid in [k for k, v in self.sessions.items() if v.incident_cause is not None]:
                del self.sessions[sid]
                self._forget_session(sid)
            self._ids = None
            self._incident_workers.clear()
        taken = [sid for sid in self.sessions if sid.startswith(prefix + "_")]
        if taken:
            raise AdminError(409, "EXISTS", f"sessions with the prefix {prefix!r} exist already: {taken[0]}")
        now = self.now()
        rng = random.Random(seed)
        counts: dict[str, int] = {}
        for index, cause in enumerate(causes, start=1):
            spec = session_spec(index, cause, prefix, rng, started_seconds)
            session = self.build_session(spec["session"], spec["turns"], spec["events"], spec["worker_logs"])
            session.incident_cause = cause
            self._put(session)
            counts[cause] = counts.get(cause, 0) + 1
        self.incident = Incident(
            started_at=now - timedelta(seconds=started_seconds),
            outage_until=now + timedelta(seconds=outage_seconds),
            prefix=prefix,
            counts=counts,
        )
        return self.incident

    def _tick_incident(self, now: datetime) -> None:
        """Incident workers: fail, or come up once the outage is over (``_incident.worker_plan``)."""
        incident = self.incident
        if incident is None:
            return
        for sid in sorted(self._incident_workers):
            session = self.sessions.get(sid)
            execution = session.execution if session else None
            if session is None or execution is None or not execution.alive or execution.phase != "starting":
                self._incident_workers.discard(sid)
                continue
            restoring = session.checkpoint is not None
            kind, at, reason = worker_plan(
                session.incident_cause or "transient", restoring, execution.started_at or now, incident
            )
            if now < at:
                continue
            self._incident_workers.discard(sid)
            if session.store_outage:
                session.store_outage = False
                self._log_json(session, min(at, incident.outage_until), "worker.checkpoint.store_available")
            if kind == "ready":
                self._ready(session, at)
                continue
            if reason == "execution_gone":
                self._log_text(session, at, "Killed")
            else:
                code = "INCOMPATIBLE_CHECKPOINT" if reason == "incompatible_checkpoint" else "CHECKPOINT_UNAVAILABLE"
                self._log_json(
                    session,
                    at,
                    "worker.checkpoint.restore_refused",
                    level="error",
                    code=code,
                    checkpoint_id=session.checkpoint.id if session.checkpoint else None,
                )
            self._worker_failed(session, "RESTORE_FAILED" if restoring else "STARTUP_FAILED", reason, at)

    # ------------------------------------------------------------------ public API

    def list_sessions(
        self, admission_state: str | None, status: str | None, cursor: str | None, limit: int
    ) -> dict[str, Any]:
        """A page sorted by id after ``cursor`` (the last id of the previous page): O(page), not O(all)."""
        ids = self.sorted_ids()
        start = bisect.bisect_right(ids, cursor) if cursor else 0
        page: list[Session] = []
        more = False
        for i in range(start, len(ids)):
            session = self.sessions[ids[i]]
            if admission_state and session.admission_state != admission_state:
                continue
            if status and session.status != status:
                continue
            if len(page) == limit:
                more = True
                break
            page.append(session)
        return {"sessions": [s.to_json() for s in page], "next": page[-1].id if more else None}

    def list_turns(self, session_id: str, status: str | None, cursor: str | None, limit: int) -> dict[str, Any]:
        session = self.get(session_id)
        turns = list(reversed(session.turns))  # newest first
        if status:
            turns = [t for t in turns if t.status == status]
        if cursor:
            ids = [t.id for t in turns]
            turns = turns[ids.index(cursor) + 1 :] if cursor in ids else []
        page = turns[:limit]
        return {"turns": [t.to_json() for t in page], "next": page[-1].id if len(turns) > limit else None}

    def get_turn(self, session_id: str, turn_id: str) -> dict[str, Any]:
        session = self.get(session_id)
        turn = session.turn(turn_id)
        if turn is None:
            raise ApiError(404, "NOT_FOUND", f"No turn {turn_id!r} in session {session_id!r}.")
        return turn.to_json()

    def list_events(self, session_id: str, after: int, limit: int) -> dict[str, Any]:
        session = self.get(session_id)
        events = [e for e in session.events if e.seq > after]
        page = events[:limit]
        # ``next`` is what to pass as ``after`` for the following page: the last seq returned.
        return {"events": [e.to_json() for e in page], "next": page[-1].seq if page else after}

    # -- idempotency (the IETF Idempotency-Key draft: same key + same body → same answer)

    def replay(self, key: str, method: str, path: str, body: str) -> IdempotencyRecord | None:
        record = self.idempotency.get(key)
        if record is None:
            return None
        if (record.method, record.path, record.body) != (method, path, body):
            raise ApiError(
                422,
                "IDEMPOTENCY_KEY_REUSED",
                "This Idempotency-Key was already used with a different request; use a new key for a new request.",
            )
        return record

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
        self.idempotency[key] = IdempotencyRecord(key, method, path, body, status, response, session_id, self.now())

    def _effect(self, session: Session, kind: str, receipt_id: str, key: str, **detail: Any) -> None:
        self.effects.append(
            {
                "seq": next(self._effect_seq),
                "session_id": session.id,
                "kind": kind,
                "receipt_id": receipt_id,
                "idempotency_key": key,
                "at": isoformat(self.now()),
                "revision": session.revision,
                **detail,
            }
        )

    def decide(self, session_id: str, body: Any, key: str) -> dict[str, Any]:
        """Apply a recovery decision, checked in the order of docs/control-host-api.md's acceptance table."""
        session = self.get(session_id)
        if not isinstance(body, dict):
            raise ApiError(400, "BAD_REQUEST", "The body must be a JSON object.")
        unknown = sorted(set(body) - _DECISION_FIELDS)
        if unknown:
            raise ApiError(400, "BAD_REQUEST", f"Unknown fields: {', '.join(unknown)}.")
        decision = body.get("decision")
        reason = body.get("reason")
        target = body.get("target_turn_id")
        evidence = body.get("evidence_ref")
        expected = body.get("expected_revision")
        if decision not in DECISIONS:
            raise ApiError(400, "BAD_REQUEST", f"decision must be one of {', '.join(DECISIONS)}.")
        if not isinstance(reason, str) or not reason.strip():
            raise ApiError(400, "BAD_REQUEST", "reason is required (free text for the records).")
        if expected is None:
            # The runbook's decision body always carries it: a client that drops it must not pass.
            raise ApiError(400, "BAD_REQUEST", "expected_revision is required (the session's current revision).")
        if not isinstance(expected, int) or isinstance(expected, bool):
            raise ApiError(400, "BAD_REQUEST", "expected_revision must be an integer.")
        for name, value in (("target_turn_id", target), ("evidence_ref", evidence)):
            if value is not None and not isinstance(value, str):
                raise ApiError(400, "BAD_REQUEST", f"{name} must be a string.")
        if decision in {"abandon", "confirm_completed"} and not target:
            raise ApiError(400, "BAD_REQUEST", f"{decision} needs target_turn_id.")
        if decision == "confirm_completed" and not evidence:
            raise ApiError(400, "BAD_REQUEST", "confirm_completed needs evidence_ref.")
        if expected != session.revision:
            raise ApiError(409, "REQUEST_STALE", f"expected_revision {expected} is not current ({session.revision}).")
        if session.status == "closed" or session.admission_state == "closed":
            raise ApiError(409, "REQUEST_STALE", "The session is closed.")
        if decision == "retry_restore":
            self._check_retry_restore(session)
        elif decision == "start_fresh":
            self._check_start_fresh(session)
        turn = None
        if decision in {"abandon", "confirm_completed"}:
            turn = session.turn(str(target))
            if turn is None:
                raise ApiError(404, "NOT_FOUND", f"No turn {target!r} in session {session_id!r}.")
            if turn.status != "outcome_unknown":
                raise ApiError(409, "REQUEST_STALE", f"Turn {turn.id} is {turn.status}, not outcome_unknown.")
            if session.execution is None or session.execution.state != "gone" or session.execution.strays:
                # R3.9: a stray container of the session that no pass has removed yet also counts.
                raise ApiError(409, "RECOVERY_REQUIRED", "The previous execution has not been confirmed gone.")
            if decision == "confirm_completed" and (
                session.checkpoint is None or session.checkpoint.covers_turn_id != turn.id
            ):
                # R3.11
                raise ApiError(409, "CHECKPOINT_UNAVAILABLE", "No committed checkpoint covers this turn.")
        now = self.now()
        session.revision += 1
        if decision == "close":
            session.status = "closed"
            session.admission_state = "closed"
            session.attention = None
            session.resumable = False
            session.queued_inputs = 0
            if session.execution and session.execution.alive:
                # R3.9: close does not wait; it asks the remaining execution to end.
                session.execution.alive = False
                session.execution.state = "draining"
        elif decision == "retry_restore":
            # R2.9: count back to 0; the next worker restores from the same checkpoint pointer. The
            # attention stays (failures 0) until that worker reports ready: acceptance is not recovery.
            session.attention = self._attention_after_decision(session.attention)
            session.admission_state = "open"
            self._launch(session, now, reason="retry_restore")
        elif decision == "start_fresh":
            # R2.11: a new engine session without the checkpoint; the attention stays (failures 0)
            # until its worker reports ready.
            session.attention = self._attention_after_decision(session.attention)
            session.checkpoint = None
            session.admission_state = "open"
            session.resumable = False
            self._launch(session, now, reason="start_fresh")
        else:
            assert turn is not None
            turn.ended_at = turn.ended_at or now
            session.status = "stopped"
            session.stopped_at, session.workspace_expired = now, False  # R4.1: the TTL starts
            session.admission_state = "open"
            if decision == "confirm_completed":
                turn.status = "completed"
                session.attention = None
                session.resumable = True
            else:
                turn.status = "cancelled"  # R3.11
                if self._checkpoint_covers(session, turn):
                    session.attention = None
                    session.resumable = True
                else:
                    # R3.12: the cancelled turn ran after the last checkpoint → context gap.
                    session.attention = Attention(
                        "CONTEXT_GAP",
                        "no_checkpoint" if session.checkpoint is None else "turn_after_checkpoint",
                    )
                    session.resumable = False
        receipt_id = f"rcpt_sbx{next(self._receipts):06d}"
        self._event(session, "recovery_decision", now, decision=decision, receipt_id=receipt_id)
        self._effect(session, "decision", receipt_id, key, decision=decision, target_turn_id=target)
        return {
            "id": receipt_id,
            "decision": decision,
            "status": "accepted",
            "session": session.summary(),
            "result": {"resumable": bool(session.resumable)},
        }

    def _attention_after_decision(self, attention: Attention | None) -> Attention | None:
        """The attention in the answer to an accepted retry_restore / start_fresh: kept with the count
        back to 0, or cleared at once by a host that runs with ``clear_attention``."""
        if self.ready_behaviour == CLEAR_ATTENTION:
            return None
        return self._attention_until_ready(attention)

    @staticmethod
    def _attention_until_ready(attention: Attention | None) -> Attention | None:
        """A restore/startup attention kept across a retry_restore / start_fresh with the count back to 0
        (R2.9); it clears only when the next worker reports ready (R2.2, R5.1)."""
        if attention is None or attention.code not in {"RESTORE_FAILED", "STARTUP_FAILED"}:
            return None
        return Attention(code=attention.code, reason=attention.reason, failures=0, retry_at=None)

    @staticmethod
    def _stale(message: str) -> ApiError:
        return ApiError(409, "REQUEST_STALE", message)

    def _check_retry_restore(self, session: Session) -> None:
        """R2.10: only a session stopped at the restore-failure limit; anything else is REQUEST_STALE.

        The runbook: "accepted only for a session stopped at the limit; a session in backoff or stopped
        for another reason (context gap, unknown turn, STARTUP_FAILED without a restore) gets 409
        REQUEST_STALE". The failure count is not checked: an incompatible checkpoint stops after one
        failure (R2.3), an old API counts differently (R2.16).
        """
        attention = session.attention
        unknown = session.unknown_turn()
        if unknown is not None:
            # Even when the attention block looks like a restore stopped at the limit (R3.8).
            raise self._stale(
                f"retry_restore refused: outcome_unknown turn {unknown.id} heads the queue; "
                "decide it first (abandon, confirm_completed or close)."
            )
        if attention is not None and attention.retry_at is not None:
            raise self._stale(
                f"retry_restore refused: the session is in backoff until {isoformat(attention.retry_at)}."
            )
        if attention is not None and attention.code == "CONTEXT_GAP":
            raise self._stale("retry_restore refused: the session stopped with a context gap, not a restore.")
        if attention is not None and attention.code == "STARTUP_FAILED":
            raise self._stale("retry_restore refused: STARTUP_FAILED without a restore; there is nothing to retry.")
        if not (
            attention is not None
            and attention.code == "RESTORE_FAILED"
            and session.admission_state == "recovery_required"
        ):
            raise self._stale(
                "retry_restore is accepted only for a session stopped at the restore-failure limit "
                "(recovery_required, attention RESTORE_FAILED, retry_at null)."
            )
        if session.checkpoint is None:
            raise self._stale("retry_restore refused: the session has no checkpoint to restore.")

    def _check_start_fresh(self, session: Session) -> None:
        """start_fresh: a session stopped at a failure limit, or stopped with nothing to continue from.

        R2.11 / R2.14 (stopped at a restore or startup limit), R3.12 (stopped and not resumable: no
        checkpoint to continue from, or a context gap). Refused while an outcome_unknown turn heads the
        queue (R3.8) and in backoff (R2.10).
        """
        attention = session.attention
        unknown = session.unknown_turn()
        if unknown is not None:
            raise self._stale(
                f"start_fresh refused: outcome_unknown turn {unknown.id} heads the queue; decide it first "
                "(abandon, confirm_completed or close)."
            )
        if attention is not None and attention.retry_at is not None:
            raise self._stale(f"start_fresh refused: the session is in backoff until {isoformat(attention.retry_at)}.")
        at_limit = (
            session.admission_state == "recovery_required"
            and attention is not None
            and attention.code in {"RESTORE_FAILED", "STARTUP_FAILED"}
        )
        stopped_without_context = session.status == "stopped" and session.resumable is not True
        if not (at_limit or stopped_without_context):
            raise self._stale(
                "start_fresh is accepted only for a session stopped at a failure limit, or stopped and not "
                f"resumable; this one is {session.status}, admission {session.admission_state}, "
                f"resumable {json.dumps(session.resumable)}."
            )

    @staticmethod
    def _checkpoint_covers(session: Session, turn: Turn) -> bool:
        checkpoint = session.checkpoint
        if checkpoint is None or checkpoint.covers_turn_id is None:
            return False
        ids = [t.id for t in session.turns]
        if checkpoint.covers_turn_id not in ids:
            return False
        return ids.index(checkpoint.covers_turn_id) >= ids.index(turn.id)

    def check_resume(self, session_id: str, body: Any) -> Session:
        """Validation that must precede the reclamation check (so a bad body is a 400, not a 503)."""
        session = self.get(session_id)
        if not isinstance(body, dict):
            raise ApiError(400, "BAD_REQUEST", "The body must be a JSON object.")
        unknown = sorted(set(body) - _RESUME_FIELDS)
        if unknown:
            raise ApiError(400, "BAD_REQUEST", f"Unknown fields: {', '.join(unknown)}.")
        if body.get("reason") is not None and not isinstance(body["reason"], str):
            raise ApiError(400, "BAD_REQUEST", "reason must be a string.")
        return session

    def resume(self, session_id: str, body: Any, key: str) -> dict[str, Any]:
        session = self.check_resume(session_id, body)
        if session.reclamation_claim:
            # R4.2: no receipt and no idempotency record: the same request is simply retried later.
            raise ApiError(
                503,
                "BACKEND_UNAVAILABLE",
                "A workspace-reclamation claim is held; retry later.",
                retryable=True,
            )
        if session.status != "stopped" or session.resumable is not True:
            raise ApiError(409, "REQUEST_STALE", "resume is accepted only for a stopped, resumable session.")
        if session.checkpoint is None:
            # R4.1: a stopped session with no committed checkpoint cannot be resumed, whatever its
            # resumable flag says; what lived only on the volume is not a context to continue from.
            raise ApiError(
                409,
                "CHECKPOINT_UNAVAILABLE",
                "resume refused: the session has no committed checkpoint to continue from (R4.1).",
            )
        now = self.now()
        session.revision += 1
        session.admission_state = "open"
        session.resumable = False
        self._launch(session, now, reason="resume")
        receipt_id = f"rcpt_sbx{next(self._receipts):06d}"
        self._event(session, "session_resumed", now, receipt_id=receipt_id)
        self._effect(session, "resume", receipt_id, key)
        return {"id": receipt_id, "status": "accepted", "session": session.summary()}

    def debug_session(self, session_id: str) -> dict[str, Any]:
        """Everything about one session, including what the API does not show (admin only)."""
        session = self.get(session_id)
        data = session.to_json()
        data["execution_internal"] = (
            {
                "alive": session.execution.alive,
                "phase": session.execution.phase,
                "generation": session.execution.generation,
                "started_at": isoformat(session.execution.started_at),
                "stray_workers": session.execution.strays,
            }
            if session.execution
            else None
        )
        data["reclamation_claim"] = session.reclamation_claim
        data["stopped_at"] = isoformat(session.stopped_at)
        data["workspace_expired"] = session.workspace_expired
        data["store_outage"] = session.store_outage
        data["scenario_id"] = session.scenario_id
        data["incident_cause"] = session.incident_cause
        data["turns"] = [t.to_json() for t in session.turns]
        return data
