"""Our client against the sandbox control host over real HTTP: every row of the acceptance table,
the runbook's transitions, retries and the Idempotency-Key rule."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from bot.clock import ManualClock
from bot.controlhost import (
    SCOPE_MESSAGE,
    WRONG_KEY_MESSAGE,
    ControlHostAuthError,
    ControlHostClient,
    ControlHostError,
    Permit,
    RequestPendingError,
    RetryPolicy,
)
from bot.controlhost._permit import _GATE_SEAL  # a client test: it plays the gate
from bot.sandbox import SandboxHandle, start_sandbox
from bot.store import Store
from tests.fixtures.controlhost import post_decision, post_resume, replay
from tests.fixtures.waiting import eventually

from ._specs import running, starting
from .conftest import FAST

DECISIONS_PATH = "/v1/sessions/*/recovery-decisions"


def refused(call: Any) -> ControlHostError:
    with pytest.raises(ControlHostError) as info:
        call()
    return info.value


def decide(client: ControlHostClient, sid: str, decision: str, **extra: Any) -> Any:
    """A decision with the session's current revision, as the decisions layer would send it."""
    revision = client.get_session(sid).revision
    return post_decision(
        client, sid, {"decision": decision, "expected_revision": revision, "reason": f"test: {decision}", **extra}
    )


def posts(sbx: SandboxHandle, sid: str) -> list[dict[str, Any]]:
    return [r for r in sbx.admin.requests(sid) if r["method"] == "POST"]


def fail_to_limit(sbx: SandboxHandle, sid: str, how: str = "restore") -> None:
    """Three counted failures with the 30 s / 60 s backoff between them (R2.1, R2.12)."""
    fail = sbx.admin.fail_restore if how == "restore" else sbx.admin.fail_startup
    fail(sid)
    for wait in (30, 60):
        sbx.admin.advance(wait)
        assert sid in sbx.admin.scheduler_pass()["launched"]
        fail(sid)


# -- reads -------------------------------------------------------------------------------------


def test_reads_are_typed(sbx: SandboxHandle, client: ControlHostClient) -> None:
    sbx.admin.create_session(running("ses_r", revision=7))
    sbx.admin.create_session(starting("ses_s"))
    sbx.admin.fail_restore("ses_s", "incompatible_checkpoint")
    session = client.get_session("ses_r")
    assert (session.id, session.status, session.admission_state, session.revision) == (
        "ses_r",
        "running",
        "open",
        7,
    )
    assert session.checkpoint is not None and session.checkpoint.covers_turn_id == "ses_r_t1"
    assert session.execution is not None and session.execution.state == "running"
    needing = [s.id for s in client.iter_sessions_needing_operator()]
    assert needing == ["ses_s"]
    assert client.list_sessions_needing_operator().sessions[0].attention.code == "RESTORE_FAILED"  # type: ignore[union-attr]
    turns = client.list_turns("ses_r")
    assert [t.id for t in turns] == ["ses_r_t1"] and turns[0].status == "completed"
    assert client.list_turns("ses_r", status="outcome_unknown") == []
    assert client.get_turn("ses_r", "ses_r_t1").ended_at is not None
    page = client.list_events("ses_s")
    failed = [e for e in page.events if e.name == "checkpoint_restore_failed"]
    assert failed and failed[0].reason == "incompatible_checkpoint" and failed[0].failures == 1
    assert client.list_events("ses_s", after=page.next).events == []


def test_not_found_on_gets(client: ControlHostClient, sbx: SandboxHandle) -> None:
    sbx.admin.create_session(running("ses_r"))
    for call in (
        lambda: client.get_session("ses_nope"),
        lambda: client.get_turn("ses_r", "turn_nope"),
        lambda: client.list_events("ses_nope"),
    ):
        error = refused(call)
        assert (error.code, error.status, error.retryable) == ("NOT_FOUND", 404, False)


