"""Every row of docs/control-host-api.md's acceptance table, over real HTTP, in the order the page checks them."""

from __future__ import annotations

import pytest

from bot.sandbox import SandboxHandle, builtin_scenarios_dir, load_scenarios
from tests.fixtures.sandbox import SandboxApi


def _code(response) -> str:  # type: ignore[no-untyped-def]
    return response.json()["error"]["code"]


# ---------------------------------------------------------------- row 1: 400 BAD_REQUEST


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"decision": "close"}, "reason missing"),
        ({"decision": "close", "reason": "   "}, "reason blank"),
        ({"decision": "reboot", "reason": "x"}, "unknown decision"),
        ({"reason": "x"}, "decision missing"),
        ({"decision": "confirm_completed", "reason": "x", "target_turn_id": "turn_cv2"}, "no evidence_ref"),
        ({"decision": "abandon", "reason": "x"}, "abandon without target_turn_id"),
        ({"decision": "confirm_completed", "reason": "x", "evidence_ref": "e"}, "confirm without target"),
        ({"decision": "close", "reason": "x", "stop_kind": "drain"}, "unknown field (strict schema)"),
        ({"decision": "close", "reason": "x", "expected_revision": "15"}, "revision not an integer"),
        (["close"], "not an object"),
    ],
)
def test_bad_request_rows(sandbox: SandboxHandle, sandbox_api: SandboxApi, body: object, why: str) -> None:
    before = sandbox_api.session("ses_unknown_covered")
    response = sandbox_api.post("/v1/sessions/ses_unknown_covered/recovery-decisions", body)
    assert response.status_code == 400, why
    assert _code(response) == "BAD_REQUEST"
    assert response.json()["error"]["retryable"] is False
    assert sandbox_api.session("ses_unknown_covered") == before
    assert sandbox.admin.effect_count("ses_unknown_covered") == 0


def test_bad_request_is_checked_before_a_stale_revision(sandbox_api: SandboxApi) -> None:
    response = sandbox_api.decide("ses_unknown_covered", "abandon", expected_revision=1)  # stale AND no target
    assert (response.status_code, _code(response)) == (400, "BAD_REQUEST")


