"""The sandbox against the runbook's own words, over real HTTP: the rules a bot could otherwise lean on.

Each test pins one sentence of the runbook (R2.3, R2.9, R2.15, R2.16, R5.1) so that a bot which drops
``expected_revision`` or takes acceptance for recovery cannot pass against a lenient stand-in.
"""

from __future__ import annotations

import pytest

from bot.sandbox import SandboxAdminError, SandboxHandle
from tests.fixtures.sandbox import SandboxApi


def _events(api: SandboxApi, sid: str, name: str) -> list[dict]:  # type: ignore[type-arg]
    page = api.get(f"/v1/sessions/{sid}/events?after=0&limit=1000").json()
    return [e for e in page["events"] if e["name"] == name]


def test_a_decision_without_expected_revision_is_refused_and_changes_nothing(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    before = sandbox_api.session("ses_incompatible")
    response = sandbox_api.post(
        "/v1/sessions/ses_incompatible/recovery-decisions", {"decision": "retry_restore", "reason": "fixed"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "BAD_REQUEST"
    assert sandbox_api.session("ses_incompatible") == before
    assert sandbox.admin.idempotency_records("ses_incompatible") == []


def test_an_incompatible_checkpoint_stops_at_failures_1_even_after_earlier_failures(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    """R2.3: failures 1, retry_at null, recovery_required — not the running count + 1."""
    sid = "ses_restore_backoff"  # one failure already counted, in backoff
    sandbox.admin.advance(20)
    assert sid in sandbox.admin.scheduler_pass()["launched"]
    assert sandbox_api.session(sid)["attention"]["failures"] == 1
    sandbox.admin.fail_restore(sid, "incompatible_checkpoint")
    session = sandbox_api.session(sid)
    assert session["attention"] == {
        "code": "RESTORE_FAILED",
        "reason": "incompatible_checkpoint",
        "failures": 1,
        "retry_at": None,
    }
    assert (session["status"], session["admission_state"]) == ("failed", "recovery_required")
    event = _events(sandbox_api, sid, "checkpoint_restore_failed")[-1]
    assert (event["failures"], event["retry_at"]) == (1, None)


def test_attention_stays_after_retry_restore_until_the_next_worker_reports_ready(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    """R2.9 count back to 0; R5.1 acceptance is not recovery: the attention clears only at ready."""
    sid = "ses_restore_damaged"
    assert sandbox_api.decide(sid, "retry_restore").status_code == 201
    accepted = sandbox_api.session(sid)
    assert accepted["attention"]["code"] == "RESTORE_FAILED" and accepted["attention"]["failures"] == 0
    sandbox.admin.scheduler_pass()
    assert sandbox_api.session(sid)["attention"]["failures"] == 0  # still starting
    sandbox.admin.worker_ready(sid)
    assert sandbox_api.session(sid)["attention"] is None


@pytest.mark.parametrize("kind", ["drain", "pause", "terminate", "revoked"])
def test_pause_terminate_and_drain_endings_are_not_counted(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, kind: str
) -> None:
    """R2.15: a worker ended by pause, terminate, revoked rights or a SIGTERM drain is no failure."""
    sid = "ses_restore_backoff"
    sandbox.admin.advance(20)
    sandbox.admin.scheduler_pass()
    before = sandbox_api.session(sid)
    failed_before = len(_events(sandbox_api, sid, "checkpoint_restore_failed"))
    sandbox.admin.worker_stop(sid, kind)
    after = sandbox_api.session(sid)
    assert after["attention"] == before["attention"]  # failures still 1, no new backoff
    assert len(_events(sandbox_api, sid, "checkpoint_restore_failed")) == failed_before
    assert after["admission_state"] == "open"
    passed = sandbox.admin.scheduler_pass()
    assert sid in passed["confirmed_gone"]
    if kind == "drain":
        # R1.9: the drained session continues at the next launch, with no backoff.
        assert sid in passed["launched"] or sid in sandbox.admin.scheduler_pass()["launched"]
    else:
        assert sid not in passed["launched"]


def test_an_old_api_counts_a_drained_restore_claim_as_one_failure(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    """R2.16: stop_kind refused with 400, released again without it, counted by the old rules."""
    sid = "ses_restore_backoff"
    sandbox.admin.advance(20)
    sandbox.admin.scheduler_pass()
    sandbox.admin.worker_stop(sid, "drain", old_api=True)
    session = sandbox_api.session(sid)
    assert session["attention"]["failures"] == 2 and session["attention"]["retry_at"] is not None
    logs = [line["text"] for line in sandbox.admin.worker_logs(sid)]
    assert any("worker.release.stop_kind_refused" in line for line in logs)


def test_an_old_api_does_not_count_a_drain_without_a_restore(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sid = "ses_startup_backoff"  # no checkpoint: the claim carried no restore
    sandbox.admin.advance(45)
    sandbox.admin.scheduler_pass()
    before = sandbox_api.session(sid)["attention"]
    sandbox.admin.worker_stop(sid, "drain", old_api=True)
    assert sandbox_api.session(sid)["attention"] == before


def test_worker_stop_needs_a_live_worker_and_a_known_kind(sandbox: SandboxHandle) -> None:
    with pytest.raises(SandboxAdminError) as no_worker:
        sandbox.admin.worker_stop("ses_incompatible", "drain")
    assert no_worker.value.code == "NO_WORKER"
    with pytest.raises(SandboxAdminError) as bad:
        sandbox.admin.worker_stop("ses_healthy", "crash")
    assert bad.value.status == 400


def test_a_stopped_workspace_expires_after_the_ttl_and_only_a_checkpoint_survives_it(
    sandbox_factory,
) -> None:
    """R4.1: under the stopped-TTL contract the volume expires; without a committed checkpoint there
    is nothing to resume from, with one the session still resumes from it."""
    sb = sandbox_factory(scenarios=["stopped_no_checkpoint", "stopped_resumable"], stopped_ttl=3600)
    sb.admin.advance(1)  # the TTL runs from the load
    assert sb.admin.session("ses_stopped_no_checkpoint")["workspace_expired"] is False
    sb.admin.advance(3600)
    for sid in ("ses_stopped_no_checkpoint", "ses_stopped_resumable"):
        assert sb.admin.session(sid)["workspace_expired"] is True, sid
    api = SandboxApi(sb.url, sb.api_key)
    assert api.resume("ses_stopped_no_checkpoint").status_code == 409
    expired = [
        e
        for e in api.get("/v1/sessions/ses_stopped_no_checkpoint/events?after=0").json()["events"]
        if e["name"] == "workspace_expired"
    ]
    assert len(expired) == 1 and expired[0]["checkpoint_id"] is None
    assert api.resume("ses_stopped_resumable").status_code == 200  # the checkpoint outlives the volume
    api.close()