def test_wrong_key_and_missing_scope(sbx: SandboxHandle, store: Store, clock: ManualClock) -> None:
    sbx.admin.create_session(running("ses_a"))
    wrong = ControlHostClient(sbx.url, "sbx_wrong_key_123456", store=store, clock=clock, retry=FAST)
    with pytest.raises(ControlHostAuthError) as info:
        wrong.get_session("ses_a")
    assert info.value.status == 401 and info.value.code == "UNAUTHORIZED"
    assert WRONG_KEY_MESSAGE in str(info.value) and SCOPE_MESSAGE not in str(info.value)
    assert "sbx_wrong_key" not in str(info.value)
    assert len(sbx.admin.requests("ses_a")) == 1  # never retried

    with start_sandbox(
        scenarios=None,
        api_keys={
            "sbx_reader_key_1": {"sessions:read"},
            "sbx_recover_key_1": {"sessions:read", "sessions:recover"},
        },
    ) as other:
        other.admin.create_session(running("ses_b"))
        reader = ControlHostClient(other.url, "sbx_reader_key_1", store=store, clock=clock, retry=FAST)
        assert reader.get_session("ses_b").revision == 5
        with pytest.raises(ControlHostAuthError) as info:
            post_decision(reader, "ses_b", {"decision": "close", "reason": "x", "expected_revision": 5})
        assert info.value.status == 403 and info.value.code == "FORBIDDEN"
        assert SCOPE_MESSAGE in str(info.value) and WRONG_KEY_MESSAGE not in str(info.value)
        assert len(posts(other, "ses_b")) == 1 and other.admin.effects("ses_b") == []
        [record] = store.list_requests("ses_b")
        assert record.state == "answered" and record.http_status == 403


# -- the acceptance table, row by row ----------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "close", "expected_revision": 5},  # reason missing
        {"decision": "reboot", "expected_revision": 5, "reason": "x"},  # unknown decision
        {
            "decision": "confirm_completed",
            "expected_revision": 5,
            "reason": "x",
            "target_turn_id": "ses_a_t1",
        },
        {"decision": "abandon", "expected_revision": 5, "reason": "x"},  # no target_turn_id
        {"decision": "confirm_completed", "expected_revision": 5, "reason": "x", "evidence_ref": "e"},
    ],
)
def test_row_bad_request(sbx: SandboxHandle, client: ControlHostClient, store: Store, body: dict) -> None:
    sbx.admin.create_session(running("ses_a"))
    error = refused(lambda: post_decision(client, "ses_a", body))
    assert (error.code, error.status, error.retryable) == ("BAD_REQUEST", 400, False)
    [record] = store.list_requests()
    assert record.state == "answered" and record.http_status == 400 and json.loads(record.body) == body
    assert sbx.admin.effects("ses_a") == [] and len(posts(sbx, "ses_a")) == 1


def test_row_stale_revision(sbx: SandboxHandle, client: ControlHostClient) -> None:
    sbx.admin.create_session(running("ses_a", revision=5))
    error = refused(
        lambda: post_decision(client, "ses_a", {"decision": "close", "expected_revision": 4, "reason": "x"})
    )
    assert (error.code, error.status) == ("REQUEST_STALE", 409)
    assert "Re-read the session" in str(error)


def test_row_close_accepted_in_any_state_then_closed_is_stale(sbx: SandboxHandle, client: ControlHostClient) -> None:
    sbx.admin.create_session(running("ses_a", revision=5))
    receipt = decide(client, "ses_a", "close")
    assert receipt.status == "accepted" and receipt.decision == "close" and receipt.http_status == 201
    assert receipt.session is not None and receipt.session.revision == 6 and receipt.session.status == "closed"
    session = client.get_session("ses_a")
    assert session.status == "closed" and session.execution is not None and session.execution.state == "draining"
    error = refused(lambda: decide(client, "ses_a", "close"))
    assert (error.code, error.status) == ("REQUEST_STALE", 409)
    assert len(sbx.admin.effects("ses_a")) == 1


