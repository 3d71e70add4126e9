"""Injected faults: latency, 429 + Retry-After, 5xx before the commit, 5xx after it, commit-then-drop-the-reply."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from bot.sandbox import SandboxAdminError, SandboxHandle
from tests.fixtures.sandbox import SandboxApi

DECIDE = "/v1/sessions/*/recovery-decisions"


def test_latency_trips_a_client_timeout_and_does_not_block_other_requests(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sandbox.admin.fault("latency", "/v1/sessions/ses_healthy", seconds=1.5, method="GET")
    slow = SandboxApi(sandbox.url, sandbox.api_key, timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            slow.get("/v1/sessions/ses_healthy")
        assert time.monotonic() - started < 1.2
    finally:
        slow.close()
    # While a slow request sleeps, other requests are answered at once (real concurrency, lock not held).
    sandbox.admin.fault("latency", "/v1/sessions/ses_closed", seconds=1.0)
    done = threading.Event()

    def slow_call() -> None:
        api = SandboxApi(sandbox.url, sandbox.api_key)
        try:
            assert api.get("/v1/sessions/ses_closed").status_code == 200
        finally:
            api.close()
            done.set()

    thread = threading.Thread(target=slow_call)
    thread.start()
    time.sleep(0.1)
    started = time.monotonic()
    assert sandbox_api.get("/v1/sessions/ses_healthy").status_code == 200  # latency fault used up
    assert time.monotonic() - started < 0.5
    assert not done.is_set()
    thread.join(5)
    assert done.is_set()


def test_rate_limit_answers_429_with_retry_after_for_the_given_times(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sandbox.admin.fault("rate_limit", "/v1/sessions/*/turns", retry_after=7, times=2)
    for _ in range(2):
        limited = sandbox_api.get("/v1/sessions/ses_healthy/turns")
        assert limited.status_code == 429
        assert limited.headers["Retry-After"] == "7"
        assert limited.json()["error"]["retryable"] is True
    assert sandbox_api.get("/v1/sessions/ses_healthy/turns").status_code == 200
    assert sandbox_api.get("/v1/sessions/ses_healthy").status_code == 200  # other paths never limited
    assert sandbox.admin.faults()[0]["hits"] == 2


def test_server_error_happens_before_the_commit(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sandbox.admin.fault("server_error", DECIDE, status=502, method="POST")
    body = {"decision": "retry_restore", "reason": "fixed", "expected_revision": 5}
    url = "/v1/sessions/ses_incompatible/recovery-decisions"
    failed = sandbox_api.post(url, body, key="k-5xx")
    assert failed.status_code == 502 and failed.json()["error"]["retryable"] is True
    assert sandbox.admin.effect_count("ses_incompatible") == 0
    assert sandbox.admin.idempotency_records() == []
    assert sandbox_api.session("ses_incompatible")["revision"] == 5
    retried = sandbox_api.post(url, body, key="k-5xx")  # same key, same body
    assert retried.status_code == 201
    assert sandbox.admin.effect_count("ses_incompatible") == 1


def test_error_after_commit_applies_once_and_the_replay_returns_the_original_receipt(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    # An uncertain outcome (R0.3): the client hears a 500, yet the decision is committed.
    sandbox.admin.fault("error_after_commit", DECIDE, method="POST")
    body = {"decision": "retry_restore", "reason": "fixed", "expected_revision": 5}
    url = "/v1/sessions/ses_incompatible/recovery-decisions"
    failed = sandbox_api.post(url, body, key="k-500")
    assert failed.status_code == 500 and failed.json()["error"]["retryable"] is True
    assert sandbox.admin.effect_count("ses_incompatible") == 1
    assert sandbox_api.session("ses_incompatible")["revision"] == 6
    stored = sandbox.admin.idempotency_records("ses_incompatible")
    assert [r["key"] for r in stored] == ["k-500"] and stored[0]["status"] == 201
    replay = sandbox_api.post(url, body, key="k-500")
    assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == stored[0]["response"]
    assert sandbox.admin.effect_count("ses_incompatible") == 1  # applied once, not twice
    log = [r for r in sandbox.admin.requests("ses_incompatible") if r["method"] == "POST"]
    assert [(r["idempotency_key"], r["status"], r["faults"]) for r in log] == [
        ("k-500", 500, ["error_after_commit"]),
        ("k-500", 201, []),
    ]
    with pytest.raises(SandboxAdminError):
        sandbox.admin.fault("error_after_commit", DECIDE, status=200)


def test_drop_after_commit_commits_and_the_replay_returns_the_stored_receipt(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sandbox.admin.fault("drop_after_commit", DECIDE, method="POST")
    body = {"decision": "retry_restore", "reason": "fixed", "expected_revision": 5}
    url = "/v1/sessions/ses_incompatible/recovery-decisions"
    with pytest.raises(httpx.RemoteProtocolError):
        sandbox_api.post(url, body, key="k-drop")
    # The effect happened although the client heard nothing.
    assert sandbox.admin.effect_count("ses_incompatible") == 1
    assert sandbox_api.session("ses_incompatible")["revision"] == 6
    stored = sandbox.admin.idempotency_records("ses_incompatible")
    assert [r["key"] for r in stored] == ["k-drop"]
    replay = sandbox_api.post(url, body, key="k-drop")
    assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == stored[0]["response"]
    assert sandbox.admin.effect_count("ses_incompatible") == 1
    log = [r for r in sandbox.admin.requests("ses_incompatible") if r["method"] == "POST"]
    assert [(r["idempotency_key"], r["dropped"], r["status"]) for r in log] == [
        ("k-drop", True, None),
        ("k-drop", False, 201),
    ]
    assert log[0]["body"] == log[1]["body"] == body


def test_drop_after_commit_on_resume(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sandbox.admin.fault("drop_after_commit", "/v1/sessions/*/resume")
    with pytest.raises(httpx.RemoteProtocolError):
        sandbox_api.resume("ses_stopped_resumable", key="k-resume")
    assert sandbox.admin.effect_count("ses_stopped_resumable") == 1
    replay = sandbox_api.resume("ses_stopped_resumable", key="k-resume")
    assert replay.status_code == 200
    assert sandbox.admin.effect_count("ses_stopped_resumable") == 1


def test_faults_until_cleared_and_validation(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sandbox.admin.fault("server_error", "/v1/sessions/ses_healthy", times=None, status=500)
    for _ in range(3):
        assert sandbox_api.get("/v1/sessions/ses_healthy").status_code == 500
    sandbox.admin.clear_faults()
    assert sandbox_api.get("/v1/sessions/ses_healthy").status_code == 200
    assert sandbox.admin.faults() == []
    with pytest.raises(SandboxAdminError):
        sandbox.admin.fault("explode")
    with pytest.raises(SandboxAdminError):
        sandbox.admin.fault("server_error", status=404)
    with pytest.raises(SandboxAdminError):
        sandbox.admin.fault("latency")


def test_repeat_sessions_names_each_listed_session_twice_and_nothing_else(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    def listed() -> list[str]:
        return [
            s["id"] for s in sandbox_api.get("/v1/sessions", admission_state="recovery_required").json()["sessions"]
        ]

    once = listed()
    assert once and len(set(once)) == len(once)  # by default nothing is repeated
    sandbox.admin.fault("repeat_sessions", "/v1/sessions", method="GET", times=1)
    assert listed() == [sid for sid in once for _ in range(2)]
    assert listed() == once  # times: 1
    sandbox.admin.fault("repeat_sessions", "*", times=None)
    assert sandbox_api.get(f"/v1/sessions/{once[0]}").json()["id"] == once[0]  # a single session is as it was


def test_faults_never_touch_the_admin_api(sandbox: SandboxHandle) -> None:
    sandbox.admin.fault("server_error", "*", times=None)
    assert sandbox.admin.scheduler_pass()["confirmed_gone"]  # admin still answers
    assert len(sandbox.admin.faults()) == 1


@pytest.mark.parametrize("length", [True, False])
def test_huge_body_streams_the_real_answer_padded_to_size(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, length: bool
) -> None:
    sandbox.admin.fault("huge_body", "/v1/sessions/ses_healthy", size=3_000_000, length=length)
    response = sandbox_api.get("/v1/sessions/ses_healthy")
    assert response.status_code == 200
    assert len(response.content) == 3_000_000
    assert ("content-length" in response.headers) is length
    data = response.json()
    assert data["id"] == "ses_healthy" and data["status"] == "running"
    assert set(data["_padding"]) == {"x"}
    assert sandbox_api.get("/v1/sessions/ses_healthy").headers["content-length"] != "3000000"  # used up


def test_dribble_sends_a_few_bytes_a_second_and_never_trips_a_read_timeout(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    sandbox.admin.fault("dribble", "/v1/sessions/ses_healthy", rate=200, seconds=600)
    slow = SandboxApi(sandbox.url, sandbox.api_key, timeout=0.5)  # per-read timeout: never trips
    arrived: list[int] = []
    started = time.monotonic()
    try:
        with slow.client.stream("GET", "/v1/sessions/ses_healthy") as response:
            head = time.monotonic() - started
            assert response.status_code == 200
            assert int(response.headers["content-length"]) == 200 * 600
            body_started = time.monotonic()
            for chunk in response.iter_raw():
                arrived.append(len(chunk))
                if time.monotonic() - body_started > 2.0:
                    break
    finally:
        slow.close()
    assert head > 0.3  # the status line and headers are dribbled too
    assert 200 <= sum(arrived) <= 800, sum(arrived)  # about 200 bytes a second
    assert max(arrived) <= 50


def test_a_dribble_ends_when_the_sandbox_stops(sandbox_factory: Any) -> None:
    sb = sandbox_factory(scenarios=["healthy"])
    sb.admin.fault("dribble", "/v1/sessions/ses_healthy", rate=4, seconds=600)
    errors: list[BaseException] = []

    def call() -> None:
        api = SandboxApi(sb.url, sb.api_key, timeout=30)
        try:
            api.get("/v1/sessions/ses_healthy")
        except httpx.HTTPError as exc:
            errors.append(exc)
        finally:
            api.close()

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    sb.stop()
    thread.join(10)
    assert not thread.is_alive() and errors
    assert time.monotonic() - started < 5


def test_shape_faults_are_validated(sandbox: SandboxHandle) -> None:
    with pytest.raises(SandboxAdminError):
        sandbox.admin.fault("dribble", rate=0)
    with pytest.raises(SandboxAdminError):
        sandbox.admin.fault("huge_body", size=0)
