"""Every row of docs/control-host-api.md's acceptance table, over real HTTP, in the order the page checks them."""

from __future__ import annotations

import pytest

from bot.sandbox import SandboxHandle
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
    response = sandbox_api.decide(
        "ses_unknown_covered", "abandon", expected_revision=1
    )  # stale AND no target
    assert (response.status_code, _code(response)) == (400, "BAD_REQUEST")


def test_post_without_idempotency_key_or_json_is_refused(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
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
    stale = sandbox_api.decide(
        "ses_unknown_unanswered", "abandon", expected_revision=before, target_turn_id="turn_uu5"
    )
    assert (stale.status_code, _code(stale)) == (409, "REQUEST_STALE")


# ---------------------------------------------------------------- row 3: closed


@pytest.mark.parametrize(
    "decision", ["close", "retry_restore", "start_fresh", "abandon", "confirm_completed"]
)
def test_every_decision_on_a_closed_session_is_stale(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, decision: str
) -> None:
    response = sandbox_api.decide("ses_closed", decision, target_turn_id="turn_cl3", evidence_ref="ticket-1")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert sandbox.admin.effect_count("ses_closed") == 0


# ---------------------------------------------------------------- row 4: close accepted in any other state


@pytest.mark.parametrize(
    "session_id",
    [
        "ses_healthy",
        "ses_restore_backoff",
        "ses_unknown_unanswered",  # worker NOT confirmed gone: close does not wait (R3.9)
        "ses_context_gap",
        "ses_startup_stopped",
        "ses_resume_reclaiming",
    ],
)
def test_close_is_accepted_in_any_state_but_closed(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str
) -> None:
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


@pytest.mark.parametrize(
    "session_id",
    [
        "ses_restore_backoff",  # still in backoff
        "ses_startup_backoff",
        "ses_startup_stopped",  # STARTUP_FAILED, no restore
        "ses_context_gap",
        "ses_unknown_covered",  # unknown turn
        "ses_stopped_resumable",
        "ses_healthy",
    ],
)
def test_retry_restore_refused_unless_stopped_at_the_restore_limit(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str
) -> None:
    response = sandbox_api.decide(session_id, "retry_restore")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert sandbox.admin.effect_count(session_id) == 0


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
    assert after["attention"] is None
    assert after["admission_state"] == "open" and after["status"] == "running"
    assert after["checkpoint"] == before["checkpoint"]
    assert after["execution"]["state"] == "running"
    assert after["execution"]["generation"] == before["execution"]["generation"] + 1
    assert after["revision"] == before["revision"] + 1


# ---------------------------------------------------------------- row 6: start_fresh


@pytest.mark.parametrize(
    "session_id",
    [
        "ses_unknown_covered",  # recovery_required, retry_at null, but an unknown turn heads the queue (R3.8)
        "ses_unknown_ckpt_unavailable",
        "ses_restore_backoff",
        "ses_startup_backoff",
        "ses_stopped_resumable",
        "ses_healthy",
    ],
)
def test_start_fresh_refused(sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str) -> None:
    response = sandbox_api.decide(session_id, "start_fresh")
    assert (response.status_code, _code(response)) == (409, "REQUEST_STALE")
    assert sandbox.admin.effect_count(session_id) == 0


@pytest.mark.parametrize(
    "session_id", ["ses_startup_stopped", "ses_context_gap", "ses_incompatible", "ses_restore_damaged"]
)
def test_start_fresh_accepted_when_stopped_or_context_gap(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, session_id: str
) -> None:
    response = sandbox_api.decide(session_id, "start_fresh")
    assert response.status_code == 201, response.text
    after = sandbox_api.session(session_id)
    assert after["checkpoint"] is None  # R2.11: without the checkpoint
    assert after["attention"] is None and after["status"] == "running" and after["admission_state"] == "open"
    assert response.json()["result"] == {"resumable": False}


# ---------------------------------------------------------------- row 7: target turn not outcome_unknown


@pytest.mark.parametrize("decision", ["abandon", "confirm_completed"])
def test_target_turn_must_be_outcome_unknown(sandbox_api: SandboxApi, decision: str) -> None:
    completed = sandbox_api.decide(
        "ses_unknown_covered", decision, target_turn_id="turn_cv1", evidence_ref="PR-1"
    )
    assert (completed.status_code, _code(completed)) == (409, "REQUEST_STALE")
    missing = sandbox_api.decide(
        "ses_unknown_covered", decision, target_turn_id="turn_nope", evidence_ref="PR-1"
    )
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


# ---------------------------------------------------------------- row 9: confirm_completed needs a covering checkpoint


def test_confirm_completed_without_covering_checkpoint(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    response = sandbox_api.decide(
        "ses_unknown_ckpt_unavailable", "confirm_completed", target_turn_id="turn_uc3", evidence_ref="PR-7"
    )
    assert (response.status_code, _code(response)) == (409, "CHECKPOINT_UNAVAILABLE")
    assert sandbox.admin.effect_count("ses_unknown_ckpt_unavailable") == 0


# ---------------------------------------------------------------- row 10: accepted, revision + 1


def test_confirm_completed_accepted_with_covering_checkpoint(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
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


def test_expected_revision_is_optional(sandbox_api: SandboxApi) -> None:
    response = sandbox_api.decide("ses_incompatible", "close", expected_revision=None)
    assert response.status_code == 201


def test_decision_on_unknown_session_is_404(sandbox_api: SandboxApi) -> None:
    response = sandbox_api.decide("ses_nope", "close", expected_revision=1)
    assert (response.status_code, _code(response)) == (404, "NOT_FOUND")
