"""Bearer auth with scopes (R0.1): 401 for a wrong key, 403 on recovery POSTs without sessions:recover."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from bot.sandbox import SandboxHandle
from tests.fixtures.sandbox import SandboxApi

READER = "reader-key-0123456789"
RECOVERER = "recoverer-key-0123456789"


@pytest.fixture
def scoped(sandbox_factory: Callable[..., SandboxHandle]) -> SandboxHandle:
    return sandbox_factory(api_keys={READER: {"sessions:read"}, RECOVERER: {"sessions:read", "sessions:recover"}})


def test_handle_key_is_the_one_with_the_recover_scope(scoped: SandboxHandle) -> None:
    assert scoped.api_key == RECOVERER


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-key"},
        {"Authorization": f"Basic {RECOVERER}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {RECOVERER}x"},
    ],
)
def test_missing_or_wrong_key_is_401_everywhere(scoped: SandboxHandle, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=scoped.url, headers=headers) as client:
        for method, path in [
            ("GET", "/v1/sessions/ses_healthy"),
            ("GET", "/v1/sessions"),
            ("GET", "/v1/sessions/ses_nope"),
            ("POST", "/v1/sessions/ses_healthy/recovery-decisions"),
            ("POST", "/v1/sessions/ses_stopped_resumable/resume"),
        ]:
            response = client.request(
                method, path, json={"decision": "close", "reason": "x"}, headers={"Idempotency-Key": "k"}
            )
            assert response.status_code == 401, (method, path)
            assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert scoped.admin.effect_counts() == {}


def test_key_without_recover_scope_reads_but_cannot_decide_or_resume(scoped: SandboxHandle) -> None:
    reader = SandboxApi(scoped.url, READER)
    try:
        assert reader.get("/v1/sessions/ses_healthy").status_code == 200
        assert reader.get("/v1/sessions/ses_healthy/turns").status_code == 200
        decision = reader.decide("ses_healthy", "close")
        assert decision.status_code == 403 and decision.json()["error"]["code"] == "FORBIDDEN"
        assert "sessions:recover" in decision.json()["error"]["message"]
        resume = reader.resume("ses_stopped_resumable")
        assert resume.status_code == 403
    finally:
        reader.close()
    assert scoped.admin.effect_counts() == {}
    assert scoped.admin.idempotency_records() == []
    recoverer = SandboxApi(scoped.url, RECOVERER)
    try:
        assert recoverer.decide("ses_healthy", "close").status_code == 201
    finally:
        recoverer.close()


def test_keys_never_reach_the_request_log(scoped: SandboxHandle) -> None:
    api = SandboxApi(scoped.url, RECOVERER)
    try:
        api.decide("ses_healthy", "close")
    finally:
        api.close()
    dump = repr(scoped.admin.requests())
    assert RECOVERER not in dump and "Authorization" not in dump


def test_start_without_a_recover_key_is_refused(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    with pytest.raises(ValueError, match="sessions:recover"):
        sandbox_factory(api_keys={READER: {"sessions:read"}})


def test_default_key_is_random_per_sandbox(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    a = sandbox_factory(scenarios=None)
    b = sandbox_factory(scenarios=None)
    assert a.api_key != b.api_key and len(a.api_key) > 20
    with httpx.Client(base_url=b.url, headers={"Authorization": f"Bearer {a.api_key}"}) as client:
        assert client.get("/v1/sessions").status_code == 401
