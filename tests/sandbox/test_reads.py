"""GET endpoints per docs/control-host-api.md: detail, sessions needing an operator, turns, one turn, events."""

from __future__ import annotations

import re

import pytest

from bot.sandbox import SandboxHandle, builtin_scenarios_dir, load_scenarios
from tests.fixtures.sandbox import SandboxApi


def test_session_detail_has_the_documented_fields(sandbox_api: SandboxApi) -> None:
    detail = sandbox_api.session("ses_incompatible")
    assert set(detail) == {
        "id",
        "status",
        "admission_state",
        "revision",
        "resumable",
        "attention",
        "checkpoint",
        "execution",
        "queued_inputs",
    }
    assert detail["checkpoint"] == {
        "id": "ckpt_ic_1",
        "committed_at": "2026-11-28T10:00:00.000Z",
        "covers_turn_id": "turn_ic1",
    }
    assert detail["execution"]["state"] == "gone"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", detail["execution"]["confirmed_gone_at"])


@pytest.mark.parametrize(
    "path", ["/v1/sessions/ses_nope", "/v1/sessions/bad%20id", "/v1/sessions/ses_healthy/turns/t_x"]
)
def test_unknown_ids_are_404(sandbox_api: SandboxApi, path: str) -> None:
    response = sandbox_api.get(path)
    assert response.status_code == 404 and response.json()["error"]["code"] == "NOT_FOUND"


def test_sessions_needing_an_operator_paginate_with_a_cursor(sandbox_api: SandboxApi) -> None:
    expected = sorted(
        s.session_id
        for s in load_scenarios(builtin_scenarios_dir())
        if s.session["admission_state"] == "recovery_required"
    )
    assert len(expected) >= 8
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = sandbox_api.get("/v1/sessions", admission_state="recovery_required", limit=3, cursor=cursor).json()
        assert len(page["sessions"]) <= 3
        seen.extend(s["id"] for s in page["sessions"])
        assert all(s["admission_state"] == "recovery_required" for s in page["sessions"])
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == expected
    assert pages == -(-len(expected) // 3)
    everything = sandbox_api.get("/v1/sessions", limit=1000).json()
    builtin = load_scenarios(builtin_scenarios_dir())
    assert everything["next"] is None and len(everything["sessions"]) == len(builtin)


def test_turns_newest_first_with_status_filter(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    turns = sandbox_api.get("/v1/sessions/ses_unknown_unanswered/turns").json()
    assert [t["id"] for t in turns["turns"]] == ["turn_uu5", "turn_uu4", "turn_uu3"]
    assert turns["next"] is None
    unknown = sandbox_api.get("/v1/sessions/ses_unknown_unanswered/turns", status="outcome_unknown").json()
    assert [(t["id"], t["terminal_reason"], t["control_id"]) for t in unknown["turns"]] == [
        ("turn_uu5", "interrupt_unanswered", "ctl_uu5")
    ]
    first = sandbox_api.get("/v1/sessions/ses_unknown_unanswered/turns", limit=2).json()
    assert [t["id"] for t in first["turns"]] == ["turn_uu5", "turn_uu4"] and first["next"] == "turn_uu4"
    rest = sandbox_api.get("/v1/sessions/ses_unknown_unanswered/turns", limit=2, cursor=first["next"]).json()
    assert [t["id"] for t in rest["turns"]] == ["turn_uu3"] and rest["next"] is None
    one = sandbox_api.get("/v1/sessions/ses_unknown_unanswered/turns/turn_uu5").json()
    assert set(one) == {"id", "status", "terminal_reason", "control_id", "started_at", "ended_at"}
    assert one["status"] == "outcome_unknown"


def test_events_after_and_next(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    url = "/v1/sessions/ses_restore_damaged/events"
    page = sandbox_api.get(url).json()
    assert [e["seq"] for e in page["events"]] == [1, 2, 3]
    assert [e["name"] for e in page["events"]] == ["checkpoint_restore_failed"] * 3
    assert page["events"][0]["failures"] == 1 and page["events"][0]["reason"] == "restore_refused"
    assert page["next"] == 3
    assert sandbox_api.get(url, after=page["next"]).json() == {"events": [], "next": 3}
    sandbox_api.decide("ses_restore_damaged", "retry_restore")
    new = sandbox_api.get(url, after=page["next"]).json()
    assert [e["seq"] for e in new["events"]] == [4, 5]
    assert {e["name"] for e in new["events"]} == {"generation_launched", "recovery_decision"}
    limited = sandbox_api.get(url, after=1, limit=2).json()
    assert [e["seq"] for e in limited["events"]] == [2, 3] and limited["next"] == 3


@pytest.mark.parametrize("query", [{"limit": "0"}, {"limit": "abc"}, {"after": "-1"}])
def test_bad_query_parameters_are_400(sandbox_api: SandboxApi, query: dict[str, str]) -> None:
    response = sandbox_api.get("/v1/sessions/ses_healthy/events", **query)
    assert response.status_code == 400


def test_wrong_method_and_unknown_route(sandbox_api: SandboxApi) -> None:
    wrong = sandbox_api.client.delete("/v1/sessions/ses_healthy")
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "GET"
    assert sandbox_api.get("/v1/nothing").status_code == 404
    assert sandbox_api.get("/v2/sessions").status_code == 404
