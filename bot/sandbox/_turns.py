"""Turns driven by the admin API: a turn starts, and an interrupt ends it (R3.1, R3.7, R3.8).

The interrupt is the sandbox's longest story: the worker's stage-by-stage log lines, a checkpoint
committed or not, and either an ``interrupted`` turn or an ``outcome_unknown`` one that stops the
session until an operator decides it. Kept apart from the worker lifecycle because a turn's ending
does not go through a launch or a counted failure.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

from bot.sandbox._lifecycle import Workers
from bot.sandbox._scenarios import ID_PATTERN, TERMINAL_REASONS
from bot.sandbox._wire import AdminError, Attention, Checkpoint, Session, Turn


class Turns:
    """Starts and interrupts turns; numbers the new turns, controls and checkpoints it makes."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self._turns = itertools.count(1)
        self._controls = itertools.count(1)
        self._checkpoints = itertools.count(1)

    def start(self, session: Session, turn_id: str | None = None) -> Turn:
        self.workers.alive(session, "start_turn")
        if session.unknown_turn():
            raise AdminError(409, "OUTCOME_UNKNOWN", f"{session.id}: an outcome_unknown turn heads the queue (R3.8)")
        tid = turn_id or f"turn_sbx{next(self._turns)}"
        if not ID_PATTERN.match(tid) or session.turn(tid):
            raise AdminError(400, "BAD_REQUEST", f"turn id {tid!r} is invalid or already used")
        turn = Turn(id=tid, status="running", started_at=self.workers.now())
        session.turns.append(turn)
        session.status = "running"
        session.revision += 1
        session.add_event("turn_started", self.workers.now(), turn_id=tid)
        return turn

    def interrupt(
        self,
        session: Session,
        terminal_reason: str | None,
        checkpoint_committed: bool,
        turn_id: str | None = None,
    ) -> Turn:
        """Interrupt the running turn (R3.1): ``interrupted`` needs both an engine answer and a checkpoint."""
        execution = self.workers.alive(session, "interrupt")
        _check_interrupt(terminal_reason, checkpoint_committed)
        turn = (
            session.turn(turn_id)
            if turn_id
            else next((t for t in reversed(session.turns) if t.status == "running"), None)
        )
        if turn is None:
            turn = self.start(session, turn_id)
        if turn.status != "running":
            raise AdminError(409, "NOT_RUNNING", f"turn {turn.id} is {turn.status}, not running")
        now = self.workers.now()
        control_id = f"ctl_sbx{next(self._controls)}"
        turn.control_id = control_id
        turn.ended_at = now
        base = {"turn_id": turn.id, "control_id": control_id}
        t0 = now - timedelta(seconds=6)

        def stage(ms: int, name: str, **extra: Any) -> None:
            session.log_json(
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
            session.log_text(
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
        session.log_json(
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
            session.add_event("turn_interrupted", now, turn_id=turn.id)
            return turn
        turn.status = "outcome_unknown"
        turn.terminal_reason = terminal_reason
        # R3.1: checkpoint_unavailable → the worker drains; unanswered → the worker ends as failed. Either
        # way the API shows it until a scheduler pass confirms it gone (R3.9).
        execution.alive = False
        execution.state = "draining" if terminal_reason == "interrupt_checkpoint_unavailable" else "running"
        if terminal_reason == "interrupt_unanswered":
            session.log_json(now, "worker.failed", level="error", error="interrupt_unanswered")
        # R3.7: failed + recovery_required; queued inputs are not dispatched.
        session.status = "failed"
        session.admission_state = "recovery_required"
        session.resumable = False
        session.attention = Attention("OUTCOME_UNKNOWN", terminal_reason, None, None)
        session.add_event("turn_outcome_unknown", now, turn_id=turn.id, terminal_reason=terminal_reason)
        return turn


def _check_interrupt(terminal_reason: str | None, checkpoint_committed: bool) -> None:
    """The admin's 400s: ``interrupted`` needs a committed checkpoint; unavailable means none was."""
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
        raise AdminError(400, "BAD_REQUEST", "interrupt_checkpoint_unavailable means the checkpoint was NOT committed")
