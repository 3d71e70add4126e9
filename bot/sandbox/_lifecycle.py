"""The worker lifecycle and the scheduler: launch, fail, report ready, time out, expire, confirm gone.

The runbook's R2 (restore and startup failures, backoff, the startup budget), R1.5 / R3.9 (an ended
worker stays visible until a scheduler pass confirms it gone) and R4.1 (the stopped-TTL) in one place:
every other part of the state machine that starts or ends a worker (a decision, a resume, the admin,
an incident) goes through :class:`Workers`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from bot.clock import Clock, isoformat
from bot.sandbox._wire import AdminError, Attention, Execution, Session

# R2.1 / R2.12: after the 1st and 2nd failure the scheduler waits 30 s, then 60 s; the 3rd stops.
BACKOFF_SECONDS = (30, 60)
FAILURE_LIMIT = 3
# R2.6: WORKER_STARTUP_TIMEOUT_SEC, fixed at its default in the current deployment.
WORKER_STARTUP_TIMEOUT_SEC = 3600
# R4.1: a stopped session's workspace volume expires after this [assumed: the runbook names a stopped-TTL
# contract, not its length]; what lived only on the volume is gone, a committed checkpoint stays.
STOPPED_TTL_SECONDS = 7 * 24 * 3600
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
_STARTUP_CODES = frozenset({"RESTORE_FAILED", "STARTUP_FAILED"})

#: Called for every new worker generation, before its first log line (the mass incident plans it).
LaunchHook = Callable[[Session, datetime], None]


class Workers:
    """Starts and ends the sessions' workers; the caller holds the state's lock."""

    def __init__(
        self,
        clock: Clock,
        sessions: dict[str, Session],
        *,
        stopped_ttl: float = STOPPED_TTL_SECONDS,
        ready_behaviour: str = KEEP_ATTENTION,
        ready_names_checkpoint: bool = True,
        on_launch: LaunchHook | None = None,
    ) -> None:
        if ready_behaviour not in READY_BEHAVIOURS:
            raise ValueError(f"ready_behaviour must be one of {', '.join(READY_BEHAVIOURS)}, not {ready_behaviour!r}")
        self.clock = clock
        self.sessions = sessions
        self.stopped_ttl = float(stopped_ttl)
        self.ready_behaviour = ready_behaviour
        # False: a host whose worker_ready events do not say which checkpoint was restored (R5.2).
        self.ready_names_checkpoint = ready_names_checkpoint
        self.on_launch = on_launch
        self.scheduler_log: list[dict[str, Any]] = []
        self._ready_next: set[str] = set()  # ready_at_once: launched by a decision, ready at the next tick

    def now(self) -> datetime:
        return self.clock.now()

    def alive(self, session: Session, what: str) -> Execution:
        """The session's live worker, or the admin's 409 saying why there is none."""
        execution = session.execution
        if execution is None or not execution.alive:
            raise AdminError(
                409,
                "NO_WORKER",
                f"{what}: session {session.id} has no live worker (in backoff? run a scheduler pass after retry_at)",
            )
        return execution

    def launch(self, session: Session, at: datetime, *, reason: str) -> Execution:
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
        session.add_event("generation_launched", at, generation=generation, cause=reason)
        if self.ready_behaviour == READY_AT_ONCE and reason in ("retry_restore", "start_fresh", "resume"):
            self._ready_next.add(session.id)
        session.log_json(at, "worker.claimed", generation=generation, restore=session.checkpoint is not None)
        if self.on_launch is not None:
            self.on_launch(session, at)
        if session.store_outage:
            self.log_outage_line(session, at, attempt=1)
        return session.execution

    @staticmethod
    def log_outage_line(session: Session, at: datetime, *, attempt: int) -> None:
        # R2.6: restoring → restore_unavailable; new generation without checkpoint → store_unavailable.
        name = "worker.checkpoint.restore_unavailable" if session.checkpoint else "worker.checkpoint.store_unavailable"
        session.log_json(
            at,
            name,
            level="warn",
            attempt=attempt,
            error="connect ECONNREFUSED object-store:9000",
            retry_in_ms=min(1000 * 2 ** (attempt - 1), 30000),
        )

    @staticmethod
    def failed(session: Session, code: str, reason: str, at: datetime) -> None:
        """The current worker ended before reporting ready: one counted failure (R2.1, R2.3, R2.12)."""
        execution = session.execution
        if execution is not None:
            execution.alive = False
            execution.state = "draining"  # ended; the scheduler has not confirmed it gone yet (R1.5)
            execution.phase = "starting"
        previous = session.attention
        counted = previous.failures if previous and previous.code in _STARTUP_CODES else 0
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
        session.add_event(name, at, reason=reason, failures=failures, retry_at=isoformat(retry_at))
        session.log_json(at, "worker.failed", level="error", error=reason, failures=failures)

    def ready(self, session: Session, at: datetime) -> None:
        """The current worker restored / prepared its workspace: failures reset, the attention clears."""
        execution = session.execution
        assert execution is not None
        if self.ready_behaviour == NEVER_READY:
            return  # the worker keeps starting: nothing is reported (the bot must not call it recovered)
        execution.phase = "ready"
        if session.attention and session.attention.code in _STARTUP_CODES:
            session.attention = None
        session.status = "running"
        session.admission_state = "open"
        session.revision += 1
        # checkpoint_id: the checkpoint this worker restored (null: it started without one), what the
        # bot reads as the worker having the checkpoint's context after a resume (R5.2) [assumed].
        restored = session.checkpoint.id if execution.restore and session.checkpoint else None
        named: dict[str, Any] = {"checkpoint_id": restored} if self.ready_names_checkpoint else {}
        session.add_event("worker_ready", at, generation=execution.generation, **named)
        session.log_json(at, "worker.ready", generation=execution.generation)

    def attention_after_decision(self, attention: Attention | None) -> Attention | None:
        """The attention in the answer to an accepted retry_restore / start_fresh: kept with the count
        back to 0, or cleared at once by a host that runs with ``clear_attention``."""
        if self.ready_behaviour == CLEAR_ATTENTION:
            return None
        return self._attention_until_ready(attention)

    @staticmethod
    def _attention_until_ready(attention: Attention | None) -> Attention | None:
        """A restore/startup attention kept across a retry_restore / start_fresh with the count back to 0
        (R2.9); it clears only when the next worker reports ready (R2.2, R5.1)."""
        if attention is None or attention.code not in _STARTUP_CODES:
            return None
        return Attention(code=attention.code, reason=attention.reason, failures=0, retry_at=None)

    # ------------------------------------------------------------------ time

    def tick(self, now: datetime) -> None:
        """Worker-side time effects on every session: the stopped-TTL (R4.1) and a store outage that
        outlasts the startup budget (R2.7)."""
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
            self.log_outage_line(session, deadline - timedelta(seconds=1), attempt=130)
            session.log_text(
                deadline,
                f"worker.stopping kind=failed session_id={session.id} "
                f'error="startup timeout after {WORKER_STARTUP_TIMEOUT_SEC}s: checkpoint store unavailable"',
            )
            if session.checkpoint:
                self.failed(session, "RESTORE_FAILED", "restore_unavailable", deadline)
            else:
                self.failed(session, "STARTUP_FAILED", "store_unavailable", deadline)

    def _tick_ready_at_once(self, now: datetime) -> None:
        for sid in sorted(self._ready_next):
            self._ready_next.discard(sid)
            session = self.sessions.get(sid)
            execution = session.execution if session else None
            if session and execution and execution.alive and execution.phase == "starting" and not session.store_outage:
                self.ready(session, now)

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
        session.add_event(
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
            if self._confirm_gone(session, now):
                confirmed.append(session.id)
            if self._relaunch(session, now):
                launched.append(session.id)
        result = {"at": isoformat(now), "confirmed_gone": confirmed, "launched": launched}
        self.scheduler_log.append(result)
        return result

    @staticmethod
    def _confirm_gone(session: Session, now: datetime) -> bool:
        execution = session.execution
        if execution and not execution.alive and execution.state != "gone":
            execution.state = "gone"
            execution.confirmed_gone_at = now
            session.revision += 1
            session.add_event("execution_confirmed_gone", now, generation=execution.generation)
            return True
        if execution and execution.state == "gone" and execution.strays:
            # A stray container of the session found and removed on a later pass (R3.9).
            execution.strays -= 1
            execution.confirmed_gone_at = now
            session.revision += 1
            session.add_event("execution_confirmed_gone", now, generation=execution.generation, stray=True)
            return True
        return False

    def _relaunch(self, session: Session, now: datetime) -> bool:
        if (
            session.relaunch
            and session.admission_state == "open"
            and session.status != "closed"
            and session.execution is not None
            and session.execution.state == "gone"
        ):
            # R1.9, R2.15: a drained worker was not a failure; the session continues at once.
            session.relaunch = False
            self.launch(session, now, reason="drained")
            session.revision += 1
            return True
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
            self.launch(session, now, reason="backoff_elapsed")
            session.revision += 1
            return True
        return False