def test_restore_failures_backoff_limit_and_retry_restore_resets(sbx: SandboxHandle, client: ControlHostClient) -> None:
    """2nd failure → advance → 3rd failure → recovery_required → retry_restore resets → fails again."""
    sbx.admin.create_session(starting("ses_a"))
    sbx.admin.fail_restore("ses_a")
    first = client.get_session("ses_a")
    assert first.attention is not None and first.attention.failures == 1
    assert first.attention.retry_at == sbx.admin.now() + timedelta(seconds=30)  # R2.1
    # R2.10: still in backoff → retry_restore is stale.
    assert refused(lambda: decide(client, "ses_a", "retry_restore")).code == "REQUEST_STALE"
    sbx.admin.advance(30)
    sbx.admin.scheduler_pass()
    sbx.admin.fail_restore("ses_a")
    second = client.get_session("ses_a")
    assert second.attention is not None and second.attention.failures == 2
    assert second.attention.retry_at == sbx.admin.now() + timedelta(seconds=60)
    assert second.admission_state == "open"
    sbx.admin.advance(60)
    sbx.admin.scheduler_pass()
    sbx.admin.fail_restore("ses_a")
    third = client.get_session("ses_a")
    assert third.attention is not None and third.attention.failures == 3 and third.attention.retry_at is None
    assert (third.status, third.admission_state) == ("failed", "recovery_required")
    receipt = decide(client, "ses_a", "retry_restore")
    assert receipt.status == "accepted"
    after = client.get_session("ses_a")
    # R5.1: the attention stays, count back to 0 (R2.9), until the next worker reports ready.
    assert after.attention is not None and after.attention.failures == 0
    assert after.admission_state == "open"
    sbx.admin.fail_restore("ses_a")  # the next worker fails again: the count started over (R2.9)
    again = client.get_session("ses_a")
    assert again.attention is not None and again.attention.failures == 1 and again.attention.retry_at is not None


def test_incompatible_checkpoint_stops_at_once_and_retry_restore_is_accepted(
    sbx: SandboxHandle, client: ControlHostClient
) -> None:
    sbx.admin.create_session(starting("ses_a"))
    sbx.admin.fail_restore("ses_a", "incompatible_checkpoint")
    session = client.get_session("ses_a")
    attention = session.attention
    assert attention is not None and (attention.reason, attention.failures, attention.retry_at) == (
        "incompatible_checkpoint",
        1,
        None,
    )  # R2.3
    assert session.admission_state == "recovery_required"
    assert decide(client, "ses_a", "retry_restore").status == "accepted"  # R2.4


def test_startup_failures_refuse_retry_restore_but_accept_start_fresh(
    sbx: SandboxHandle, client: ControlHostClient
) -> None:
    sbx.admin.create_session(starting("ses_a", checkpoint=False))
    fail_to_limit(sbx, "ses_a", how="startup")
    session = client.get_session("ses_a")
    assert session.attention is not None and session.attention.code == "STARTUP_FAILED"
    assert session.attention.failures == 3 and session.admission_state == "recovery_required"
    assert refused(lambda: decide(client, "ses_a", "retry_restore")).code == "REQUEST_STALE"  # R2.10
    assert decide(client, "ses_a", "start_fresh").status == "accepted"  # R2.14
    fresh = client.get_session("ses_a").attention
    assert fresh is not None and fresh.failures == 0  # kept until the new worker is ready (R5.1)


def test_start_fresh_refused_unless_stopped(sbx: SandboxHandle, client: ControlHostClient) -> None:
    sbx.admin.create_session(running("ses_a"))
    assert refused(lambda: decide(client, "ses_a", "start_fresh")).code == "REQUEST_STALE"


