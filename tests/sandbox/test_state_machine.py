"""The runbook's state machine, including transitions no scenario contains (R2, R3, R4)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.clock import ManualClock, isoformat, parse_time
from bot.sandbox import SandboxAdminError, SandboxHandle
from tests.fixtures.sandbox import SandboxApi


def _events(api: SandboxApi, session_id: str, name: str) -> list[dict]:
    return [e for e in api.get(f"/v1/sessions/{session_id}/events").json()["events"] if e["name"] == name]


# ---------------------------------------------------------------- R2.1–R2.2, R2.9: restore failures and backoff


def test_restore_failures_backoff_limit_and_retry_restore_resets_the_count(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, clock: ManualClock
) -> None:
    sid = "ses_restore_backoff"
    start = sandbox_api.session(sid)
    assert start["attention"]["failures"] == 1
    retry_at = parse_time(start["attention"]["retry_at"])
    assert retry_at == clock.now() + timedelta(seconds=20)

    # In backoff there is no worker to fail, and nothing relaunches before retry_at (R2.1).
    with pytest.raises(SandboxAdminError) as refused:
        sandbox.admin.fail_restore(sid, "checkpoint_unavailable")
    assert refused.value.status == 409 and refused.value.code == "NO_WORKER"
    sandbox.admin.advance(19)
    assert sid not in sandbox.admin.scheduler_pass()["launched"]
    sandbox.admin.advance(1)
    rev = sandbox_api.session(sid)["revision"]
    assert sid in sandbox.admin.scheduler_pass()["launched"]
    relaunched = sandbox_api.session(sid)
    assert relaunched["execution"] == {"state": "running", "confirmed_gone_at": None, "generation": 2}
    assert relaunched["attention"]["failures"] == 1 and relaunched["attention"]["retry_at"] is None
    assert relaunched["status"] == "running" and relaunched["admission_state"] == "open"
    assert relaunched["revision"] > rev

    # 2nd failure: 60 s backoff.
    rev = relaunched["revision"]
    sandbox.admin.fail_restore(sid, "checkpoint_unavailable")
    second = sandbox_api.session(sid)
    assert second["attention"] == {
        "code": "RESTORE_FAILED",
        "reason": "checkpoint_unavailable",
        "failures": 2,
        "retry_at": isoformat(clock.now() + timedelta(seconds=60)),
    }
    assert second["admission_state"] == "open" and second["revision"] == rev + 1
    assert second["execution"]["state"] == "draining"  # ended, not yet confirmed gone
    # retry_restore is refused while in backoff (R2.10).
    assert sandbox_api.decide(sid, "retry_restore").status_code == 409
    sandbox.admin.advance(59)
    assert sid not in sandbox.admin.scheduler_pass()["launched"]
    sandbox.admin.advance(1)
    assert sid in sandbox.admin.scheduler_pass()["launched"]
    assert sandbox_api.session(sid)["execution"]["generation"] == 3

    # 3rd failure: stopped as recovery_required, retry_at null, no new generation (R2.1, R2.2).
    sandbox.admin.fail_restore(sid, "restore_refused")
    third = sandbox_api.session(sid)
    assert third["status"] == "failed" and third["admission_state"] == "recovery_required"
    assert third["attention"] == {
        "code": "RESTORE_FAILED",
        "reason": "restore_refused",
        "failures": 3,
        "retry_at": None,
    }
    sandbox.admin.advance(3600)
    assert sid not in sandbox.admin.scheduler_pass()["launched"]
    assert sandbox_api.session(sid)["execution"]["generation"] == 3
    events = _events(sandbox_api, sid, "checkpoint_restore_failed")
    assert [(e["failures"], e["reason"]) for e in events] == [
        (1, "checkpoint_unavailable"),
        (2, "checkpoint_unavailable"),
        (3, "restore_refused"),
    ]
    assert events[-1]["retry_at"] is None

    # R2.9: retry_restore resets the count; the next failure is the 1st again, with a 30 s backoff.
    accepted = sandbox_api.decide(sid, "retry_restore")
    assert accepted.status_code == 201
    # R5.1: acceptance is not recovery: the attention stays, count 0, until the next worker is ready.
    assert sandbox_api.session(sid)["attention"] == {
        "code": "RESTORE_FAILED",
        "reason": "restore_refused",
        "failures": 0,
        "retry_at": None,
    }
    sandbox.admin.fail_restore(sid, "restore_refused")
    again = sandbox_api.session(sid)["attention"]
    assert again["failures"] == 1
    assert again["retry_at"] == isoformat(clock.now() + timedelta(seconds=30))
    assert sandbox.admin.effect_count(sid) == 1


def test_a_worker_that_reports_ready_resets_the_failures(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sid = "ses_restore_backoff"
    sandbox.admin.advance(20)
    sandbox.admin.scheduler_pass()
    sandbox.admin.worker_ready(sid)
    session = sandbox_api.session(sid)
    assert session["attention"] is None and session["status"] == "running"
    with pytest.raises(SandboxAdminError) as exc:
        sandbox.admin.fail_restore(sid, "late")  # a ready worker can no longer fail its restore
    assert exc.value.code == "NOT_STARTING"


def test_incompatible_checkpoint_stops_at_once_with_failures_1(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    """R2.3: deterministic; no backoff even on a first failure. R2.4: retry_restore is allowed again."""
    sid = "ses_incompatible"
    assert sandbox_api.decide(sid, "retry_restore").status_code == 201
    sandbox.admin.fail_restore(sid, "incompatible_checkpoint")
    session = sandbox_api.session(sid)
    assert session["attention"] == {
        "code": "RESTORE_FAILED",
        "reason": "incompatible_checkpoint",
        "failures": 1,
        "retry_at": None,
    }
    assert session["admission_state"] == "recovery_required" and session["status"] == "failed"
    event = _events(sandbox_api, sid, "checkpoint_restore_failed")[-1]
    assert (event["reason"], event["failures"], event["retry_at"]) == ("incompatible_checkpoint", 1, None)
    assert sid not in sandbox.admin.scheduler_pass()["launched"]
    assert sandbox_api.decide(sid, "retry_restore").status_code == 201
    logs = [line["text"] for line in sandbox.admin.worker_logs(sid)]
    assert sum("INCOMPATIBLE_CHECKPOINT" in line for line in logs) >= 2


# ---------------------------------------------------------------- R2.6–R2.7: transient store outages


def test_store_outage_within_the_budget_counts_nothing_and_the_same_worker_goes_on(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sid = "ses_restore_backoff"
    sandbox.admin.advance(20)
    sandbox.admin.scheduler_pass()  # generation 2 is restoring
    before = sandbox_api.session(sid)
    sandbox.admin.store_outage(sid, True)
    with pytest.raises(SandboxAdminError) as exc:
        sandbox.admin.worker_ready(sid)  # cannot finish a restore while the store is out
    assert exc.value.code == "STORE_OUTAGE"
    sandbox.admin.advance(3599)
    sandbox.admin.scheduler_pass()
    during = sandbox_api.session(sid)
    assert during["attention"]["failures"] == before["attention"]["failures"] == 1
    assert during["execution"]["generation"] == before["execution"]["generation"]
    assert during["execution"]["state"] == "running"
    sandbox.admin.store_outage(sid, False)
    sandbox.admin.worker_ready(sid)
    after = sandbox_api.session(sid)
    assert after["attention"] is None and after["execution"]["generation"] == before["execution"]["generation"]
    lines = [line["text"] for line in sandbox.admin.worker_logs(sid)]
    assert any("worker.checkpoint.restore_unavailable" in line for line in lines)
    assert len(_events(sandbox_api, sid, "checkpoint_restore_failed")) == 1  # only the scenario's


def test_store_outage_beyond_the_budget_is_one_failure_each_time_with_backoff(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, clock: ManualClock
) -> None:
    """R2.7: each worker's exit after the whole startup budget is ONE failure; never unbounded restarts."""
    sid = "ses_incompatible"
    sandbox_api.decide(sid, "retry_restore")
    launched_at = clock.now()
    sandbox.admin.store_outage(sid, True)
    sandbox.admin.advance(7200)  # far beyond the budget: still exactly one failure, timed at the deadline
    first = sandbox_api.session(sid)["attention"]
    assert first["failures"] == 1 and first["reason"] == "restore_unavailable"
    assert first["retry_at"] == isoformat(launched_at + timedelta(seconds=3600 + 30))
    assert sid in sandbox.admin.scheduler_pass()["launched"]
    sandbox.admin.advance(3600)
    second = sandbox_api.session(sid)["attention"]
    assert second["failures"] == 2 and second["retry_at"] is not None
    sandbox.admin.advance(60)
    assert sid in sandbox.admin.scheduler_pass()["launched"]
    sandbox.admin.advance(3600)
    third = sandbox_api.session(sid)
    assert third["attention"]["failures"] == 3 and third["attention"]["retry_at"] is None
    assert third["admission_state"] == "recovery_required"
    sandbox.admin.advance(86400)
    assert sid not in sandbox.admin.scheduler_pass()["launched"]
    # Three workers in all after retry_restore (generations 2, 3, 4), never more.
    assert sandbox_api.session(sid)["execution"]["generation"] == 4
    lines = [line["text"] for line in sandbox.admin.worker_logs(sid)]
    assert sum("startup timeout after 3600s" in line for line in lines) == 3


