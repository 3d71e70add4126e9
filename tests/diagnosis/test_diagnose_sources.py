"""Slow, unreachable and unconfigured sources; YAML-only edits; the recorded step."""

from __future__ import annotations

import re
import time

import pytest

from bot.diagnosis import ReconcilerStatus
from bot.errors import CommandError


def shorter_budget(text: str) -> str:
    # Only a copy of the YAML is edited: a shorter diagnose budget.
    return re.sub(r"diagnose_budget: \{duration: [^,]+,", "diagnose_budget: {duration: 1s,", text, count=1)


def test_slow_events_source_is_reported_while_the_others_decide(env):
    session_id = "ses_restore_backoff"
    env.write_worker_logs(session_id)
    runbooks = env.runbook_copy(shorter_budget)
    assert runbooks.limit("diagnose_budget") == 1.0
    latency = 2.5
    path = f"/v1/sessions/{session_id}/events*"
    env.sandbox.admin.fault("latency", path, method="GET", times=1, seconds=latency)
    diagnoser = env.diagnoser(runbooks=runbooks)
    started = time.monotonic()
    reply = diagnoser.diagnose(session_id, "U_ONCALL")
    elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"diagnose waited {elapsed:.1f}s for a slow source; the budget is 1 s"
    (message,) = reply.messages
    step = env.store.steps(session_id)[-1]
    facts = step.detail
    assert facts["source.events"] == "slow"
    assert facts["events.restore_failed"] is None  # unknown, not zero
    assert facts["source.session"] == "ok" and facts["source.logs"] == "ok"
    # The other sources' facts still decide the branch.
    assert step.outcome == "restore_backoff"
    assert message.headline == "ses_restore_backoff: Restore failing, in backoff"
    slow = [line for line in message.lines if line.startswith("[!] Source events was slow")]
    assert slow and "1 s" in slow[0]
    # Let the abandoned request finish before the sandbox stops (no broken pipe at teardown).
    time.sleep(max(0.0, latency - (time.monotonic() - started)) + 0.2)


def test_unreachable_log_source(env):
    session_id = "ses_restore_damaged"
    diagnoser = env.diagnoser(log_glob=str(env.tmp / "no-such-dir" / "*.log"))
    diagnosis = diagnoser.gather(session_id)
    logs = diagnosis.source("logs")
    assert logs is not None and logs.state == "unreachable"
    assert "No log file matches" in (logs.detail or "")
    assert diagnosis.facts["logs.permanent_damage"] is None and diagnosis.facts["logs.lines"] is None
    # Without the logs the runbook cannot tell damage from an outage: the generic stopped branch.
    assert diagnosis.evaluation.branch_id == "restore_stopped"
    assert diagnosis.evaluation.valid_decisions == ["retry_restore", "start_fresh", "close"]
    message = diagnoser.diagnose(session_id, "U_ONCALL").messages[0]
    prefix = "[!] Source logs was unreachable: No log file matches"
    assert any(line.startswith(prefix) for line in message.lines)


def test_unreachable_control_host_leaves_the_answer_unclassified(env):
    env.sandbox.admin.fault(
        "server_error", "/v1/sessions/ses_unknown_covered/turns*", method="GET", times=5, status=503
    )
    env.write_worker_logs("ses_unknown_covered")
    diagnosis = env.diagnoser().gather("ses_unknown_covered")
    assert diagnosis.source("turns").state == "unreachable"
    assert diagnosis.facts["unknown_turn.present"] is None
    # R0.3 / R3.1: without the turns endpoint an outcome_unknown turn cannot be ruled out.
    assert diagnosis.evaluation.branch_id == "unclassified"
    assert diagnosis.evaluation.valid_decisions == ["close"]  # close needs no turn (R3.9)


def test_sources_not_configured(env):
    diagnoser = env.diagnoser(logs=False)
    diagnoser.reconciler_status = None
    diagnosis = diagnoser.gather("ses_incompatible")
    assert diagnosis.source("logs").state == "not_configured"
    assert diagnosis.source("reconciler").state == "not_configured"
    assert diagnosis.facts["reconciler.last_pass"] is None
    assert diagnosis.degraded_sources == []  # a setup choice, not a fault
    # The incompatible branch needs no log facts.
    assert diagnosis.evaluation.branch_id == "restore_incompatible"


def test_reconciler_status_becomes_facts(env):
    class Failed:
        def read_status(self) -> ReconcilerStatus:
            return ReconcilerStatus(last_pass="failed", last_pass_at="2026-11-29T09:58:00Z", raw="{}")

    diagnosis = env.diagnoser(reconciler=Failed()).gather("ses_healthy")
    assert diagnosis.facts["reconciler.last_pass"] == "failed"
    assert diagnosis.facts["reconciler.last_pass_at"] == "2026-11-29T09:58:00.000Z"
    assert diagnosis.source("reconciler").state == "ok"


def test_yaml_edit_alone_changes_the_valid_decisions(env):
    session_id = "ses_incompatible"
    before = env.diagnoser().gather(session_id)
    assert before.evaluation.valid_decisions == ["retry_restore", "start_fresh", "close"]

    def drop_start_fresh(text: str) -> str:
        head, sep, tail = text.partition("  - id: restore_incompatible\n")
        tail = tail.replace("decisions: [retry_restore, start_fresh, close]", "decisions: [retry_restore, close]", 1)
        return head + sep + tail

    edited = env.runbook_copy(drop_start_fresh)
    reply = env.diagnoser(runbooks=edited).diagnose(session_id, "U_ONCALL")
    (message,) = reply.messages
    assert [b.label for b in message.buttons] == ["retry_restore", "close"]
    assert any(line.startswith("  • start_fresh: not advised in this branch") for line in message.lines)


def test_each_diagnose_is_a_step_of_the_session_case(env):
    session_id = "ses_unknown_covered"
    env.write_worker_logs(session_id)
    diagnoser = env.diagnoser()
    diagnoser.diagnose(session_id, "U_ONE")
    diagnoser.diagnose(session_id, "U_TWO")
    steps = [s for s in env.store.steps(session_id) if s.step == "diagnose"]
    assert [(s.actor, s.outcome) for s in steps] == [
        ("U_ONE", "outcome_unknown"),
        ("U_TWO", "outcome_unknown"),
    ]
    case = env.store.get_open_case(session_id)
    assert case is not None and {s.case_id for s in steps} == {case.id}
    assert steps[0].inputs == {"session_id": session_id, "gathered_at": "2026-11-29T10:00:00.000Z"}
    detail = steps[0].detail
    assert detail["unknown_turn.id"] == "turn_cv2"
    assert detail["unknown_turn.covered_by_checkpoint"] is True
    assert detail["source.logs"] == "ok"
    assert set(detail) >= {"now", "session.id", "logs.lines", "reconciler.last_pass"}


def test_bad_session_id_never_reaches_a_url(env):
    with pytest.raises(CommandError) as info:
        env.diagnoser().diagnose("../admin", "U_ONCALL")
    assert "not a session id" in str(info.value)
    assert env.sandbox.admin.requests() == []