def test_outcome_unknown_abandon_waits_for_scheduler_then_context_gap(
    sbx: SandboxHandle, client: ControlHostClient, store: Store
) -> None:
    sbx.admin.create_session(running("ses_a"))
    turn = sbx.admin.interrupt("ses_a", "interrupt_unanswered")["turn"]["id"]
    unknown = client.list_turns("ses_a", status="outcome_unknown")
    assert [t.id for t in unknown] == [turn] and unknown[0].terminal_reason == "interrupt_unanswered"
    # R3.8: start_fresh is refused while the unknown turn heads the queue.
    assert refused(lambda: decide(client, "ses_a", "start_fresh")).code == "REQUEST_STALE"
    # The target must be the outcome_unknown turn.
    stale = refused(lambda: decide(client, "ses_a", "abandon", target_turn_id="ses_a_t1"))
    assert stale.code == "REQUEST_STALE"
    # R3.9: not before the worker is confirmed gone.
    early = refused(lambda: decide(client, "ses_a", "abandon", target_turn_id=turn))
    assert (early.code, early.status, early.retryable) == ("RECOVERY_REQUIRED", 409, False)
    assert "ses_a" in sbx.admin.scheduler_pass()["confirmed_gone"]
    receipt = decide(client, "ses_a", "abandon", target_turn_id=turn)
    assert receipt.status == "accepted" and receipt.resumable is False
    # A later attempt after a 4xx is a NEW logical request: a new key.
    keys = [r["idempotency_key"] for r in posts(sbx, "ses_a")]
    assert len(keys) == 4 and len(set(keys)) == 4
    assert keys[-1] == receipt.idempotency_key
    assert [r.http_status for r in store.list_requests("ses_a")] == [409, 409, 409, 201]  # type: ignore[comparison-overlap]
    session = client.get_session("ses_a")
    assert session.status == "stopped" and session.attention is not None
    assert session.attention.code == "CONTEXT_GAP"  # R3.12: the turn ran after the last checkpoint
    assert client.get_turn("ses_a", turn).status == "cancelled"
    assert refused(lambda: post_resume(client, "ses_a")).code == "REQUEST_STALE"
    assert decide(client, "ses_a", "start_fresh").status == "accepted"


def test_confirm_completed_needs_a_covering_checkpoint(sbx: SandboxHandle, client: ControlHostClient) -> None:
    sbx.admin.create_session(running("ses_a"))
    turn = sbx.admin.interrupt("ses_a", "interrupt_checkpoint_unavailable")["turn"]["id"]
    sbx.admin.scheduler_pass()
    error = refused(lambda: decide(client, "ses_a", "confirm_completed", target_turn_id=turn, evidence_ref="log"))
    assert (error.code, error.status) == ("CHECKPOINT_UNAVAILABLE", 409)  # R3.11

    sbx.admin.create_session(running("ses_b"))
    covered = sbx.admin.interrupt("ses_b", "interrupt_unanswered", checkpoint_committed=True)["turn"]["id"]
    sbx.admin.scheduler_pass()
    receipt = decide(client, "ses_b", "confirm_completed", target_turn_id=covered, evidence_ref="pr-123")
    assert receipt.status == "accepted" and receipt.resumable is True  # R3.12
    resumed = post_resume(client, "ses_b", "checkpoint covers the turn")
    assert resumed.status == "accepted" and resumed.http_status == 200
    assert resumed.session is not None and resumed.session.status == "running"
    assert refused(lambda: post_resume(client, "ses_b")).code == "REQUEST_STALE"
    assert [e["kind"] for e in sbx.admin.effects("ses_b")] == ["decision", "resume"]


