"""The sandbox's switches for what the seed leaves open, and the R4.1 resume refusal, over its public API.

The seed (R5.1) only says acceptance is not recovery; a real host may clear the attention in its answer
to a decision, keep it until the next worker reports ready (the default), or have workers that never
report ready. The bot is tested against each (tests/decisions/test_observed_recovery.py); these pin
what each switch does at the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bot.sandbox import CLEAR_ATTENTION, KEEP_ATTENTION, NEVER_READY, READY_AT_ONCE, SandboxAdminError
from tests.fixtures.sandbox import SandboxApi

SID = "ses_restore_transient"


def _api(sandbox: Any) -> SandboxApi:
    return SandboxApi(sandbox.url, sandbox.api_key)


def _ready_events(api: SandboxApi, sid: str) -> list[dict[str, Any]]:
    return [e for e in api.get(f"/v1/sessions/{sid}/events").json()["events"] if e["name"] == "worker_ready"]


@pytest.mark.parametrize(
    ("behaviour", "attention"),
    [
        (KEEP_ATTENTION, {"code": "RESTORE_FAILED", "failures": 0}),
        (CLEAR_ATTENTION, None),
        (NEVER_READY, {"code": "RESTORE_FAILED", "failures": 0}),
    ],
)
def test_the_answer_to_retry_restore_under_each_behaviour(
    sandbox_factory: Callable[..., Any], behaviour: str, attention: dict[str, Any] | None
) -> None:
    sandbox = sandbox_factory(ready_behaviour=behaviour)
    api = _api(sandbox)
    try:
        assert api.decide(SID, "retry_restore").status_code == 201
        shown = api.session(SID)
        assert shown["status"] == "running" and shown["admission_state"] == "open"
        if attention is None:
            assert shown["attention"] is None
        else:
            assert {k: shown["attention"][k] for k in attention} == attention
        if behaviour == NEVER_READY:
            with pytest.raises(SandboxAdminError) as refused:
                sandbox.admin.worker_ready(SID)
            assert refused.value.code == "NEVER_READY"
            assert _ready_events(api, SID) == []
            return
        sandbox.admin.worker_ready(SID)
        assert api.session(SID)["attention"] is None
        ready = _ready_events(api, SID)
        assert len(ready) == 1 and ready[0]["generation"] == 2
        assert ready[0]["checkpoint_id"] == "ckpt_rt_7"  # the checkpoint this worker restored
    finally:
        api.close()


def test_a_fast_host_reports_ready_before_the_next_answer(sandbox_factory: Callable[..., Any]) -> None:
    """ready_at_once: the decision is accepted as under keep_attention; the very next request already
    sees the new worker's ready report (attention cleared, a worker_ready event of generation 2)."""
    sandbox = sandbox_factory(ready_behaviour=READY_AT_ONCE)
    api = _api(sandbox)
    try:
        answer = api.decide(SID, "retry_restore")
        assert answer.status_code == 201 and answer.json()["status"] == "accepted"
        shown = api.session(SID)
        assert shown["attention"] is None and shown["status"] == "running"
        ready = _ready_events(api, SID)
        assert len(ready) == 1 and ready[0]["generation"] == 2
    finally:
        api.close()


def test_an_unknown_behaviour_is_refused(sandbox_factory: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match="ready_behaviour must be one of"):
        sandbox_factory(ready_behaviour="sometimes")


def test_a_host_that_does_not_name_the_restored_checkpoint(sandbox_factory: Callable[..., Any]) -> None:
    sandbox = sandbox_factory(ready_names_checkpoint=False)
    api = _api(sandbox)
    try:
        assert api.resume("ses_stopped_resumable").status_code == 200
        sandbox.admin.worker_ready("ses_stopped_resumable")
        ready = _ready_events(api, "ses_stopped_resumable")
        assert len(ready) == 1 and "checkpoint_id" not in ready[0]
    finally:
        api.close()


def test_resume_without_a_committed_checkpoint_is_refused_even_when_resumable(
    sandbox: Any, sandbox_api: SandboxApi
) -> None:
    """R4.1: a stopped session with no committed checkpoint cannot be resumed, whatever ``resumable`` says."""
    sid = "ses_no_ckpt_resumable"
    sandbox.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "stopped",
                "admission_state": "open",
                "revision": 3,
                "resumable": True,
                "attention": None,
                "checkpoint": None,
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    answer = sandbox_api.resume(sid)
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "CHECKPOINT_UNAVAILABLE"
    assert "no committed checkpoint" in answer.json()["error"]["message"]
    assert sandbox.admin.effects(sid) == [] and sandbox.admin.idempotency_records(sid) == []
    assert sandbox_api.session(sid)["status"] == "stopped"
