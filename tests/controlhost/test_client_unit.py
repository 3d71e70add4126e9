"""Client behaviour at the transport seam: retries, auth, id checks and the Idempotency-Key rule.

httpx.MockTransport stands in for the network here (it is httpx's own seam, not our code); the
same rules are exercised against the sandbox over real HTTP in test_against_sandbox.py.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
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
from bot.controlhost._retry import parse_retry_after
from bot.errors import CommandError
from bot.store import Store
from tests.fixtures.controlhost import post_decision, post_resume, replay

KEY = "sk-test-SECRET-abcdef123456"
SESSION = {"id": "ses_1", "status": "failed", "admission_state": "recovery_required", "revision": 3}
RECEIPT = {
    "id": "rcpt_1",
    "decision": "close",
    "status": "accepted",
    "session": {"revision": 4, "status": "closed", "admission_state": "closed"},
}
DECISION = {"decision": "close", "expected_revision": 3, "reason": "customer asked"}


class Recorder:
    """A scripted transport: each request gets the next answer (a Response or an exception)."""

    def __init__(self, answers: list[httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]]):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer) and not isinstance(answer, httpx.Response):
            return answer(request)
        return answer


def err(status: int, code: str | None = None, retryable: bool | None = None, **headers: str) -> httpx.Response:
    body: dict = {"error": {"message": f"{code} happened"}}
    if code:
        body["error"]["code"] = code
    if retryable is not None:
        body["error"]["retryable"] = retryable
    return httpx.Response(status, json=body, headers=headers)


def make(store: Store, clock: ManualClock, rec: Recorder, attempts: int = 4) -> ControlHostClient:
    return ControlHostClient(
        "http://control.test",
        KEY,
        store=store,
        transport=httpx.MockTransport(rec),
        clock=clock,
        retry=RetryPolicy(attempts=attempts, base_delay=1.0, max_delay=4.0, jitter=0.5),
        rng=random.Random(1),
    )


# -- GET ---------------------------------------------------------------------------------------


def test_get_sends_bearer_and_parses(store: Store, clock: ManualClock) -> None:
    rec = Recorder([httpx.Response(200, json=SESSION)])
    session = make(store, clock, rec).get_session("ses_1")
    assert session.revision == 3
    assert rec.requests[0].headers["Authorization"] == f"Bearer {KEY}"
    assert rec.requests[0].url.path == "/v1/sessions/ses_1"


def test_get_retries_5xx_with_capped_jittered_backoff(store: Store, clock: ManualClock) -> None:
    rec = Recorder([err(500), err(502), err(503), httpx.Response(200, json=SESSION)])
    start = clock.now()
    assert make(store, clock, rec).get_session("ses_1").id == "ses_1"
    assert len(rec.requests) == 4
    waited = (clock.now() - start).total_seconds()
    # Waits 1, 2, 4 (capped at 4), each reduced by at most half by jitter.
    assert 3.5 <= waited <= 7.0 and waited != 7.0


def test_get_honours_retry_after_on_429(store: Store, clock: ManualClock) -> None:
    rec = Recorder([err(429, **{"Retry-After": "7"}), httpx.Response(200, json=SESSION)])
    start = clock.now()
    make(store, clock, rec).get_session("ses_1")
    assert (clock.now() - start).total_seconds() == 7.0 and len(rec.requests) == 2


def test_get_retries_transport_errors_then_gives_a_retryable_error(store: Store, clock: ManualClock) -> None:
    rec = Recorder([httpx.ReadTimeout("slow"), httpx.ConnectError("refused"), httpx.ReadTimeout("slow")])
    with pytest.raises(ControlHostError) as info:
        make(store, clock, rec, attempts=3).get_session("ses_1")
    assert info.value.code == "TIMEOUT" and info.value.retryable and info.value.status is None
    assert len(rec.requests) == 3


def test_get_404_is_not_retried(store: Store, clock: ManualClock) -> None:
    rec = Recorder([err(404, "NOT_FOUND", False)])
    with pytest.raises(ControlHostError) as info:
        make(store, clock, rec).get_turn("ses_1", "turn_9")
    assert (info.value.code, info.value.status, info.value.retryable) == ("NOT_FOUND", 404, False)
    assert len(rec.requests) == 1 and "no such session or turn" in str(info.value)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_is_reported_never_retried_and_never_shows_the_key(
    store: Store, clock: ManualClock, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rec = Recorder([httpx.Response(status, json={"error": {"message": f"bad key {KEY}"}})])
    client = make(store, clock, rec)
    with pytest.raises(ControlHostAuthError) as info:
        client.get_session("ses_1")
    expected, other = (WRONG_KEY_MESSAGE, SCOPE_MESSAGE) if status == 401 else (SCOPE_MESSAGE, WRONG_KEY_MESSAGE)
    assert expected in str(info.value) and other not in str(info.value)  # 401 and 403 are told apart
    assert not info.value.retryable and info.value.status == status
    assert len(rec.requests) == 1
    with pytest.raises(ControlHostAuthError):
        post_decision(client, "ses_1", DECISION)
    assert len(rec.requests) == 2
    assert KEY not in str(info.value) and KEY not in caplog.text and KEY not in repr(client)


def test_error_message_from_server_is_redacted(store: Store, clock: ManualClock) -> None:
    rec = Recorder([httpx.Response(409, json={"error": {"code": "REQUEST_STALE", "message": f"key {KEY} stale"}})])
    with pytest.raises(ControlHostError) as info:
        make(store, clock, rec).get_session("ses_1")
    assert KEY not in str(info.value) and "REQUEST_STALE" in str(info.value)


@pytest.mark.parametrize(
    "bad", ["", "../admin", "ses/1", "ses 1", "_x", "a" * 129, "ses_1?x=1", "sés", "ses%2F1", "ses_1\n"]
)
def test_bad_ids_are_refused_before_any_request(store: Store, clock: ManualClock, bad: str) -> None:
    rec = Recorder([httpx.Response(200, json=SESSION)])
    client = make(store, clock, rec)
    for call in (
        lambda: client.get_session(bad),
        lambda: client.get_turn("ses_1", bad),
        lambda: post_decision(client, bad, DECISION),
        lambda: post_resume(client, bad),
    ):
        with pytest.raises(CommandError):
            call()
    assert rec.requests == [] and store.list_requests() == []


def test_good_ids_pass(store: Store, clock: ManualClock) -> None:
    rec = Recorder([httpx.Response(200, json={"id": "t"})])
    client = make(store, clock, rec)
    client.get_turn("ses_01J:a.b-c", "T" + "x" * 127)
    assert rec.requests[0].url.path == f"/v1/sessions/ses_01J:a.b-c/turns/T{'x' * 127}"


def test_pages_are_followed(store: Store, clock: ManualClock) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/turns"):
            cursor = request.url.params.get("cursor")
            if cursor is None:
                return httpx.Response(200, json={"turns": [{"id": "t3"}, {"id": "t2"}], "next": "c2"})
            return httpx.Response(200, json={"turns": [{"id": "t1"}], "next": None})
        cursor = request.url.params.get("cursor")
        assert request.url.params["admission_state"] == "recovery_required"
        if cursor is None:
            return httpx.Response(200, json={"sessions": [{"id": "a"}], "next": "p2"})
        return httpx.Response(200, json={"sessions": [{"id": "b"}], "next": None})

    client = make(store, clock, Recorder([answer]))
    assert [t.id for t in client.list_turns("ses_1", status="outcome_unknown")] == ["t3", "t2", "t1"]
    assert [s.id for s in client.iter_sessions_needing_operator()] == ["a", "b"]
    assert client.list_sessions_needing_operator().next == "p2"


def test_events_after(store: Store, clock: ManualClock) -> None:
    rec = Recorder([httpx.Response(200, json={"events": [{"seq": 8, "name": "startup_failed"}], "next": 9})])
    page = make(store, clock, rec).list_events("ses_1", after=7)
    assert rec.requests[0].url.params["after"] == "7" and page.next == 9 and page.events[0].seq == 8


def test_retry_after_parsing() -> None:
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    assert parse_retry_after("12", now) == 12.0
    assert parse_retry_after("Sun, 29 Nov 2026 10:00:30 GMT", now) == 30.0
    assert parse_retry_after("garbage", now) is None and parse_retry_after(None, now) is None
    assert parse_retry_after("Sun, 29 Nov 2026 10:00:30 -0000", now) == 30.0  # no zone: GMT, not a crash
    assert parse_retry_after("Sun, 29 Nov 2026 09:00:00 GMT", now) == 0.0  # a date past: no wait
    assert parse_retry_after("inf", now) is None and parse_retry_after("nan", now) is None
    assert parse_retry_after("-3", now) == 0.0
    policy = RetryPolicy(max_retry_after=20)
    assert policy.delay(1, retry_after=500) == 20
    rng = random.Random(0)
    assert all(2.0 <= RetryPolicy(base_delay=1, max_delay=4, jitter=0.5).delay(9, rng=rng) <= 4.0 for _ in range(50))
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)


# -- POST: the Idempotency-Key rule ------------------------------------------------------------


def test_post_record_is_committed_before_the_first_send(store: Store, clock: ManualClock) -> None:
    seen: list[tuple] = []

    def answer(request: httpx.Request) -> httpx.Response:
        # Read the store from another connection while the request is in flight.
        key = request.headers["Idempotency-Key"]
        stored = Store(store.path).get_request(key)
        seen.append((stored.state, stored.body, request.content.decode()) if stored else None)
        return httpx.Response(201, json=RECEIPT)

    receipt = post_decision(make(store, clock, Recorder([answer])), "ses_1", DECISION)
    assert seen == [
        ("pending", json.dumps(DECISION, separators=(",", ":")), json.dumps(DECISION, separators=(",", ":")))
    ]
    record = store.get_request(receipt.idempotency_key or "")
    assert record is not None and record.state == "answered" and record.http_status == 201
    assert record.response == RECEIPT and record.attempts == 1
    assert receipt.id == "rcpt_1" and receipt.session is not None and receipt.session.revision == 4


def test_post_headers(store: Store, clock: ManualClock) -> None:
    rec = Recorder([httpx.Response(200, json=RECEIPT)])
    post_resume(make(store, clock, rec), "ses_1", "worker gone")
    request = rec.requests[0]
    assert request.method == "POST" and request.url.path == "/v1/sessions/ses_1/resume"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert len(request.headers["Idempotency-Key"]) == 36
    assert json.loads(request.content) == {"reason": "worker gone"}


def test_uncertain_outcomes_retry_with_the_same_key_and_body(store: Store, clock: ManualClock) -> None:
    rec = Recorder(
        [
            httpx.ReadTimeout("lost"),
            err(500),
            err(429, **{"Retry-After": "2"}),
            httpx.RemoteProtocolError("dropped"),
            httpx.Response(200, json=RECEIPT),
        ]
    )
    receipt = post_decision(make(store, clock, rec, attempts=5), "ses_1", DECISION)
    keys = {r.headers["Idempotency-Key"] for r in rec.requests}
    bodies = {r.content for r in rec.requests}
    assert len(rec.requests) == 5 and len(keys) == 1 and len(bodies) == 1
    assert receipt.idempotency_key in keys
    assert store.get_request(receipt.idempotency_key or "").attempts == 5  # type: ignore[union-attr]


def test_a_4xx_ends_the_request_and_a_later_attempt_is_a_new_key(store: Store, clock: ManualClock) -> None:
    rec = Recorder([err(409, "RECOVERY_REQUIRED", False), httpx.Response(200, json=RECEIPT)])
    client = make(store, clock, rec)
    with pytest.raises(ControlHostError) as info:
        post_decision(client, "ses_1", DECISION)
    assert info.value.code == "RECOVERY_REQUIRED" and info.value.status == 409 and not info.value.retryable
    assert "scheduler pass" in str(info.value)
    assert len(rec.requests) == 1
    first = store.list_requests()[0]
    assert first.state == "answered" and first.http_status == 409
    assert first.response["error"]["code"] == "RECOVERY_REQUIRED"
    receipt = post_decision(client, "ses_1", DECISION)
    assert receipt.idempotency_key != first.key
    assert rec.requests[1].headers["Idempotency-Key"] != rec.requests[0].headers["Idempotency-Key"]
    assert store.unfinished_requests() == []


def test_no_definite_answer_leaves_the_record_pending(store: Store, clock: ManualClock) -> None:
    rec = Recorder([err(503, "BACKEND_UNAVAILABLE", True)])
    client = make(store, clock, rec, attempts=3)
    with pytest.raises(RequestPendingError) as info:
        post_resume(client, "ses_1")
    error = info.value
    assert isinstance(error, ControlHostError)
    assert (error.code, error.status, error.retryable) == ("BACKEND_UNAVAILABLE", 503, True)
    assert "R4.2" in str(error)
    [pending] = store.unfinished_requests()
    assert pending.key == error.idempotency_key and pending.attempts == 3 and pending.body == "{}"
    # The caller rides it out by re-sending the same record later.
    rec.answers = [httpx.Response(200, json=RECEIPT)]
    receipt = client.send(Permit(pending, _GATE_SEAL))
    assert receipt.idempotency_key == pending.key
    assert {r.headers["Idempotency-Key"] for r in rec.requests} == {pending.key}
    assert store.unfinished_requests() == []


def test_send_does_not_resend_an_answered_request(store: Store, clock: ManualClock) -> None:
    rec = Recorder([httpx.Response(200, json=RECEIPT)])
    client = make(store, clock, rec)
    receipt = post_decision(client, "ses_1", DECISION)
    record = store.get_request(receipt.idempotency_key or "")
    assert record is not None
    again = client.send(Permit(record, _GATE_SEAL))
    assert again.id == receipt.id and len(rec.requests) == 1
    refused = Recorder([err(409, "REQUEST_STALE", False)])
    client2 = make(store, clock, refused)
    with pytest.raises(ControlHostError):
        post_decision(client2, "ses_1", DECISION)
    [stale] = [r for r in store.list_requests() if r.http_status == 409]
    with pytest.raises(ControlHostError) as info:
        client2.send(Permit(stale, _GATE_SEAL))
    assert info.value.code == "REQUEST_STALE" and len(refused.requests) == 1


def test_replay_sends_each_stored_key_and_body(store: Store, clock: ManualClock) -> None:
    body_text = '{"decision": "close", "expected_revision": 3, "reason": "x"}'  # not our own formatting
    a = store.begin_request(
        "POST", "/v1/sessions/ses_1/recovery-decisions", body_text, "recovery_decision", session_id="ses_1"
    )
    b = store.begin_request("POST", "/v1/sessions/ses_2/resume", "{}", "resume", session_id="ses_2")
    done = store.begin_request("POST", "/v1/sessions/ses_3/resume", "{}", "resume", session_id="ses_3")
    store.finish_request(done.key, 200, RECEIPT)

    def answer(request: httpx.Request) -> httpx.Response:
        if "ses_2" in request.url.path:
            return err(409, "REQUEST_STALE", False)
        return httpx.Response(200, json=RECEIPT)

    rec = Recorder([answer])
    results = replay(make(store, clock, rec))
    assert [(r.headers["Idempotency-Key"], r.content.decode(), r.url.path) for r in rec.requests] == [
        (a.key, body_text, "/v1/sessions/ses_1/recovery-decisions"),
        (b.key, "{}", "/v1/sessions/ses_2/resume"),
    ]
    assert results[0].receipt is not None and results[0].error is None
    assert results[1].error is not None and results[1].error.code == "REQUEST_STALE"
    assert not results[1].still_pending
    assert store.unfinished_requests() == []
    assert len(store.list_requests()) == 3  # nothing re-created
