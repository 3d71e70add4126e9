"""Scenario files: coverage of the runbook's branches, consistency with the state machine, log lines, loader."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from bot.clock import ManualClock, isoformat, parse_time
from bot.sandbox import (
    SandboxAdminError,
    SandboxHandle,
    Scenario,
    ScenarioError,
    builtin_scenarios_dir,
    load_scenarios,
    worker_log_lines,
)
from bot.sandbox._scenarios import resolve_time
from tests.fixtures.sandbox import SandboxApi

ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
SCENARIOS = load_scenarios(builtin_scenarios_dir())
BY_ID = {s.id: s for s in SCENARIOS}

REQUIRED_BRANCHES = {
    "closed",
    "outcome_unknown_unanswered",
    "outcome_unknown_checkpoint_unavailable",
    "outcome_unknown_covered_by_checkpoint",
    "context_gap",
    "restore_failed_backoff",
    "restore_stopped_transient_outage",
    "restore_stopped_permanent_damage",
    "restore_stopped_execution_gone",
    "incompatible_checkpoint",
    "startup_failed_backoff",
    "startup_failed_stopped",
    "stopped_resumable",
    "stopped_resumable_reclaiming",
    "healthy",
    "relaunched_after_failures",
    "outcome_unknown_over_restore_limit",
    "stopped_not_resumable_no_checkpoint",
    "outcome_unknown_unanswered_stray_worker",
}

# What the runbook says each branch's worker log shows (substrings of this session's lines).
EXPECTED_LOG_TEXT = {
    "unknown_unanswered": [
        "gave no terminal within 5000ms of its interrupt",
        '"stage":"engine_terminal","outcome":"timeout"',
        '"event":"late_sdk_interrupt_answered"',
        '"reason_code":"deadline_exceeded"',
        "worker.stopping kind=failed",
    ],
    "unknown_checkpoint_unavailable": [
        '"stage":"finalize_finished","outcome":"failed","reason":"CHECKPOINT_UNAVAILABLE"'
    ],
    "unknown_covered": [
        "ended before its interrupt was answered",
        '"stage":"finalize_finished","outcome":"ok"',
    ],
    "restore_stopped_transient": [
        '"event":"worker.checkpoint.restore_unavailable"',
        "startup timeout after 3600s",
    ],
    "restore_stopped_damage": [
        '"event":"worker.checkpoint.restore_refused"',
        "NoSuchKey",
        "CHECKPOINT_UNAVAILABLE",
    ],
    "restore_execution_gone": ["Killed"],
    "incompatible": ["INCOMPATIBLE_CHECKPOINT"],
    "startup_backoff": ["git clone failed", "worker.stopping kind=failed session_id=ses_startup_backoff"],
    "startup_stopped": ["credentials refused", '"event":"worker.release.stop_kind_refused"'],
}


def test_builtin_scenarios_cover_every_branch() -> None:
    assert len(SCENARIOS) >= 10
    assert {s.branch for s in SCENARIOS} >= REQUIRED_BRANCHES
    assert len({s.id for s in SCENARIOS}) == len(SCENARIOS)
    assert len({s.session_id for s in SCENARIOS}) == len(SCENARIOS)
    for scenario in SCENARIOS:
        assert ID.match(scenario.session_id) and scenario.session_id.startswith("ses_")
        assert scenario.title and len(scenario.description) > 40
        assert scenario.source is not None and scenario.source.parent == builtin_scenarios_dir()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_scenario_state_is_consistent_with_the_runbook(
    sandbox: SandboxHandle, sandbox_api: SandboxApi, scenario: Scenario, clock: ManualClock
) -> None:
    detail = sandbox_api.session(scenario.session_id)
    attention = detail["attention"]
    events = sandbox_api.get(f"/v1/sessions/{scenario.session_id}/events").json()["events"]
    turns = sandbox_api.get(f"/v1/sessions/{scenario.session_id}/turns").json()["turns"]
    if attention and attention["code"] in {"RESTORE_FAILED", "STARTUP_FAILED"}:
        name = "checkpoint_restore_failed" if attention["code"] == "RESTORE_FAILED" else "startup_failed"
        failures = [e for e in events if e["name"] == name]
        # R2.5 / R2.12: every failure left its event; the last one matches the attention block.
        assert [e["failures"] for e in failures] == list(range(1, attention["failures"] + 1))
        assert failures[-1]["reason"] == attention["reason"]
        relaunched = attention["retry_at"] is None and detail["admission_state"] == "open"
        if relaunched:
            # R2.1: the backoff of the last failure passed and the next generation is starting.
            assert parse_time(failures[-1]["retry_at"]) <= clock.now()
            assert detail["status"] == "running" and detail["execution"]["state"] == "running"
            assert attention["failures"] in {1, 2}
        else:
            assert failures[-1]["retry_at"] == attention["retry_at"]
        if attention["retry_at"] is None and not relaunched:
            assert detail["admission_state"] == "recovery_required" and detail["status"] == "failed"
            assert attention["failures"] == 3 or attention["reason"] == "incompatible_checkpoint"
        elif not relaunched:
            # R2.1: 30 s after the 1st failure, 60 s after the 2nd; still in the future.
            backoff = (parse_time(attention["retry_at"]) - parse_time(failures[-1]["at"])).total_seconds()
            assert backoff == {1: 30, 2: 60}[attention["failures"]]
            assert parse_time(attention["retry_at"]) > clock.now()
            assert detail["admission_state"] == "open"
        assert (detail["checkpoint"] is None) == (attention["code"] == "STARTUP_FAILED")
    unknown = [t for t in turns if t["status"] == "outcome_unknown"]
    if attention and attention["code"] == "OUTCOME_UNKNOWN":
        assert len(unknown) == 1 and unknown[0]["terminal_reason"] == attention["reason"]
        assert detail["admission_state"] == "recovery_required" and detail["status"] == "failed"  # R3.7
    elif scenario.id == "unknown_over_restore_limit":
        # The attention block shows the restore failures; the unknown turn still heads the queue (R3.7).
        assert len(unknown) == 1 and detail["admission_state"] == "recovery_required"
    else:
        assert unknown == []
    if detail["resumable"]:
        assert detail["status"] == "stopped" and detail["checkpoint"] is not None
    if scenario.id == "incompatible":
        assert attention == {
            "code": "RESTORE_FAILED",
            "reason": "incompatible_checkpoint",
            "failures": 1,
            "retry_at": None,
        }
    if scenario.id == "restore_execution_gone":
        assert attention["reason"] == "execution_gone"
    if scenario.id == "unknown_unanswered":
        assert detail["execution"]["state"] != "gone"
    if scenario.id in {"unknown_checkpoint_unavailable", "unknown_covered"}:
        assert detail["execution"]["state"] == "gone"
    if scenario.id == "unknown_covered":
        assert detail["checkpoint"]["covers_turn_id"] == unknown[0]["id"]
    if scenario.id == "healthy":
        assert attention is None and detail["status"] == "running" and detail["admission_state"] == "open"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_worker_logs_mix_formats_other_sessions_and_garbage(scenario: Scenario, clock: ManualClock) -> None:
    lines = worker_log_lines(scenario, clock.now())
    assert lines == sorted(lines, key=lambda line: line.at)
    own = [line.text for line in lines if scenario.session_id in line.text]
    assert own, "the worker's own lines"
    others = re.findall(r"ses_[a-z_0-9]+", " ".join(line.text for line in lines))
    assert set(others) - {scenario.session_id}, "lines of other sessions"
    garbage = []
    for line in lines:
        try:
            ok = isinstance(json.loads(line.text), dict)
        except ValueError:
            ok = "session_id=" in line.text
        if not ok:
            garbage.append(line.text)
    assert garbage, "at least one unparseable line"
    for line in lines:
        if line.text.startswith('{"ts"') and line.text not in garbage:
            assert json.loads(line.text)["ts"] == isoformat(line.at)
        assert line.render(timestamp=True) == f"{isoformat(line.at)} {line.text}"
        assert "\n" not in line.text
    for needle in EXPECTED_LOG_TEXT.get(scenario.id, []):
        assert any(needle in line.text for line in lines), needle


def test_interrupt_stage_lines_carry_elapsed_ms_and_group_ids(clock: ManualClock) -> None:
    lines = worker_log_lines(BY_ID["unknown_checkpoint_unavailable"], clock.now())
    stages = [json.loads(line.text) for line in lines if "worker.turn.interrupt.stage" in line.text]
    ours = [s for s in stages if s["session_id"] == "ses_unknown_ckpt_unavailable"]
    assert [s["stage"] for s in ours] == [
        "control_received",
        "sdk_interrupt_called",
        "sdk_interrupt_answered",
        "engine_terminal",
        "capture_started",
        "capture_finished",
        "finalize_started",
        "finalize_finished",
    ]  # R3.2 order
    assert all({"turn_id", "control_id", "elapsed_ms"} <= set(s) for s in ours)
    assert [s["elapsed_ms"] for s in ours] == sorted(s["elapsed_ms"] for s in ours)


def test_admin_worker_logs_match_the_python_function(sandbox: SandboxHandle, clock: ManualClock) -> None:
    for scenario in SCENARIOS:
        expected = [line.to_json() for line in worker_log_lines(scenario, clock.now())]
        assert sandbox.admin.worker_logs(scenario.session_id) == expected


def test_times_are_relative_to_the_clock_at_load(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    later = ManualClock()
    later.advance(86400)
    sb = sandbox_factory(clock=later, scenarios=["restore_backoff"])
    api = SandboxApi(sb.url, sb.api_key)
    try:
        detail = api.session("ses_restore_backoff")
    finally:
        api.close()
    assert detail["attention"]["retry_at"] == isoformat(later.now() + timedelta(seconds=20))
    assert sb.admin.scenarios()[0]["loaded"] is True and len(sb.admin.scenarios()) == 1


def test_resolve_time_units() -> None:
    now = ManualClock().now()
    assert resolve_time("-30s", now) == now - timedelta(seconds=30)
    assert resolve_time("+2m", now) == now + timedelta(minutes=2)
    assert resolve_time("-1h", now) == now - timedelta(hours=1)
    assert resolve_time("-3d", now) == now - timedelta(days=3)
    assert resolve_time("250ms", now) == now + timedelta(milliseconds=250)
    assert resolve_time(90, now) == now + timedelta(seconds=90)
    assert resolve_time("now", now) == now
    assert resolve_time("2026-01-01T00:00:00Z", now) == parse_time("2026-01-01T00:00:00Z")
    assert resolve_time(None, now) is None
    for bad in ("yesterday", "-5x", True, [1]):
        with pytest.raises(ValueError):
            resolve_time(bad, now)


# ---------------------------------------------------------------- loader errors

GOOD = """\
id: tiny
title: Tiny
description: A tiny scenario.
branch: healthy
session: {id: ses_tiny, status: running, execution: {state: running}}
"""


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- just\n- a list\n", "a scenario is a mapping"),
        (GOOD + "extra: 1\n", "unknown key 'extra'"),
        (GOOD.replace("ses_tiny", "bad id!"), "session.id must match"),
        (GOOD.replace("status: running", "status: sleeping"), "session.status"),
        (GOOD + "turns: [{id: t1, status: outcome_unknown}]\n", "terminal_reason"),
        (
            GOOD + "turns: [{id: t1, status: completed, terminal_reason: interrupt_unanswered}]\n",
            "only for outcome_unknown",
        ),
        (GOOD + "turns: [{id: t1, status: completed}, {id: t1, status: completed}]\n", "used twice"),
        (GOOD + "events: [{name: x, at: soon}]\n", "not a time"),
        (GOOD + "worker_logs: [{at: -1s, json: {a: 1}, text: both}]\n", "exactly one of"),
        (GOOD.replace("title: Tiny", "title: ''"), "'title' must be a non-empty string"),
        (GOOD.replace("{state: running}", "{state: gone, alive: true}"), "a gone worker cannot be alive"),
        ("id: x\ntitle: [unclosed\n", "not valid YAML"),
        ("!!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ],
)
def test_invalid_scenarios_are_reported_with_file_and_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as exc:
        load_scenarios(path)
    assert any(str(path) in p and problem in p for p in exc.value.problems), exc.value.problems


def test_duplicate_ids_in_a_folder(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD, encoding="utf-8")
    (tmp_path / "b.yaml").write_text(GOOD.replace("ses_tiny", "ses_tiny2"), encoding="utf-8")
    with pytest.raises(ScenarioError, match="scenario id 'tiny' also used"):
        load_scenarios(tmp_path)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenarios(tmp_path / "missing.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScenarioError, match="no scenario files"):
        load_scenarios(tmp_path / "empty")


def test_custom_scenario_folder_and_reload(tmp_path: Path, sandbox_factory: Callable[..., SandboxHandle]) -> None:
    (tmp_path / "tiny.yaml").write_text(GOOD, encoding="utf-8")
    sb = sandbox_factory(scenarios=tmp_path)
    api = SandboxApi(sb.url, sb.api_key)
    try:
        assert api.session("ses_tiny")["revision"] == 1
        assert api.get("/v1/sessions/ses_healthy").status_code == 404
        assert api.decide("ses_tiny", "close").status_code == 201
        assert sb.admin.effect_count("ses_tiny") == 1
        sb.admin.load_scenario("tiny")
        assert api.session("ses_tiny")["status"] == "running"
        assert sb.admin.effect_count("ses_tiny") == 0
    finally:
        api.close()
    with pytest.raises(SandboxAdminError) as exc:
        sb.admin.load_scenario("nope")
    assert exc.value.status == 404


def test_reset_restores_every_scenario_and_clears_effects(sandbox: SandboxHandle, sandbox_api: SandboxApi) -> None:
    sandbox_api.decide("ses_healthy", "close")
    sandbox.admin.create_session({"session": {"id": "ses_extra"}})
    sandbox.admin.fault("rate_limit", "*", times=None)
    sandbox.admin.reset()
    assert sandbox_api.session("ses_healthy")["status"] == "running"
    assert sandbox_api.get("/v1/sessions/ses_extra").status_code == 404
    assert sandbox.admin.effect_counts() == {} and sandbox.admin.faults() == []


def test_create_session_validates(sandbox: SandboxHandle) -> None:
    with pytest.raises(SandboxAdminError) as bad:
        sandbox.admin.create_session({"session": {"id": "bad id"}})
    assert bad.value.status == 400
    with pytest.raises(SandboxAdminError) as taken:
        sandbox.admin.create_session({"session": {"id": "ses_healthy"}})
    assert taken.value.status == 409


def test_scenario_list_by_builtin_id_or_none(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    some = sandbox_factory(scenarios=["healthy", "closed"])
    assert {s["session_id"] for s in some.admin.scenarios()} == {"ses_healthy", "ses_closed"}
    empty = sandbox_factory(scenarios=None)
    assert empty.admin.scenarios() == []
    with pytest.raises(ValueError, match="no builtin scenario"):
        sandbox_factory(scenarios=["nope"])
