"""diagnose against the sandbox control host over HTTP, one test per runbook branch.

Worker logs come from the scenario's own lines, written to a file and read through FileLogSource.
Expected branches and decisions follow the runbook (R2.1–R2.16, R3.1–R3.12) and the API's acceptance
table; the scenario's state is what the sandbox serves.
"""

from __future__ import annotations

import pytest

from bot.diagnosis import Diagnosis
from bot.messages import Message

DECISIONS = {"retry_restore", "start_fresh", "abandon", "confirm_completed", "close", "resume"}


def run(env, scenario: str, session_id: str) -> tuple[Diagnosis, Message]:
    # The scenario file names the session: the test and the sandbox cannot drift apart.
    assert env.sandbox.scenarios[scenario].session_id == session_id
    env.write_worker_logs(session_id)
    diagnoser = env.diagnoser()
    reply = diagnoser.diagnose(session_id, "U_ONCALL")
    assert reply.ok and len(reply.messages) == 1
    diagnosis = diagnoser.gather(session_id)
    return diagnosis, reply.messages[0]


def invalid(diagnosis: Diagnosis) -> dict[str, str]:
    return {v.decision: v.text for v in diagnosis.evaluation.invalid_decisions}


def check_decisions(diagnosis: Diagnosis, message: Message, valid: list[str]) -> dict[str, str]:
    """Valid decisions are exactly ``valid`` (as buttons too); every other one comes with its reason."""
    assert diagnosis.evaluation.valid_decisions == valid
    reasons = invalid(diagnosis)
    assert set(reasons) == DECISIONS - set(valid)
    assert [b.label for b in message.buttons] == valid
    for name, text in reasons.items():
        reason = text.split(": ", 1)[1]
        # Each refused decision is shown with its reason: its own line, or (when one cause refuses
        # every decision) the one line naming them all.
        shown = f"  • {text}" in message.lines or any(
            line.startswith("No decision is valid now (") and name in line and line.endswith(reason)
            for line in message.lines
        )
        assert shown, (name, message.lines)
    return reasons


def test_restore_in_backoff_says_when_and_refuses_retry_and_start_fresh(env):
    diagnosis, message = run(env, "restore_backoff", "ses_restore_backoff")
    assert diagnosis.evaluation.branch_id == "restore_backoff"
    assert message.headline == "ses_restore_backoff: Restore failing, in backoff"
    assert {"R2.1", "R2.2", "R2.10"} <= set(message.rules)
    # R2.10: retry_restore and start_fresh get 409 REQUEST_STALE until the backoff ends; close stays.
    reasons = check_decisions(diagnosis, message, ["close"])
    assert reasons["retry_restore"] == "retry_restore: 409 REQUEST_STALE until the backoff ends at 10:00:20Z"
    assert reasons["start_fresh"] == "start_fresh: 409 REQUEST_STALE until the backoff ends at 10:00:20Z"
    assert diagnosis.facts["attention.retry_at"] == "2026-11-29T10:00:20.000Z"
    assert any("10:00:20Z" in line for line in message.lines)
    (button,) = message.buttons
    assert (button.action, button.value) == ("decide_form", "ses_restore_backoff|close")
    assert button.command == '/recover decide ses_restore_backoff close --reason "…"'


def test_restore_stopped_permanent_damage(env):
    diagnosis, message = run(env, "restore_stopped_damage", "ses_restore_damaged")
    assert diagnosis.evaluation.branch_id == "restore_permanent"
    assert diagnosis.facts["logs.permanent_damage"] is True
    assert {"R2.5", "R2.8", "R2.10"} <= set(message.rules)
    reasons = check_decisions(diagnosis, message, ["retry_restore", "start_fresh", "close"])
    assert "409 REQUEST_STALE" in reasons["abandon"]


def test_restore_stopped_transient_outage_is_not_damage(env):
    diagnosis, message = run(env, "restore_stopped_transient", "ses_restore_transient")
    assert diagnosis.evaluation.branch_id == "restore_transient"
    assert diagnosis.facts["logs.permanent_damage"] is False
    assert diagnosis.facts["logs.restore_unavailable"] > 0
    assert {"R2.6", "R2.7"} <= set(message.rules)
    check_decisions(diagnosis, message, ["retry_restore", "start_fresh", "close"])


