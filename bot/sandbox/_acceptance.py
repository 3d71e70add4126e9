"""Which recovery decision, and which resume, the host accepts in which state: the acceptance table.

docs/control-host-api.md's table (which mirrors the seed's R2.9–R2.11, R3.8–R3.12, R4.1–R4.2), checked
in its order: a malformed body is a 400 before any state is looked at, then the revision, then each
decision's own rule. Only checks live here; what an accepted decision does is ``_decisions``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.clock import isoformat
from bot.sandbox._wire import ApiError, Session, Turn

DECISIONS = ("retry_restore", "start_fresh", "abandon", "confirm_completed", "close")
_DECISION_FIELDS = {"decision", "expected_revision", "reason", "target_turn_id", "evidence_ref"}
_RESUME_FIELDS = {"reason"}


@dataclass(frozen=True)
class DecisionRequest:
    """A well-formed decision body (see :func:`read_decision`)."""

    decision: str
    expected_revision: int
    target_turn_id: str | None
    evidence_ref: str | None


def _bad(message: str) -> ApiError:
    return ApiError(400, "BAD_REQUEST", message)


def _stale(message: str) -> ApiError:
    return ApiError(409, "REQUEST_STALE", message)


def _object(body: Any, fields: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad("The body must be a JSON object.")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise _bad(f"Unknown fields: {', '.join(unknown)}.")
    return body


def read_decision(body: Any) -> DecisionRequest:
    """The body's 400s, in the table's order, before any state is looked at."""
    body = _object(body, _DECISION_FIELDS)
    decision = body.get("decision")
    reason = body.get("reason")
    target = body.get("target_turn_id")
    evidence = body.get("evidence_ref")
    expected = body.get("expected_revision")
    if decision not in DECISIONS:
        raise _bad(f"decision must be one of {', '.join(DECISIONS)}.")
    if not isinstance(reason, str) or not reason.strip():
        raise _bad("reason is required (free text for the records).")
    if expected is None:
        # The runbook's decision body always carries it: a client that drops it must not pass.
        raise _bad("expected_revision is required (the session's current revision).")
    if not isinstance(expected, int) or isinstance(expected, bool):
        raise _bad("expected_revision must be an integer.")
    for name, value in (("target_turn_id", target), ("evidence_ref", evidence)):
        if value is not None and not isinstance(value, str):
            raise _bad(f"{name} must be a string.")
    if decision in {"abandon", "confirm_completed"} and not target:
        raise _bad(f"{decision} needs target_turn_id.")
    if decision == "confirm_completed" and not evidence:
        raise _bad("confirm_completed needs evidence_ref.")
    return DecisionRequest(decision, expected, target, evidence)


def accept_decision(session: Session, request: DecisionRequest) -> Turn | None:
    """Refuse the decision unless the session's state accepts it; the decided turn for abandon and
    confirm_completed (else None)."""
    if request.expected_revision != session.revision:
        raise _stale(f"expected_revision {request.expected_revision} is not current ({session.revision}).")
    if session.status == "closed" or session.admission_state == "closed":
        raise _stale("The session is closed.")
    if request.decision == "retry_restore":
        _accept_retry_restore(session)
    elif request.decision == "start_fresh":
        _accept_start_fresh(session)
    if request.decision not in {"abandon", "confirm_completed"}:
        return None
    turn = session.turn(str(request.target_turn_id))
    if turn is None:
        raise ApiError(404, "NOT_FOUND", f"No turn {request.target_turn_id!r} in session {session.id!r}.")
    if turn.status != "outcome_unknown":
        raise _stale(f"Turn {turn.id} is {turn.status}, not outcome_unknown.")
    if session.execution is None or session.execution.state != "gone" or session.execution.strays:
        # R3.9: a stray container of the session that no pass has removed yet also counts.
        raise ApiError(409, "RECOVERY_REQUIRED", "The previous execution has not been confirmed gone.")
    if request.decision == "confirm_completed" and (
        session.checkpoint is None or session.checkpoint.covers_turn_id != turn.id
    ):
        # R3.11
        raise ApiError(409, "CHECKPOINT_UNAVAILABLE", "No committed checkpoint covers this turn.")
    return turn


def _accept_retry_restore(session: Session) -> None:
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
        raise _stale(
            f"retry_restore refused: outcome_unknown turn {unknown.id} heads the queue; "
            "decide it first (abandon, confirm_completed or close)."
        )
    if attention is not None and attention.retry_at is not None:
        raise _stale(f"retry_restore refused: the session is in backoff until {isoformat(attention.retry_at)}.")
    if attention is not None and attention.code == "CONTEXT_GAP":
        raise _stale("retry_restore refused: the session stopped with a context gap, not a restore.")
    if attention is not None and attention.code == "STARTUP_FAILED":
        raise _stale("retry_restore refused: STARTUP_FAILED without a restore; there is nothing to retry.")
    if not (
        attention is not None and attention.code == "RESTORE_FAILED" and session.admission_state == "recovery_required"
    ):
        raise _stale(
            "retry_restore is accepted only for a session stopped at the restore-failure limit "
            "(recovery_required, attention RESTORE_FAILED, retry_at null)."
        )
    if session.checkpoint is None:
        raise _stale("retry_restore refused: the session has no checkpoint to restore.")


def _accept_start_fresh(session: Session) -> None:
    """start_fresh: a session stopped at a failure limit, or stopped with nothing to continue from.

    R2.11 / R2.14 (stopped at a restore or startup limit), R3.12 (stopped and not resumable: no
    checkpoint to continue from, or a context gap). Refused while an outcome_unknown turn heads the
    queue (R3.8) and in backoff (R2.10).
    """
    attention = session.attention
    unknown = session.unknown_turn()
    if unknown is not None:
        raise _stale(
            f"start_fresh refused: outcome_unknown turn {unknown.id} heads the queue; decide it first "
            "(abandon, confirm_completed or close)."
        )
    if attention is not None and attention.retry_at is not None:
        raise _stale(f"start_fresh refused: the session is in backoff until {isoformat(attention.retry_at)}.")
    at_limit = (
        session.admission_state == "recovery_required"
        and attention is not None
        and attention.code in {"RESTORE_FAILED", "STARTUP_FAILED"}
    )
    stopped_without_context = session.status == "stopped" and session.resumable is not True
    if not (at_limit or stopped_without_context):
        raise _stale(
            "start_fresh is accepted only for a session stopped at a failure limit, or stopped and not "
            f"resumable; this one is {session.status}, admission {session.admission_state}, "
            f"resumable {json.dumps(session.resumable)}."
        )


def checkpoint_covers(session: Session, turn: Turn) -> bool:
    """Whether the committed checkpoint was taken at or after ``turn`` (R3.11, R3.12)."""
    checkpoint = session.checkpoint
    if checkpoint is None or checkpoint.covers_turn_id is None:
        return False
    ids = [t.id for t in session.turns]
    if checkpoint.covers_turn_id not in ids:
        return False
    return ids.index(checkpoint.covers_turn_id) >= ids.index(turn.id)


def read_resume(body: Any) -> None:
    """The resume body's 400s; they precede the reclamation check (a bad body is a 400, not a 503)."""
    body = _object(body, _RESUME_FIELDS)
    if body.get("reason") is not None and not isinstance(body["reason"], str):
        raise _bad("reason must be a string.")


def accept_resume(session: Session) -> None:
    """Refuse the resume unless the session is stopped, resumable and has a checkpoint (R4.1, R4.2)."""
    if session.reclamation_claim:
        # R4.2: no receipt and no idempotency record: the same request is simply retried later.
        raise ApiError(
            503,
            "BACKEND_UNAVAILABLE",
            "A workspace-reclamation claim is held; retry later.",
            retryable=True,
        )
    if session.status != "stopped" or session.resumable is not True:
        raise _stale("resume is accepted only for a stopped, resumable session.")
    if session.checkpoint is None:
        # R4.1: a stopped session with no committed checkpoint cannot be resumed, whatever its
        # resumable flag says; what lived only on the volume is not a context to continue from.
        raise ApiError(
            409,
            "CHECKPOINT_UNAVAILABLE",
            "resume refused: the session has no committed checkpoint to continue from (R4.1).",
        )
