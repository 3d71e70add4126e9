"""The Idempotency-Key rule: same key + body → same receipt and one effect; other body → 422; only successes kept."""

from __future__ import annotations

import threading
import uuid

import httpx

from bot.sandbox import SandboxHandle
from tests.fixtures.sandbox import SandboxApi

URL = "/v1/sessions/ses_incompatible/recovery-decisions"


def test_same_key_same_body_returns_the_same_receipt_without_a_second_effect(
    sandbox: SandboxHandle, sandbox_api: SandboxApi
) -> None:
    body = {"decision": "retry_restore", "reason": "profile fixed", "expected_revision": 5}
    first = sandbox_api.post(URL, body, key="key-a")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    session_after_first = sandbox_api.session("ses_incompatible")
    # Same body with other key order and spacing is the same body.
    raw = b'{ "reason": "profile fixed",  "expected_revision": 5, "decision": "retry_restore" }'
    second = sandbox_api.client.post(
        URL, content=raw, headers={"Idempotency-Key": "key-a", "Content-Type": "application/json"}
    )
    assert second.status_code == 201
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    # The replay changed nothing, although expected_revision 5 is no longer current.
    assert sandbox_api.session("ses_incompatible") == session_after_first
    assert sandbox.admin.effect_count("ses_incompatible") == 1
    effect = sandbox.admin.effects("ses_incompatible")[0]
    assert effect["idempotency_key"] == "key-a" and effect["receipt_id"] == first.json()["id"]


def test_same_key_other_body_or_path_is_422(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    body = {"decision": "retry_restore", "reason": "profile fixed", "expected_revision": 5}
    assert sandbox_api.post(URL, body, key="key-b").status_code == 201
    other = sandbox_api.post(URL, {**body, "reason": "something else"}, key="key-b")
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    elsewhere = sandbox_api.post("/v1/sessions/ses_closed/recovery-decisions", body, key="key-b")
    assert elsewhere.status_code == 422
    assert sandbox.admin.effect_count("ses_incompatible") == 1
    assert sandbox.admin.effect_count("ses_closed") == 0


def test_errors_are_not_stored_under_the_key(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    """A 4xx stores nothing: the same key later gets a fresh evaluation (here: accepted after the pass,
    with the revision the pass moved to: no 422 for the changed body, since nothing was stored)."""
    sid = "ses_unknown_unanswered"
    body = {"decision": "abandon", "reason": "checked", "target_turn_id": "turn_uu5"}
    url = f"/v1/sessions/{sid}/recovery-decisions"
    early = sandbox_api.post(url, {**body, "expected_revision": sandbox_api.session(sid)["revision"]}, key="key-c")
    assert early.json()["error"]["code"] == "RECOVERY_REQUIRED"
    assert sandbox.admin.idempotency_records(sid) == []
    sandbox.admin.scheduler_pass()
    later = sandbox_api.post(url, {**body, "expected_revision": sandbox_api.session(sid)["revision"]}, key="key-c")
    assert later.status_code == 201
    assert [r["key"] for r in sandbox.admin.idempotency_records(sid)] == ["key-c"]
    # A 400 with a key also stores nothing, so the key stays usable for a correct body.
    assert sandbox_api.post(URL, {"decision": "retry_restore"}, key="key-d").status_code == 400
    close = {
        "decision": "close",
        "reason": "done",
        "expected_revision": sandbox_api.session("ses_incompatible")["revision"],
    }
    assert sandbox_api.post(URL, close, key="key-d").status_code == 201


def test_concurrent_replays_of_one_request_make_one_effect(sandbox: SandboxHandle) -> None:
    body = {"decision": "close", "reason": "end it", "expected_revision": 5}
    results: list[httpx.Response] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def send() -> None:
        api = SandboxApi(sandbox.url, sandbox.api_key)
        try:
            barrier.wait()
            response = api.post(URL, body, key="key-same")
            with lock:
                results.append(response)
        finally:
            api.close()

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(results) == 8
    assert {r.status_code for r in results} == {201}
    assert len({r.json()["id"] for r in results}) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in results) == 7
    assert sandbox.admin.effect_count("ses_incompatible") == 1


def test_concurrent_different_keys_with_the_same_revision_one_wins(sandbox: SandboxHandle) -> None:
    """expected_revision serialises competing decisions: exactly one is accepted, the rest are stale."""
    body = {"decision": "retry_restore", "reason": "race", "expected_revision": 5}
    statuses: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def send() -> None:
        api = SandboxApi(sandbox.url, sandbox.api_key)
        try:
            barrier.wait()
            response = api.post(URL, body, key=str(uuid.uuid4()))
            with lock:
                statuses.append(response.status_code)
        finally:
            api.close()

    threads = [threading.Thread(target=send) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(statuses) == [201, 409, 409, 409, 409, 409]
    assert sandbox.admin.effect_count("ses_incompatible") == 1


def test_receipt_ids_are_unique_per_effect(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    a = sandbox_api.decide("ses_incompatible", "close").json()["id"]
    b = sandbox_api.decide("ses_healthy", "close").json()["id"]
    c = sandbox_api.resume("ses_stopped_resumable").json()["id"]
    assert len({a, b, c}) == 3
    assert sandbox.admin.effect_counts() == {
        "ses_incompatible": 1,
        "ses_healthy": 1,
        "ses_stopped_resumable": 1,
    }