def test_restore_stopped_execution_gone(env):
    diagnosis, message = run(env, "restore_execution_gone", "ses_restore_gone")
    assert diagnosis.evaluation.branch_id == "restore_execution_gone"
    assert diagnosis.facts["attention.reason"] == "execution_gone"
    assert "R2.2" in message.rules
    check_decisions(diagnosis, message, ["retry_restore", "start_fresh", "close"])


def test_incompatible_checkpoint(env):
    diagnosis, message = run(env, "incompatible", "ses_incompatible")
    assert diagnosis.evaluation.branch_id == "restore_incompatible"
    assert {"R2.3", "R2.4"} <= set(message.rules)
    assert diagnosis.facts["attention.failures"] == 1
    check_decisions(diagnosis, message, ["retry_restore", "start_fresh", "close"])


def test_startup_failure_in_backoff_with_likely_cause(env):
    diagnosis, message = run(env, "startup_backoff", "ses_startup_backoff")
    assert diagnosis.evaluation.branch_id == "startup_backoff"
    assert {"R2.12", "R2.13", "R2.14"} <= set(message.rules)
    reasons = check_decisions(diagnosis, message, ["close"])
    assert reasons["start_fresh"] == "start_fresh: 409 REQUEST_STALE until the backoff ends at 10:00:45Z"
    cause = diagnosis.facts["logs.likely_cause"]
    assert cause and cause in diagnosis.evaluation.explanation


def test_startup_failures_stopped(env):
    diagnosis, message = run(env, "startup_stopped", "ses_startup_stopped")
    assert diagnosis.evaluation.branch_id == "startup_stopped"
    assert diagnosis.facts["logs.stopping_failed"] > 0
    assert diagnosis.facts["logs.likely_cause"]
    reasons = check_decisions(diagnosis, message, ["start_fresh", "close"])
    assert "409 REQUEST_STALE" in reasons["retry_restore"]  # R2.10: STARTUP_FAILED with no restore


def test_outcome_unknown_worker_not_gone_then_confirmed_gone(env):
    diagnosis, message = run(env, "unknown_unanswered", "ses_unknown_unanswered")
    assert diagnosis.evaluation.branch_id == "outcome_unknown"
    assert {"R3.1", "R3.2", "R3.3", "R3.4", "R3.5", "R3.9", "R3.10", "R3.11"} <= set(message.rules)
    facts = diagnosis.facts
    # Classification from the turns endpoint (R3.1).
    assert facts["unknown_turn.id"] == "turn_uu5"
    assert facts["unknown_turn.terminal_reason"] == "interrupt_unanswered"
    assert facts["logs.engine_terminal_timeout"] is True and facts["logs.capture_timeout"] is True
    assert facts["logs.late_sdk_interrupt_answered"] is True
    assert facts["logs.control_result_reason_code"] == "deadline_exceeded"
    reasons = check_decisions(diagnosis, message, ["close"])
    # R3.9: abandon/confirm wait for the worker to be confirmed gone.
    assert "409 RECOVERY_REQUIRED" in reasons["abandon"]
    assert "409 RECOVERY_REQUIRED" in reasons["confirm_completed"]
    # R3.2: the timeline with elapsed_ms, missing stages, the late answer apart (R3.4), the reading (R3.5).
    text = message.plain_text()
    assert "     5003 ms  engine_terminal  outcome=timeout" in text
    assert "missing stages: sdk_interrupt_answered, finalize_started, finalize_finished" in text
    assert "late (R3.4, not in the sequence): late_sdk_interrupt_answered at 7210 ms" in text
    assert "budget_ms=30000: the checkpoint capture budget ran out (R3.5)" in text
    assert "reason_code=deadline_exceeded" in text
    assert any("R3.10" in step or "outside" in step for step in diagnosis.evaluation.next_steps)

    # The next scheduler pass confirms the worker gone: abandon becomes valid, with the turn flag.
    env.sandbox.admin.scheduler_pass()
    again = env.diagnoser().diagnose("ses_unknown_unanswered", "U_ONCALL").messages[0]
    labels = [b.label for b in again.buttons]
    assert "abandon" in labels and "close" in labels
    abandon = next(b for b in again.buttons if b.label == "abandon")
    assert abandon.value == "ses_unknown_unanswered|abandon"
    assert abandon.command.startswith("/recover decide ses_unknown_unanswered abandon --turn turn_uu5 ")
    assert abandon.command.endswith('--reason "…"')


