"""What an accepted recovery decision or resume does to a session, and the receipt it answers with.

``_acceptance`` decides whether the host takes the request; this module applies it (R2.9, R2.11,
R3.9, R3.11, R3.12, R4.1): the revision moves, a worker is launched through the lifecycle where the
decision starts one, and the effect is logged under the request's Idempotency-Key.
"""

from __future__ import annotations

import itertools
from typing import Any

from bot.sandbox._acceptance import accept_decision, accept_resume, checkpoint_covers, read_decision, read_resume
from bot.sandbox._idempotency import EffectLog
from bot.sandbox._lifecycle import Workers
from bot.sandbox._wire import Attention, Session, Turn


class Decisions:
    """Applies decisions and resumes; the receipts are numbered across both."""

    def __init__(self, workers: Workers, effects: EffectLog) -> None:
        self.workers = workers
        self.effects = effects
        self._receipts = itertools.count(1)

    def _receipt_id(self) -> str:
        return f"rcpt_sbx{next(self._receipts):06d}"

    def decide(self, session: Session, body: Any, key: str) -> dict[str, Any]:
        """Apply a recovery decision, checked in the order of docs/control-host-api.md's acceptance table."""
        request = read_decision(body)
        turn = accept_decision(session, request)
        decision = request.decision
        now = self.workers.now()
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
            session.attention = self.workers.attention_after_decision(session.attention)
            session.admission_state = "open"
            self.workers.launch(session, now, reason="retry_restore")
        elif decision == "start_fresh":
            # R2.11: a new engine session without the checkpoint; the attention stays (failures 0)
            # until its worker reports ready.
            session.attention = self.workers.attention_after_decision(session.attention)
            session.checkpoint = None
            session.admission_state = "open"
            session.resumable = False
            self.workers.launch(session, now, reason="start_fresh")
        else:
            assert turn is not None
            turn.ended_at = turn.ended_at or now
            session.status = "stopped"
            session.stopped_at, session.workspace_expired = now, False  # R4.1: the TTL starts
            session.admission_state = "open"
            _settle_turn(session, turn, confirmed=decision == "confirm_completed")
        receipt_id = self._receipt_id()
        session.add_event("recovery_decision", now, decision=decision, receipt_id=receipt_id)
        self.effects.add(
            session,
            "decision",
            receipt_id,
            key,
            self.workers.now(),
            decision=decision,
            target_turn_id=request.target_turn_id,
        )
        return {
            "id": receipt_id,
            "decision": decision,
            "status": "accepted",
            "session": session.summary(),
            "result": {"resumable": bool(session.resumable)},
        }

    def resume(self, session: Session, body: Any, key: str) -> dict[str, Any]:
        read_resume(body)
        accept_resume(session)
        now = self.workers.now()
        session.revision += 1
        session.admission_state = "open"
        session.resumable = False
        self.workers.launch(session, now, reason="resume")
        receipt_id = self._receipt_id()
        session.add_event("session_resumed", now, receipt_id=receipt_id)
        self.effects.add(session, "resume", receipt_id, key, self.workers.now())
        return {"id": receipt_id, "status": "accepted", "session": session.summary()}


def _settle_turn(session: Session, turn: Turn, *, confirmed: bool) -> None:
    """abandon / confirm_completed: the unknown turn's outcome, and whether the session can resume."""
    if confirmed:
        turn.status = "completed"
        session.attention = None
        session.resumable = True
        return
    turn.status = "cancelled"  # R3.11
    if checkpoint_covers(session, turn):
        session.attention = None
        session.resumable = True
    else:
        # R3.12: the cancelled turn ran after the last checkpoint → context gap.
        session.attention = Attention(
            "CONTEXT_GAP",
            "no_checkpoint" if session.checkpoint is None else "turn_after_checkpoint",
        )
        session.resumable = False