def test_store_outage_without_checkpoint_is_a_startup_failure(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sid = "ses_startup_backoff"
    sandbox.admin.advance(45)
    sandbox.admin.scheduler_pass()
    sandbox.admin.store_outage(sid, True)
    sandbox.admin.advance(3600)
    session = sandbox_api.session(sid)
    assert session["attention"]["code"] == "STARTUP_FAILED"
    assert session["attention"]["reason"] == "store_unavailable"
    assert session["attention"]["failures"] == 3
    lines = [line["text"] for line in sandbox.admin.worker_logs(sid)]
    assert any("worker.checkpoint.store_unavailable" in line for line in lines)
    assert not any("restore_unavailable" in line for line in lines)


# ---------------------------------------------------------------- R2.12–R2.14: startup failures


def test_startup_failures_stop_at_the_third_and_start_fresh_relaunches(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sid = "ses_startup_backoff"
    sandbox.admin.advance(44)
    assert sid not in sandbox.admin.scheduler_pass()["launched"]
    sandbox.admin.advance(1)
    assert sid in sandbox.admin.scheduler_pass()["launched"]
    sandbox.admin.fail_startup(sid, "workspace_prepare_failed", "git clone failed: repository not found")
    session = sandbox_api.session(sid)
    assert session["attention"]["code"] == "STARTUP_FAILED" and session["attention"]["failures"] == 3
    assert session["attention"]["retry_at"] is None and session["admission_state"] == "recovery_required"
    assert len(_events(sandbox_api, sid, "startup_failed")) == 3
    assert sandbox_api.decide(sid, "retry_restore").status_code == 409  # R2.10: no restore involved
    assert sandbox_api.decide(sid, "start_fresh").status_code == 201  # R2.14
    fresh = sandbox_api.session(sid)
    assert fresh["attention"]["failures"] == 0 and fresh["execution"]["state"] == "running"
    sandbox.admin.fail_startup(sid, "workspace_prepare_failed")
    assert sandbox_api.session(sid)["attention"]["failures"] == 1
    logs = [line["text"] for line in sandbox.admin.worker_logs(sid)]
    assert any(line.startswith("worker.stopping kind=failed session_id=ses_startup_backoff") for line in logs)


# ---------------------------------------------------------------- R3.1, R3.7, R3.9: interrupts


@pytest.mark.parametrize(
    ("terminal_reason", "api_state"),
    [("interrupt_unanswered", "running"), ("interrupt_checkpoint_unavailable", "draining")],
)
def test_interrupt_makes_an_outcome_unknown_turn_and_waits_for_the_scheduler(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, terminal_reason: str, api_state: str
) -> None:
    sid = "ses_healthy"
    result = sandbox.admin.interrupt(sid, terminal_reason)
    turn_id = result["turn"]["id"]
    assert turn_id == "turn_h3"  # the running turn
    turn = sandbox_api.get(f"/v1/sessions/{sid}/turns/{turn_id}").json()
    assert turn["status"] == "outcome_unknown" and turn["terminal_reason"] == terminal_reason
    assert turn["control_id"] and turn["ended_at"]
    session = sandbox_api.session(sid)
    assert session["status"] == "failed" and session["admission_state"] == "recovery_required"  # R3.7
    assert session["attention"] == {
        "code": "OUTCOME_UNKNOWN",
        "reason": terminal_reason,
        "failures": None,
        "retry_at": None,
    }
    assert session["execution"]["state"] == api_state
    refused = sandbox_api.decide(sid, "abandon", target_turn_id=turn_id)
    assert refused.json()["error"]["code"] == "RECOVERY_REQUIRED"
    sandbox.admin.scheduler_pass()
    assert sandbox_api.decide(sid, "abandon", target_turn_id=turn_id).status_code == 201
    logs = [line["text"] for line in sandbox.admin.worker_logs(sid)]
    stages = [line for line in logs if "worker.turn.interrupt.stage" in line and turn_id in line]
    assert any('"stage":"control_received"' in line and '"elapsed_ms":0' in line for line in stages)
    assert any('"event":"control.result"' in line and '"outcome":"unknown"' in line for line in logs)
    if terminal_reason == "interrupt_unanswered":
        assert any("gave no terminal within 5000ms of its interrupt" in line for line in logs)
    else:
        assert any('"stage":"finalize_finished"' in line and "CHECKPOINT_UNAVAILABLE" in line for line in stages)


def test_clean_interrupt_needs_both_engine_answer_and_checkpoint(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    with pytest.raises(SandboxAdminError):
        sandbox.admin.interrupt("ses_healthy", None, checkpoint_committed=False)
    with pytest.raises(SandboxAdminError):
        sandbox.admin.interrupt("ses_healthy", "interrupt_checkpoint_unavailable", checkpoint_committed=True)
    result = sandbox.admin.interrupt("ses_healthy", None, checkpoint_committed=True)
    assert result["turn"]["status"] == "interrupted"
    session = sandbox_api.session("ses_healthy")
    assert session["checkpoint"]["covers_turn_id"] == result["turn"]["id"]
    assert session["admission_state"] == "open" and session["attention"] is None


def test_unknown_turn_is_never_rerun_when_the_store_comes_back(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    """R0.3, R3.8: outages ending, time passing and scheduler passes leave the turn and queue alone."""
    sid = "ses_unknown_unanswered"
    sandbox.admin.store_outage(sid, True)
    sandbox.admin.advance(7200)
    sandbox.admin.store_outage(sid, False)
    for _ in range(3):
        sandbox.admin.scheduler_pass()
        sandbox.admin.advance(3600)
    session = sandbox_api.session(sid)
    assert session["admission_state"] == "recovery_required" and session["queued_inputs"] == 2
    assert session["execution"]["state"] == "gone" and session["execution"]["generation"] == 1
    unknown = sandbox_api.get(f"/v1/sessions/{sid}/turns", status="outcome_unknown").json()["turns"]
    assert [t["id"] for t in unknown] == ["turn_uu5"]
    with pytest.raises(SandboxAdminError):
        sandbox.admin.start_turn(sid)


def test_interrupt_with_committed_checkpoint_lets_confirm_completed_and_resume(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sid = "ses_healthy"
    turn_id = sandbox.admin.interrupt(sid, "interrupt_unanswered", checkpoint_committed=True)["turn"]["id"]
    sandbox.admin.scheduler_pass()
    confirmed = sandbox_api.decide(sid, "confirm_completed", target_turn_id=turn_id, evidence_ref="audit-7")
    assert confirmed.status_code == 201 and confirmed.json()["result"]["resumable"] is True
    resumed = sandbox_api.resume(sid)
    assert resumed.status_code == 200
    assert resumed.json()["session"]["status"] == "running"


# ---------------------------------------------------------------- R3.11–R3.12: abandon, resumable, CONTEXT_GAP


def test_abandon_after_the_last_checkpoint_leaves_a_context_gap(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sid = "ses_unknown_ckpt_unavailable"
    response = sandbox_api.decide(sid, "abandon", target_turn_id="turn_uc3")
    assert response.status_code == 201
    receipt = response.json()
    assert receipt["result"] == {"resumable": False}
    assert receipt["session"]["status"] == "stopped"
    session = sandbox_api.session(sid)
    assert session["attention"]["code"] == "CONTEXT_GAP" and session["resumable"] is False
    turn = sandbox_api.get(f"/v1/sessions/{sid}/turns/turn_uc3").json()
    assert turn["status"] == "cancelled"
    resume = sandbox_api.resume(sid)
    assert (resume.status_code, resume.json()["error"]["code"]) == (409, "REQUEST_STALE")
    assert sandbox_api.decide(sid, "start_fresh").status_code == 201  # R3.12


def test_abandon_of_a_turn_the_checkpoint_covers_is_resumable(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    response = sandbox_api.decide("ses_unknown_covered", "abandon", target_turn_id="turn_cv2")
    assert response.status_code == 201
    assert response.json()["result"] == {"resumable": True}
    assert sandbox_api.session("ses_unknown_covered")["attention"] is None


def test_abandon_without_any_checkpoint_is_a_context_gap(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sandbox.admin.create_session(
        {
            "session": {"id": "ses_new_1", "status": "running", "execution": {"state": "running"}},
            "turns": [{"id": "turn_n1", "status": "running"}],
        }
    )
    sandbox.admin.interrupt("ses_new_1", "interrupt_checkpoint_unavailable")
    sandbox.admin.scheduler_pass()
    response = sandbox_api.decide("ses_new_1", "abandon", target_turn_id="turn_n1")
    assert response.json()["result"] == {"resumable": False}
    assert sandbox_api.session("ses_new_1")["attention"] == {
        "code": "CONTEXT_GAP",
        "reason": "no_checkpoint",
        "failures": None,
        "retry_at": None,
    }


# ---------------------------------------------------------------- R4.2: resume and reclamation


def test_resume_during_reclamation_is_503_with_no_record_then_the_same_request_succeeds(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sid = "ses_resume_reclaiming"
    first = sandbox_api.resume(sid, key="resume-key-1")
    assert first.status_code == 503
    assert first.json()["error"] == {
        "code": "BACKEND_UNAVAILABLE",
        "message": first.json()["error"]["message"],
        "retryable": True,
    }
    assert sandbox.admin.idempotency_records(sid) == []
    assert sandbox.admin.effect_count(sid) == 0
    again = sandbox_api.resume(sid, key="resume-key-1")
    assert again.status_code == 503
    sandbox.admin.reclamation(sid, False)
    done = sandbox_api.resume(sid, key="resume-key-1")
    assert done.status_code == 200
    receipt = done.json()
    assert receipt["status"] == "accepted" and receipt["session"]["status"] == "running"
    assert sandbox.admin.effect_count(sid) == 1
    replay = sandbox_api.resume(sid, key="resume-key-1")
    assert replay.status_code == 200 and replay.json() == receipt
    assert sandbox.admin.effect_count(sid) == 1
    assert [r["key"] for r in sandbox.admin.idempotency_records(sid)] == ["resume-key-1"]


def test_resume_is_refused_unless_stopped_and_resumable(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    for sid in ("ses_healthy", "ses_context_gap", "ses_unknown_covered", "ses_restore_damaged", "ses_closed"):
        response = sandbox_api.resume(sid)
        assert (response.status_code, response.json()["error"]["code"]) == (409, "REQUEST_STALE"), sid
    ok = sandbox_api.resume("ses_stopped_resumable")
    assert ok.status_code == 200
    session = sandbox_api.session("ses_stopped_resumable")
    assert session["status"] == "running" and session["resumable"] is False
    assert session["execution"]["generation"] == 2
    assert sandbox_api.resume("ses_stopped_resumable").status_code == 409  # new key: not resumable any more


def test_resume_body_is_validated_before_reclamation(sandbox_api: SandboxApi) -> None:
    response = sandbox_api.post("/v1/sessions/ses_resume_reclaiming/resume", {"reason": "x", "force": True})
    assert response.status_code == 400