def test_outcome_unknown_checkpoint_unavailable(env):
    diagnosis, message = run(env, "unknown_checkpoint_unavailable", "ses_unknown_ckpt_unavailable")
    assert diagnosis.evaluation.branch_id == "outcome_unknown"
    assert diagnosis.facts["unknown_turn.terminal_reason"] == "interrupt_checkpoint_unavailable"
    assert diagnosis.facts["unknown_turn.covered_by_checkpoint"] is False
    reasons = check_decisions(diagnosis, message, ["abandon", "close"])
    # R3.11: no committed checkpoint covers the turn.
    assert "409 CHECKPOINT_UNAVAILABLE" in reasons["confirm_completed"]
    assert "409 REQUEST_STALE" in reasons["start_fresh"]  # R3.8


def test_outcome_unknown_covered_by_checkpoint(env):
    diagnosis, message = run(env, "unknown_covered", "ses_unknown_covered")
    assert diagnosis.evaluation.branch_id == "outcome_unknown"
    assert diagnosis.facts["unknown_turn.covered_by_checkpoint"] is True
    check_decisions(diagnosis, message, ["abandon", "confirm_completed", "close"])
    confirm = next(b for b in message.buttons if b.label == "confirm_completed")
    assert "--turn turn_cv2" in confirm.command and "--evidence" in confirm.command


def test_context_gap(env):
    diagnosis, message = run(env, "context_gap", "ses_context_gap")
    assert diagnosis.evaluation.branch_id == "context_gap"
    assert "R3.12" in message.rules
    check_decisions(diagnosis, message, ["start_fresh", "close"])


@pytest.mark.parametrize(
    ("scenario", "session_id"),
    [
        ("stopped_resumable", "ses_stopped_resumable"),
        ("resume_reclaiming", "ses_resume_reclaiming"),
    ],
)
def test_stopped_and_resumable(env, scenario, session_id):
    diagnosis, message = run(env, scenario, session_id)
    assert diagnosis.evaluation.branch_id == "stopped_resumable"
    assert "R3.12" in message.rules
    check_decisions(diagnosis, message, ["close", "resume"])
    assert any("close (ends the session for good; it could simply be resumed)" in line for line in message.lines)
    button = message.buttons[1]
    assert (button.action, button.value, button.command) == (
        "resume",
        session_id,
        f"/recover resume {session_id}",
    )


def test_healthy(env):
    diagnosis, message = run(env, "healthy", "ses_healthy")
    assert diagnosis.evaluation.branch_id == "healthy"
    assert message.headline == "ses_healthy: Healthy"
    assert [b.label for b in message.buttons] == ["close"]  # R3.9: valid, with its consequence


def test_closed(env):
    diagnosis, message = run(env, "closed", "ses_closed")
    assert diagnosis.evaluation.branch_id == "closed"
    reasons = check_decisions(diagnosis, message, [])
    assert reasons["close"] == "close: 409 REQUEST_STALE the session is closed"


def test_unknown_session_is_a_plain_answer_outside_any_case(env):
    diagnoser = env.diagnoser()
    reply = diagnoser.diagnose("ses_does_not_exist", "U_ONCALL")
    (message,) = reply.messages
    assert message.headline == "ses_does_not_exist: Unknown session"
    assert message.buttons == []
    assert any("404 NOT_FOUND" in line for line in message.lines)
    # Recorded, but outside any case: a typo must not open a case.
    (step,) = [s for s in env.store.steps() if s.step == "diagnose"]
    assert step.session_id is None and step.inputs["session_id"] == "ses_does_not_exist"
    assert step.outcome == "unknown_session"
    assert env.store.list_open_cases() == []