def test_resume_during_reclamation_is_retryable_then_same_request_succeeds(
    sbx: SandboxHandle, client: ControlHostClient, store: Store
) -> None:
    sbx.admin.create_session(running("ses_a"))
    turn = sbx.admin.interrupt("ses_a", "interrupt_unanswered", checkpoint_committed=True)["turn"]["id"]
    sbx.admin.scheduler_pass()
    decide(client, "ses_a", "confirm_completed", target_turn_id=turn, evidence_ref="ok")
    sbx.admin.reclamation("ses_a", True)
    with pytest.raises(RequestPendingError) as info:
        post_resume(client, "ses_a", "after confirm")
    error = info.value
    assert (error.code, error.status, error.retryable) == ("BACKEND_UNAVAILABLE", 503, True)  # R4.2
    resume_posts = [r for r in posts(sbx, "ses_a") if r["path"].endswith("/resume")]
    assert len(resume_posts) == FAST.attempts
    assert {r["idempotency_key"] for r in resume_posts} == {error.idempotency_key}
    assert not any(r["key"] == error.idempotency_key for r in sbx.admin.idempotency_records("ses_a"))
    record = store.get_request(error.idempotency_key)
    assert record is not None and record.pending and record.attempts == FAST.attempts
    sbx.admin.reclamation("ses_a", False)
    receipt = client.send(Permit(record, _GATE_SEAL))
    assert receipt.status == "accepted" and receipt.idempotency_key == record.key
    assert [e["kind"] for e in sbx.admin.effects("ses_a")] == ["decision", "resume"]


# -- retries and the key rule over HTTP --------------------------------------------------------


def test_get_honours_retry_after(sbx: SandboxHandle, client: ControlHostClient, clock: ManualClock) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("rate_limit", "/v1/sessions/ses_a", method="GET", retry_after=3)
    before = clock.now()
    assert client.get_session("ses_a").id == "ses_a"
    assert (clock.now() - before).total_seconds() == 3.0
    assert [r["status"] for r in sbx.admin.requests("ses_a")] == [429, 200]


def test_get_retries_5xx_and_timeouts(sbx: SandboxHandle, store: Store, clock: ManualClock) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("server_error", "/v1/sessions/ses_a", method="GET", times=2, status=502)
    sbx.admin.fault("latency", "/v1/sessions/ses_a/turns", method="GET", seconds=1.0)
    quick = ControlHostClient(sbx.url, sbx.api_key, store=store, clock=clock, retry=FAST, timeout=0.3)
    assert quick.get_session("ses_a").revision == 5
    assert [r["status"] for r in sbx.admin.requests("ses_a")] == [502, 502, 200]
    assert [t.id for t in quick.list_turns("ses_a")] == ["ses_a_t1"]
    quick.close()


def test_get_gives_up_after_the_policy(sbx: SandboxHandle, client: ControlHostClient) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("server_error", "/v1/sessions/ses_a", method="GET", times=None, status=500)
    error = refused(lambda: client.get_session("ses_a"))
    assert (error.code, error.status, error.retryable) == ("SERVER_ERROR", 500, True)
    assert len(sbx.admin.requests("ses_a")) == FAST.attempts


def _check_single_effect(sbx: SandboxHandle, store: Store, sid: str, receipt: Any) -> list[dict[str, Any]]:
    sent = posts(sbx, sid)
    assert len({r["idempotency_key"] for r in sent}) == 1, "every attempt must reuse the key"
    assert all(r["body"] == sent[0]["body"] for r in sent), "every attempt must send the same body"
    [effect] = sbx.admin.effects(sid)
    assert effect["idempotency_key"] == receipt.idempotency_key and effect["receipt_id"] == receipt.id
    record = store.get_request(receipt.idempotency_key)
    assert record is not None and record.state == "answered" and json.loads(record.body) == sent[0]["body"]
    assert record.attempts == len(sent)
    return sent


def test_post_5xx_is_retried_with_the_same_key_and_body(
    sbx: SandboxHandle, client: ControlHostClient, store: Store
) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("server_error", DECISIONS_PATH, method="POST", times=2, status=500)
    receipt = decide(client, "ses_a", "close")
    sent = _check_single_effect(sbx, store, "ses_a", receipt)
    assert [r["status"] for r in sent] == [500, 500, 201]


def test_post_reply_dropped_after_commit_is_replayed_not_redone(
    sbx: SandboxHandle, client: ControlHostClient, store: Store
) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("drop_after_commit", DECISIONS_PATH, method="POST")
    receipt = decide(client, "ses_a", "close")
    sent = _check_single_effect(sbx, store, "ses_a", receipt)
    assert [r["dropped"] for r in sent] == [True, False]
    assert client.get_session("ses_a").revision == 6  # one effect: one revision step