def test_post_without_idempotency_key_or_json_is_refused(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    url = "/v1/sessions/ses_closed/recovery-decisions"
    no_key = sandbox_api.client.post(url, json={"decision": "close", "reason": "x"})
    assert (no_key.status_code, _code(no_key)) == (400, "BAD_REQUEST")
    assert "Idempotency-Key" in no_key.json()["error"]["message"]
    not_json = sandbox_api.client.post(
        url,
        content=b"{not json",
        headers={"Idempotency-Key": "k-bad-json", "Content-Type": "application/json"},
    )
    assert (not_json.status_code, _code(not_json)) == (400, "BAD_REQUEST")
    form = sandbox_api.client.post(url, data={"decision": "close"}, headers={"Idempotency-Key": "k-form"})
    assert (form.status_code, _code(form)) == (400, "BAD_REQUEST")


# ---------------------------------------------------------------- row 2: stale expected_revision


def test_stale_expected_revision(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    current = sandbox_api.session("ses_incompatible")["revision"]
    for stale in (current - 1, current + 1):
        response = sandbox_api.decide("ses_incompatible", "retry_restore", expected_revision=stale)
        assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert sandbox.admin.effect_count("ses_incompatible") == 0
    ok = sandbox_api.decide("ses_incompatible", "retry_restore", expected_revision=current)
    assert ok.status_code == 201
    assert ok.json()["session"]["revision"] == current + 1


def test_revision_moves_on_a_scheduler_pass_so_an_old_revision_goes_stale(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    """R3.9 + API page: confirming the worker gone bumps the revision; a decision read before it is stale."""
    before = sandbox_api.session("ses_unknown_unanswered")["revision"]
    result = sandbox.admin.scheduler_pass()
    assert "ses_unknown_unanswered" in result["confirmed_gone"]
    assert sandbox_api.session("ses_unknown_unanswered")["revision"] == before + 1
    stale = sandbox_api.decide("ses_unknown_unanswered", "abandon", expected_revision=before, target_turn_id="turn_uu5")
    assert (stale.status_code, _code(stale)) == (409, "REQUEST_STALE")


# ---------------------------------------------------------------- row 3: closed


@pytest.mark.parametrize("decision", ["close", "retry_restore", "start_fresh", "abandon", "confirm_completed"])
def test_every_decision_on_a_closed_session_is_stale(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, decision: str
) -> None:
    response = sandbox_api.decide("ses_closed", decision, target_turn_id="turn_cl3", evidence_ref="ticket-1")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert sandbox.admin.effect_count("ses_closed") == 0


# ---------------------------------------------------------------- row 4: close accepted in any other state

NOT_CLOSED = sorted(s.session_id for s in load_scenarios(builtin_scenarios_dir()) if s.session_id != "ses_closed")


@pytest.mark.parametrize("session_id", NOT_CLOSED)
def test_close_is_accepted_in_any_state_but_closed(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str
) -> None:
    """R3.9: "close는 기다리지 않는다" — close is accepted at any time before the session is closed,
    including a worker not yet confirmed gone, backoff, relaunched, resumable and healthy sessions."""
    before = sandbox_api.session(session_id)
    response = sandbox_api.decide(session_id, "close")
    assert response.status_code == 201, response.text
    receipt = response.json()
    assert receipt["decision"] == "close" and receipt["status"] == "accepted"
    assert receipt["id"].startswith("rcpt_")
    assert receipt["session"] == {
        "revision": before["revision"] + 1,
        "status": "closed",
        "admission_state": "closed",
        "resumable": False,
    }
    assert receipt["result"] == {"resumable": False}
    after = sandbox_api.session(session_id)
    assert after["status"] == "closed" and after["attention"] is None
    assert sandbox.admin.effect_count(session_id) == 1
    again = sandbox_api.decide(session_id, "close")
    assert (again.status_code, _code(again)) == (409, "REQUEST_STALE")


def test_close_asks_a_live_worker_to_end(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    assert sandbox.admin.session("ses_healthy")["execution_internal"]["alive"] is True
    assert sandbox_api.decide("ses_healthy", "close").status_code == 201
    assert sandbox_api.session("ses_healthy")["execution"]["state"] == "draining"
    sandbox.admin.scheduler_pass()
    assert sandbox_api.session("ses_healthy")["execution"]["state"] == "gone"


# ---------------------------------------------------------------- row 5: retry_restore (R2.10)
# Seed, R2.10: "한도에 닿아 멈춘 세션에만 받는다. backoff 중이거나 다른 이유(context gap, unknown turn,
# 복원 없는 STARTUP_FAILED)로 멈춘 세션은 409 REQUEST_STALE이다." — accepted only for a session stopped at
# the limit; in backoff, or stopped for a context gap, an unknown turn or a STARTUP_FAILED without a
# restore: 409 REQUEST_STALE.


@pytest.mark.parametrize(
    ("session_id", "why"),
    [
        ("ses_restore_backoff", "in backoff"),
        ("ses_startup_backoff", "in backoff"),
        ("ses_startup_stopped", "STARTUP_FAILED without a restore"),
        ("ses_context_gap", "context gap"),
        ("ses_unknown_covered", "turn_cv2 heads the queue"),
        ("ses_unknown_over_limit", "turn_ur7 heads the queue"),  # attention alone looks like the limit
        ("ses_unknown_stray", "turn_us3 heads the queue"),
        ("ses_relaunched", "stopped at the restore-failure limit"),  # running, admission open
        ("ses_relaunched_startup", "STARTUP_FAILED without a restore"),
        ("ses_stopped_no_checkpoint", "stopped at the restore-failure limit"),
        ("ses_stopped_resumable", "stopped at the restore-failure limit"),
        ("ses_healthy", "stopped at the restore-failure limit"),
    ],
)
def test_retry_restore_refused_unless_stopped_at_the_restore_limit(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str, why: str
) -> None:
    before = sandbox_api.session(session_id)
    response = sandbox_api.decide(session_id, "retry_restore")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert why in response.json()["error"]["message"]
    assert sandbox.admin.effect_count(session_id) == 0
    assert sandbox_api.session(session_id) == before


@pytest.mark.parametrize(
    "session_id", ["ses_incompatible", "ses_restore_transient", "ses_restore_damaged", "ses_restore_gone"]
)
def test_retry_restore_accepted_at_the_limit_and_launches_from_the_same_checkpoint(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str
) -> None:
    before = sandbox_api.session(session_id)
    response = sandbox_api.decide(session_id, "retry_restore")
    assert response.status_code == 201, response.text
    after = sandbox_api.session(session_id)
    # R2.9: count back to 0, the next worker restores the same checkpoint pointer.
    assert after["attention"]["failures"] == 0 and after["attention"]["retry_at"] is None  # kept until ready
    assert after["admission_state"] == "open" and after["status"] == "running"
    assert after["checkpoint"] == before["checkpoint"]
    assert after["execution"]["state"] == "running"
    assert after["execution"]["generation"] == before["execution"]["generation"] + 1
    assert after["revision"] == before["revision"] + 1


def test_retry_restore_follows_the_state_machine_to_the_limit(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    """Refused after the 1st and 2nd failure (backoff, then relaunched), accepted once stopped (R2.1)."""
    sid = "ses_relaunched"  # generation 3 is restoring, two failures counted
    assert _code(sandbox_api.decide(sid, "retry_restore")) == "REQUEST_STALE"
    sandbox.admin.fail_restore(sid, "restore_refused")
    stopped = sandbox_api.session(sid)
    assert stopped["attention"]["failures"] == 3 and stopped["attention"]["retry_at"] is None
    assert stopped["admission_state"] == "recovery_required"
    assert sandbox_api.decide(sid, "retry_restore").status_code == 201


def test_retry_restore_is_refused_in_backoff_then_after_the_relaunch(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sid = "ses_restore_backoff"
    refused = sandbox_api.decide(sid, "retry_restore")
    assert "backoff until" in refused.json()["error"]["message"]
    sandbox.admin.advance(30)
    assert sid in sandbox.admin.scheduler_pass()["launched"]
    relaunched = sandbox_api.session(sid)
    assert relaunched["attention"]["retry_at"] is None and relaunched["admission_state"] == "open"
    again = sandbox_api.decide(sid, "retry_restore")
    assert (again.status_code, _code(again)) == (409, "REQUEST_STALE")
    assert sandbox.admin.effect_count(sid) == 0


def test_retry_restore_without_a_checkpoint_is_stale(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sandbox.admin.create_session(
        {
            "session": {
                "id": "ses_rf_no_ckpt",
                "status": "failed",
                "admission_state": "recovery_required",
                "attention": {"code": "RESTORE_FAILED", "reason": "restore_refused", "failures": 3},
                "checkpoint": None,
                "execution": {"state": "gone"},
            }
        }
    )
    response = sandbox_api.decide("ses_rf_no_ckpt", "retry_restore")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert "no checkpoint to restore" in response.json()["error"]["message"]


# ---------------------------------------------------------------- row 6: start_fresh
# Seed: after a restore or startup stop, start_fresh continues without the checkpoint (R2.11, R2.14);
# after abandon, "false면 … start_fresh로 그 context 없이 이어가거나 close한다" (R3.12); an unknown turn is
# never re-run nor skipped by itself (R3.8).


@pytest.mark.parametrize(
    ("session_id", "why"),
    [
        ("ses_unknown_covered", "turn_cv2 heads the queue"),  # recovery_required, retry_at null (R3.8)
        ("ses_unknown_ckpt_unavailable", "heads the queue"),
        ("ses_unknown_over_limit", "turn_ur7 heads the queue"),
        ("ses_unknown_stray", "heads the queue"),
        ("ses_restore_backoff", "in backoff until"),
        ("ses_startup_backoff", "in backoff until"),
        ("ses_relaunched", "this one is running"),
        ("ses_relaunched_startup", "this one is running"),
        ("ses_stopped_resumable", "resumable true"),
        ("ses_healthy", "this one is running"),
    ],
)
def test_start_fresh_refused(sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str, why: str) -> None:
    response = sandbox_api.decide(session_id, "start_fresh")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert why in response.json()["error"]["message"]
    assert sandbox.admin.effect_count(session_id) == 0


@pytest.mark.parametrize(
    "session_id",
    [
        "ses_startup_stopped",  # R2.14: stopped at the startup limit
        "ses_context_gap",  # R3.12: stopped, not resumable, CONTEXT_GAP
        "ses_stopped_no_checkpoint",  # R3.12: stopped, not resumable, nothing to continue from
        "ses_incompatible",  # R2.4 / R2.11: stopped at the restore limit
        "ses_restore_damaged",
        "ses_restore_transient",
        "ses_restore_gone",
    ],
)
def test_start_fresh_accepted_when_stopped_or_context_gap(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str
) -> None:
    before = sandbox_api.session(session_id)
    response = sandbox_api.decide(session_id, "start_fresh")
    assert response.status_code == 201, response.text
    after = sandbox_api.session(session_id)
    assert after["checkpoint"] is None  # R2.11: without the checkpoint
    # A restore/startup attention stays, count 0, until the new worker reports ready (R5.1).
    if before["attention"] and before["attention"]["code"] in {"RESTORE_FAILED", "STARTUP_FAILED"}:
        assert after["attention"]["failures"] == 0 and after["attention"]["retry_at"] is None
    else:
        assert after["attention"] is None
    assert after["status"] == "running" and after["admission_state"] == "open"
    assert response.json()["result"] == {"resumable": False}
    assert sandbox.admin.effect_count(session_id) == 1


def test_start_fresh_after_an_abandon_that_left_a_context_gap(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    """The state machine's own path to R3.12: abandon → stopped, not resumable → start_fresh accepted."""
    sid = "ses_unknown_over_limit"
    assert _code(sandbox_api.decide(sid, "start_fresh")) == "REQUEST_STALE"
    abandoned = sandbox_api.decide(sid, "abandon", target_turn_id="turn_ur7")
    assert abandoned.status_code == 201, abandoned.text
    assert abandoned.json()["result"] == {"resumable": False}
    assert sandbox_api.session(sid)["attention"]["code"] == "CONTEXT_GAP"
    assert _code(sandbox_api.decide(sid, "retry_restore")) == "REQUEST_STALE"
    assert sandbox_api.decide(sid, "start_fresh").status_code == 201


# ---------------------------------------------------------------- row 7: target turn not outcome_unknown


@pytest.mark.parametrize("decision", ["abandon", "confirm_completed"])
def test_target_turn_must_be_outcome_unknown(sandbox_api: SandboxApi, decision: str) -> None:
    completed = sandbox_api.decide("ses_unknown_covered", decision, target_turn_id="turn_cv1", evidence_ref="PR-1")
    assert (completed.status_code, _code(completed)) == (409, "REQUEST_STALE")
    missing = sandbox_api.decide("ses_unknown_covered", decision, target_turn_id="turn_nope", evidence_ref="PR-1")
    assert (missing.status_code, _code(missing)) == (404, "NOT_FOUND")


def test_abandon_on_a_session_without_unknown_turn_is_stale(sandbox_api: SandboxApi) -> None:
    response = sandbox_api.decide("ses_stopped_resumable", "abandon", target_turn_id="turn_sr4")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")


# ---------------------------------------------------------------- row 8: worker not confirmed gone (R3.9)


@pytest.mark.parametrize("decision", ["abandon", "confirm_completed"])
def test_not_confirmed_gone_then_accepted_after_a_scheduler_pass(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, decision: str
) -> None:
    body = {"target_turn_id": "turn_uu5", "evidence_ref": "checked-effects-1"}
    early = sandbox_api.decide("ses_unknown_unanswered", decision, **body)
    assert (early.status_code, _code(early)) == (409, "RECOVERY_REQUIRED")
    assert early.json()["error"]["message"] == "The previous execution has not been confirmed gone."
    assert sandbox_api.session("ses_unknown_unanswered")["execution"]["state"] == "running"
    # Time alone does not confirm anything: only a scheduler pass does.
    sandbox.admin.advance(600)
    again = sandbox_api.decide("ses_unknown_unanswered", decision, **body)
    assert _code(again) == "RECOVERY_REQUIRED"
    sandbox.admin.scheduler_pass()
    execution = sandbox_api.session("ses_unknown_unanswered")["execution"]
    assert execution["state"] == "gone" and execution["confirmed_gone_at"] is not None
    final = sandbox_api.decide("ses_unknown_unanswered", decision, **body)
    if decision == "abandon":
        assert final.status_code == 201
    else:
        # Row 9 comes after row 8: the checkpoint covers turn_uu4, not turn_uu5.
        assert (final.status_code, _code(final)) == (409, "CHECKPOINT_UNAVAILABLE")


def test_a_stray_container_gives_a_second_recovery_required_after_the_pass(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    """R3.9: a decision submitted right after the pass that showed the worker gone may still be refused;
    the next pass moves confirmed_gone_at and the revision, and only then is it accepted."""
    sid = "ses_unknown_stray"
    first = sandbox_api.decide(sid, "abandon", target_turn_id="turn_us3")
    assert _code(first) == "RECOVERY_REQUIRED"
    assert sid in sandbox.admin.scheduler_pass()["confirmed_gone"]
    seen = sandbox_api.session(sid)
    assert seen["execution"]["state"] == "gone" and seen["execution"]["confirmed_gone_at"] is not None
    second = sandbox_api.decide(sid, "abandon", target_turn_id="turn_us3")
    assert (second.status_code, _code(second)) == (409, "RECOVERY_REQUIRED")
    assert sandbox_api.session(sid) == seen  # a refusal changes nothing
    sandbox.admin.advance(5)
    assert sid in sandbox.admin.scheduler_pass()["confirmed_gone"]
    moved = sandbox_api.session(sid)
    assert moved["revision"] == seen["revision"] + 1
    assert moved["execution"]["confirmed_gone_at"] > seen["execution"]["confirmed_gone_at"]
    third = sandbox_api.decide(sid, "abandon", target_turn_id="turn_us3")
    assert third.status_code == 201, third.text
    assert sandbox.admin.effect_count(sid) == 1
    assert sid not in sandbox.admin.scheduler_pass()["confirmed_gone"]  # nothing left to find


def test_stray_workers_can_be_added_through_the_admin_api(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sid = "ses_unknown_unanswered"
    view = sandbox.admin.stray_workers(sid, 2)
    assert view["execution_internal"]["stray_workers"] == 2
    for _ in range(2):  # the pass that confirms the worker, then the one that finds the first stray
        sandbox.admin.scheduler_pass()
        assert _code(sandbox_api.decide(sid, "abandon", target_turn_id="turn_uu5")) == "RECOVERY_REQUIRED"
        sandbox.admin.advance(1)
    sandbox.admin.scheduler_pass()
    assert sandbox_api.decide(sid, "abandon", target_turn_id="turn_uu5").status_code == 201


# ---------------------------------------------------------------- row 9: confirm_completed needs a covering checkpoint


def test_confirm_completed_without_covering_checkpoint(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    response = sandbox_api.decide(
        "ses_unknown_ckpt_unavailable", "confirm_completed", target_turn_id="turn_uc3", evidence_ref="PR-7"
    )
    assert (response.status_code, _code(response)) == (409, "CHECKPOINT_UNAVAILABLE")
    assert sandbox.admin.effect_count("ses_unknown_ckpt_unavailable") == 0


# ---------------------------------------------------------------- row 10: accepted, revision + 1


def test_confirm_completed_accepted_with_covering_checkpoint(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    before = sandbox_api.session("ses_unknown_covered")
    response = sandbox_api.decide(
        "ses_unknown_covered",
        "confirm_completed",
        target_turn_id="turn_cv2",
        evidence_ref="https://ci/run/42",
    )
    assert response.status_code == 201
    receipt = response.json()
    assert receipt["session"]["revision"] == before["revision"] + 1
    assert receipt["session"]["status"] == "stopped" and receipt["session"]["admission_state"] == "open"
    assert receipt["result"]["resumable"] is True  # R3.12
    turn = sandbox_api.get("/v1/sessions/ses_unknown_covered/turns/turn_cv2").json()
    assert turn["status"] == "completed"
    effects = sandbox.admin.effects("ses_unknown_covered")
    assert [(e["kind"], e["decision"], e["receipt_id"]) for e in effects] == [
        ("decision", "confirm_completed", receipt["id"])
    ]


def test_expected_revision_is_required(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    """The runbook's decision body always carries expected_revision: a client that drops it is refused
    (strict schema, 400) and nothing happens."""
    before = sandbox_api.session("ses_incompatible")
    response = sandbox_api.decide("ses_incompatible", "close", expected_revision=None)
    assert (response.status_code, _code(response)) == (400, "BAD_REQUEST")
    assert "expected_revision is required" in response.json()["error"]["message"]
    assert sandbox_api.session("ses_incompatible") == before
    assert sandbox.admin.effect_count("ses_incompatible") == 0


def test_decision_on_unknown_session_is_404(sandbox_api: SandboxApi) -> None:
    response = sandbox_api.decide("ses_nope", "close", expected_revision=1)
    assert (response.status_code, _code(response)) == (404, "NOT_FOUND")
