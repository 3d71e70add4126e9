"""Random walks through the state machine over HTTP: the runbook's invariants hold after every step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.clock import parse_time
from bot.sandbox import SandboxAdminError, SandboxHandle, builtin_scenarios_dir, load_scenarios
from tests.fixtures.sandbox import SandboxApi

SESSIONS = sorted(s.session_id for s in load_scenarios(builtin_scenarios_dir()))
DECISIONS = ["retry_restore", "start_fresh", "abandon", "confirm_completed", "close"]

sid = st.sampled_from(SESSIONS)
step = st.one_of(
    st.tuples(st.just("advance"), st.sampled_from([1, 20, 30, 60, 3600])),
    st.tuples(st.just("pass")),
    st.tuples(st.just("fail_restore"), sid, st.sampled_from(["restore_refused", "incompatible_checkpoint"])),
    st.tuples(st.just("fail_startup"), sid),
    st.tuples(st.just("ready"), sid),
    st.tuples(st.just("outage"), sid, st.booleans()),
    st.tuples(
        st.just("interrupt"),
        sid,
        st.sampled_from(["interrupt_unanswered", "interrupt_checkpoint_unavailable", None]),
        st.booleans(),
    ),
    st.tuples(st.just("decide"), sid, st.sampled_from(DECISIONS)),
    st.tuples(st.just("resume"), sid),
    st.tuples(st.just("reclaim"), sid, st.booleans()),
)


def _check_invariants(sessions: dict[str, dict[str, Any]], previous: dict[str, dict[str, Any]]) -> None:
    for session_id, s in sessions.items():
        before = previous.get(session_id)
        if before is not None:
            assert s["revision"] >= before["revision"], session_id
            unknown_before = [t["id"] for t in before["turns"] if t["status"] == "outcome_unknown"]
            for turn in s["turns"]:
                if turn["id"] in unknown_before:
                    # R3.8: only abandon / confirm_completed settle it (close leaves it as it was).
                    assert turn["status"] in {"outcome_unknown", "cancelled", "completed"}
        attention = s["attention"]
        if attention and attention["code"] in {"RESTORE_FAILED", "STARTUP_FAILED"}:
            assert 0 <= attention["failures"] <= 3
            if attention["failures"] == 0:  # kept after retry_restore / start_fresh until ready (R5.1)
                assert attention["retry_at"] is None and s["admission_state"] == "open"
            if attention["retry_at"] is not None:
                assert attention["failures"] in {1, 2} and s["admission_state"] == "open"  # R2.1
            if attention["failures"] == 3:
                assert attention["retry_at"] is None
        if s["admission_state"] == "closed":
            assert s["status"] == "closed" and attention is None
        if s["execution"] and s["execution"]["state"] == "gone":
            assert s["execution_internal"]["alive"] is False
        unknown = [t for t in s["turns"] if t["status"] == "outcome_unknown"]
        assert len(unknown) <= 1
        if unknown and s["status"] != "closed":
            assert s["admission_state"] == "recovery_required"  # R3.7
        if s["resumable"]:
            assert s["status"] == "stopped"


def test_random_walks_keep_the_invariants(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    sb = sandbox_factory()
    api = SandboxApi(sb.url, sb.api_key)

    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.lists(step, min_size=1, max_size=20))
    def walk(steps: list[tuple[Any, ...]]) -> None:
        sb.admin.reset()
        accepted = 0
        previous = {s["id"]: s for s in sb.admin.sessions()}
        for action in steps:
            kind = action[0]
            if kind == "advance":
                sb.admin.advance(action[1])
            elif kind == "pass":
                due = {
                    k: parse_time(v["attention"]["retry_at"])
                    for k, v in previous.items()
                    if v["attention"] and v["attention"]["retry_at"]
                }
                now = sb.admin.now()
                result = sb.admin.scheduler_pass()
                for launched in result["launched"]:
                    # R2.1: never a new generation before retry_at.
                    assert launched in due and due[launched] <= now
            elif kind == "decide":
                current = api.session(action[1])
                turns = api.get(f"/v1/sessions/{action[1]}/turns").json()["turns"]
                target = next((t["id"] for t in turns if t["status"] == "outcome_unknown"), None)
                target = target or (turns[0]["id"] if turns else "turn_none")
                extra = (
                    {"target_turn_id": target, "evidence_ref": "ev-1"}
                    if action[2] in {"abandon", "confirm_completed"}
                    else {}
                )
                response = api.decide(action[1], action[2], expected_revision=current["revision"], **extra)
                assert response.status_code in {201, 404, 409}, response.text
                if response.status_code == 201:
                    accepted += 1
                    assert response.json()["session"]["revision"] == current["revision"] + 1
            elif kind == "resume":
                response = api.resume(action[1])
                assert response.status_code in {200, 409, 503}, response.text
                accepted += response.status_code == 200
            else:
                try:
                    if kind == "fail_restore":
                        sb.admin.fail_restore(action[1], action[2])
                    elif kind == "fail_startup":
                        sb.admin.fail_startup(action[1])
                    elif kind == "ready":
                        sb.admin.worker_ready(action[1])
                    elif kind == "outage":
                        sb.admin.store_outage(action[1], action[2])
                    elif kind == "interrupt":
                        sb.admin.interrupt(action[1], action[2], checkpoint_committed=action[3])
                    elif kind == "reclaim":
                        sb.admin.reclamation(action[1], action[2])
                except SandboxAdminError as exc:
                    assert 400 <= exc.status < 500, exc  # a refusal, never a crash
            sessions = {s["id"]: s for s in sb.admin.sessions()}
            _check_invariants(sessions, previous)
            previous = sessions
        assert sum(sb.admin.effect_counts().values()) == accepted

    try:
        walk()
    finally:
        api.close()