def test_post_timeout_is_retried_with_the_same_key(sbx: SandboxHandle, store: Store, clock: ManualClock) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("latency", DECISIONS_PATH, method="POST", seconds=1.0)
    quick = ControlHostClient(sbx.url, sbx.api_key, store=store, clock=clock, retry=FAST, timeout=0.3)
    receipt = post_decision(quick, "ses_a", {"decision": "close", "expected_revision": 5, "reason": "x"})
    quick.close()
    # The slow first attempt finishes on the server too; it must find the key and change nothing.
    eventually(lambda: len(posts(sbx, "ses_a")) >= 2, 5, "the slow first attempt's POST on the server")
    _check_single_effect(sbx, store, "ses_a", receipt)


def test_post_429_honours_retry_after_with_the_same_key(
    sbx: SandboxHandle, client: ControlHostClient, store: Store, clock: ManualClock
) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("rate_limit", DECISIONS_PATH, method="POST", retry_after=4)
    before = clock.now()
    receipt = decide(client, "ses_a", "close")
    assert (clock.now() - before).total_seconds() == 4.0
    assert [r["status"] for r in _check_single_effect(sbx, store, "ses_a", receipt)] == [429, 201]


def test_no_definite_answer_keeps_the_record_and_replay_finishes_it(
    sbx: SandboxHandle, client: ControlHostClient, store: Store
) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("server_error", DECISIONS_PATH, method="POST", times=None, status=503)
    with pytest.raises(RequestPendingError) as info:
        decide(client, "ses_a", "close")
    assert info.value.retryable and sbx.admin.effects("ses_a") == []
    [pending] = store.unfinished_requests()
    assert pending.key == info.value.idempotency_key
    sbx.admin.clear_faults()
    [result] = replay(client)
    assert result.receipt is not None and result.receipt.idempotency_key == pending.key
    sent = _check_single_effect(sbx, store, "ses_a", result.receipt)
    assert len(sent) == FAST.attempts + 1
    assert len(store.list_requests()) == 1  # replayed, never re-created


def test_same_key_with_another_body_is_refused(
    sbx: SandboxHandle, client: ControlHostClient, tmp_path: Any, clock: ManualClock
) -> None:
    sbx.admin.create_session(running("ses_a"))
    receipt = decide(client, "ses_a", "close")
    # Another store reusing that key for a different body (a bug the API must catch): 422, definite.
    other = Store(tmp_path / "other.db", clock=clock)
    record = other.begin_request(
        "POST",
        "/v1/sessions/ses_a/recovery-decisions",
        '{"decision":"close","expected_revision":6,"reason":"other"}',
        "recovery_decision",
        key=receipt.idempotency_key,
        session_id="ses_a",
    )
    second = ControlHostClient(sbx.url, sbx.api_key, store=other, clock=clock, retry=FAST)
    error = refused(lambda: second.send(Permit(record, _GATE_SEAL)))
    assert (error.code, error.status, error.retryable) == ("IDEMPOTENCY_KEY_REUSED", 422, False)
    assert other.get_request(record.key).state == "answered"  # type: ignore[union-attr]
    assert len(sbx.admin.effects("ses_a")) == 1


def test_policy_of_one_attempt_never_retries(sbx: SandboxHandle, store: Store, clock: ManualClock) -> None:
    sbx.admin.create_session(running("ses_a"))
    sbx.admin.fault("server_error", DECISIONS_PATH, method="POST", status=500)
    once = ControlHostClient(sbx.url, sbx.api_key, store=store, clock=clock, retry=RetryPolicy(attempts=1))
    with pytest.raises(RequestPendingError):
        post_decision(once, "ses_a", {"decision": "close", "expected_revision": 5, "reason": "x"})
    assert len(posts(sbx, "ses_a")) == 1
