"""Mass-incident mode: many stuck sessions with mixed causes, the outage's end, pagination, traffic options."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from bot.clock import ManualClock, parse_time
from bot.sandbox import SandboxAdminError, SandboxHandle
from tests.fixtures.sandbox import SandboxApi

COUNT = 1000


@pytest.fixture
def incident(sandbox_factory: Callable[..., SandboxHandle]) -> tuple[SandboxHandle, SandboxApi, dict[str, Any]]:
    sb = sandbox_factory(scenarios=None)
    info = sb.admin.incident(COUNT, outage_seconds=600, seed=7)
    api = SandboxApi(sb.url, sb.api_key)
    return sb, api, info


def _needing_operator(api: SandboxApi, limit: int) -> tuple[list[dict[str, Any]], int]:
    sessions: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        page = api.get("/v1/sessions", admission_state="recovery_required", limit=limit, cursor=cursor).json()
        pages += 1
        assert set(page) == {"sessions", "next"}
        assert len(page["sessions"]) <= limit
        sessions.extend(page["sessions"])
        cursor = page["next"]
        if cursor is None:
            return sessions, pages
        assert cursor == page["sessions"][-1]["id"]


def _by_cause(sb: SandboxHandle) -> dict[str, list[str]]:
    causes: dict[str, list[str]] = {}
    for view in sb.admin.sessions():
        if view["incident_cause"]:
            causes.setdefault(view["incident_cause"], []).append(view["id"])
    return causes


def test_an_incident_has_every_cause_and_pages_through_the_operator_list(incident: Any) -> None:
    sb, api, info = incident
    assert info["sessions"] == COUNT and info["outage_active"] is True
    assert set(info["by_cause"]) == {
        "transient",
        "execution_gone",
        "permanent",
        "incompatible",
        "startup",
        "unknown",
        "backoff",
    }
    assert sum(info["by_cause"].values()) == COUNT
    listed, pages = _needing_operator(api, limit=97)
    ids = [s["id"] for s in listed]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    # Backoff sessions are still admitted (R2.1); everything else waits for an operator.
    assert len(listed) == COUNT - info["by_cause"]["backoff"]
    assert pages == -(-len(listed) // 97)
    assert all(s["admission_state"] == "recovery_required" for s in listed)
    attention = Counter((s["attention"]["code"], s["attention"]["reason"]) for s in listed)
    assert attention[("RESTORE_FAILED", "restore_unavailable")] == info["by_cause"]["transient"]
    assert attention[("RESTORE_FAILED", "incompatible_checkpoint")] == info["by_cause"]["incompatible"]
    assert attention[("STARTUP_FAILED", "store_unavailable")] == info["by_cause"]["startup"]
    assert sum(v for (code, _), v in attention.items() if code == "OUTCOME_UNKNOWN") == info["by_cause"]["unknown"]
    # A status filter narrows the same list; a page of 1000 holds it all.
    everything = api.get("/v1/sessions", admission_state="recovery_required", limit=1000).json()
    assert everything["next"] is None and len(everything["sessions"]) == len(listed)


def test_every_incident_session_is_consistent_with_the_runbook(incident: Any, clock: ManualClock) -> None:
    sb, api, _ = incident
    for view in sb.admin.sessions():
        sid, attention = view["id"], view["attention"]
        events = api.get(f"/v1/sessions/{sid}/events", limit=1000).json()["events"]
        if attention and attention["code"] in {"RESTORE_FAILED", "STARTUP_FAILED"}:
            name = "checkpoint_restore_failed" if attention["code"] == "RESTORE_FAILED" else "startup_failed"
            failed = [e for e in events if e["name"] == name]
            assert [e["failures"] for e in failed] == list(range(1, attention["failures"] + 1)), sid
            assert failed[-1]["retry_at"] == attention["retry_at"], sid
            assert (view["checkpoint"] is None) == (attention["code"] == "STARTUP_FAILED"), sid
            for earlier, later in zip(failed, failed[1:], strict=False):
                assert parse_time(later["at"]) > parse_time(earlier["retry_at"]), sid  # R2.1: after the backoff
            if attention["retry_at"] is None:
                assert view["admission_state"] == "recovery_required" and view["status"] == "failed", sid
                assert attention["failures"] == 3 or attention["reason"] == "incompatible_checkpoint", sid
            else:
                assert parse_time(attention["retry_at"]) > clock.now(), sid
                assert view["admission_state"] == "open" and attention["failures"] in {1, 2}, sid
        unknown = [t for t in view["turns"] if t["status"] == "outcome_unknown"]
        if attention and attention["code"] == "OUTCOME_UNKNOWN":
            assert len(unknown) == 1 and unknown[0]["terminal_reason"] == attention["reason"], sid
        else:
            assert unknown == [], sid
    lines = sb.admin.worker_logs("ses_inc_00001")
    assert lines and all("ses_inc_00001" in line["text"] or line["text"] == "Killed" for line in lines)


def test_after_the_outage_retry_restore_succeeds_and_the_worker_stays_up(incident: Any) -> None:
    sb, api, _ = incident
    during, after = _by_cause(sb)["transient"][:2]
    # During the outage: accepted (R2.10), and the new worker retries inside without failing (R2.6).
    assert api.decide(during, "retry_restore").status_code == 201
    sb.admin.advance(300)
    waiting = sb.admin.session(during)
    assert waiting["store_outage"] is True and waiting["execution_internal"]["phase"] == "starting"
    assert waiting["attention"]["failures"] == 0 and waiting["status"] == "running"
    sb.admin.advance(301)  # the outage is over
    sb.admin.scheduler_pass()
    up = sb.admin.session(during)
    assert up["execution_internal"]["phase"] == "ready" and up["store_outage"] is False
    assert any('"event":"worker.ready"' in line["text"] for line in sb.admin.worker_logs(during))
    # After the outage: accepted, up a second later, and still up much later.
    assert api.decide(after, "retry_restore").status_code == 201
    sb.admin.advance(2)
    sb.admin.scheduler_pass()
    sb.admin.advance(3600)
    sb.admin.scheduler_pass()
    for sid in (during, after):
        view = sb.admin.session(sid)
        assert view["status"] == "running" and view["attention"] is None, sid
        assert view["execution_internal"]["phase"] == "ready" and view["execution"]["state"] == "running", sid
    assert sb.admin.incident_info()["outage_active"] is False


def test_causes_the_retry_cannot_cure_fail_again_and_start_fresh_works(incident: Any) -> None:
    sb, api, _ = incident
    causes = _by_cause(sb)
    permanent, incompatible = causes["permanent"][0], causes["incompatible"][0]
    assert api.decide(permanent, "retry_restore").status_code == 201
    assert api.decide(incompatible, "retry_restore").status_code == 201
    sb.admin.advance(3)
    again = api.session(permanent)["attention"]
    assert again["code"] == "RESTORE_FAILED" and again["reason"] == "restore_refused"
    assert again["failures"] == 1 and again["retry_at"] is not None  # R2.8: counted, backoff again
    stopped = api.session(incompatible)
    assert stopped["attention"]["failures"] == 1 and stopped["attention"]["retry_at"] is None  # R2.3
    assert stopped["admission_state"] == "recovery_required"
    sb.admin.advance(600)  # past the outage
    assert api.decide(incompatible, "start_fresh").status_code == 201
    sb.admin.advance(2)
    fresh = sb.admin.session(incompatible)
    assert fresh["checkpoint"] is None and fresh["execution_internal"]["phase"] == "ready"


def test_killed_workers_die_again_during_the_outage_only(incident: Any) -> None:
    sb, api, _ = incident
    first, second = _by_cause(sb)["execution_gone"][:2]
    assert api.decide(first, "retry_restore").status_code == 201
    sb.admin.advance(21)
    attention = api.session(first)["attention"]
    assert attention["reason"] == "execution_gone" and attention["failures"] == 1
    sb.admin.advance(600)
    assert api.decide(second, "retry_restore").status_code == 201
    sb.admin.advance(30)
    assert sb.admin.session(second)["execution_internal"]["phase"] == "ready"


def test_startup_unknown_and_backoff_sessions(incident: Any) -> None:
    sb, api, _ = incident
    causes = _by_cause(sb)
    startup = causes["startup"][0]
    assert api.decide(startup, "retry_restore").status_code == 409  # STARTUP_FAILED: no restore (R2.10)
    assert api.decide(startup, "start_fresh").status_code == 201
    # Unknown turns: abandon is refused until the worker is confirmed gone (R3.9).
    results = Counter()
    for sid in causes["unknown"]:
        view = sb.admin.session(sid)
        turn = next(t["id"] for t in view["turns"] if t["status"] == "outcome_unknown")
        response = api.decide(sid, "abandon", target_turn_id=turn)
        results[(view["execution"]["state"] == "gone", response.status_code)] += 1
    assert set(results) == {(True, 201), (False, 409)}
    # Backoff: the scheduler relaunches after retry_at; the new worker waits out the outage.
    backoff = causes["backoff"][0]
    assert api.decide(backoff, "retry_restore").status_code == 409  # in backoff (R2.10)
    sb.admin.advance(61)
    assert backoff in sb.admin.scheduler_pass()["launched"]
    assert sb.admin.session(backoff)["store_outage"] is True
    sb.admin.advance(600)
    assert sb.admin.session(startup)["execution_internal"]["phase"] == "ready"
    assert sb.admin.session(backoff)["execution_internal"]["phase"] == "ready"


def test_fault_injection_still_applies_to_incident_sessions(incident: Any) -> None:
    sb, api, _ = incident
    sid = _by_cause(sb)["transient"][0]
    sb.admin.fault("server_error", "/v1/sessions/*/recovery-decisions", status=503, times=1)
    key = str(uuid.uuid4())
    failed = api.decide(sid, "retry_restore", key=key)
    assert failed.status_code == 503
    assert api.decide(sid, "retry_restore", key=key).status_code == 201
    assert sb.admin.effect_count(sid) == 1


def test_a_new_incident_replaces_the_old_one_and_bad_input_is_refused(incident: Any) -> None:
    sb, api, _ = incident
    smaller = sb.admin.incident(50, outage_seconds=0, seed=1)
    assert smaller["sessions"] == 50 and smaller["outage_active"] is False
    assert len([v for v in sb.admin.sessions() if v["incident_cause"]]) == 50
    for bad in ({"count": 0}, {"count": 20_001}, {"count": "many"}, {"prefix": "bad prefix!"}):
        with pytest.raises(SandboxAdminError) as info:
            sb.admin._call("POST", "/incident", bad)  # noqa: SLF001 - the raw admin call
        assert info.value.status == 400
    sb.admin.reset()
    assert sb.admin.incident_info() is None and sb.admin.sessions() == []


def test_an_incident_of_one_cause_and_its_outage_ended_now(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    """A checkpoint store's outage alone (the demo's `:incident`): every session of that one cause; ending
    the outage now (the demo's `:fix`) lets a retried worker come up at once, not at the planned end."""
    sb = sandbox_factory(scenarios=None)
    api = SandboxApi(sb.url, sb.api_key)
    info = sb.admin.incident(60, outage_seconds=3600, causes=("transient",))
    assert info["by_cause"] == {"transient": 60} and info["outage_active"] is True
    sid = "ses_inc_00001"
    assert api.decide(sid, "retry_restore").status_code == 201
    sb.admin.advance(5)
    sb.admin.scheduler_pass()
    assert sb.admin.session(sid)["execution_internal"]["phase"] == "starting"  # waits inside (R2.6)
    assert sb.admin.end_outage()["outage_active"] is False
    sb.admin.advance(2)
    sb.admin.scheduler_pass()
    assert sb.admin.session(sid)["execution_internal"]["phase"] == "ready"
    with pytest.raises(SandboxAdminError) as info_bad:
        sb.admin.incident(10, causes=("meteor",))
    assert info_bad.value.status == 400
    sb.admin.reset()
    with pytest.raises(SandboxAdminError) as none:
        sb.admin.end_outage()
    assert none.value.status == 404


def test_per_client_rate_limit_answers_429_with_retry_after(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    sb = sandbox_factory(scenarios=["healthy"], api_keys={"key-a": {"sessions:recover"}, "key-b": {"sessions:recover"}})
    sb.admin.traffic(rate_limit=5, burst=5)
    a, b = SandboxApi(sb.url, "key-a"), SandboxApi(sb.url, "key-b")
    try:
        statuses = [a.get("/v1/sessions/ses_healthy").status_code for _ in range(8)]
        assert statuses[:5] == [200] * 5 and 429 in statuses[5:]
        limited = a.get("/v1/sessions/ses_healthy")
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "RATE_LIMITED" and limited.json()["error"]["retryable"] is True
        assert int(limited.headers["Retry-After"]) >= 1
        assert 1 <= int(limited.headers["RateLimit-Reset-Ms"]) <= 1000
        assert b.get("/v1/sessions/ses_healthy").status_code == 200  # another client has its own budget
        time.sleep(0.25)
        assert a.get("/v1/sessions/ses_healthy").status_code == 200  # tokens come back at the rate
        assert sb.admin.traffic_info()["limited"] >= 2
        assert sb.admin.effect_counts() == {}
        sb.admin.traffic()  # off again
        assert all(a.get("/v1/sessions/ses_healthy").status_code == 200 for _ in range(20))
    finally:
        a.close()
        b.close()


def test_latency_is_added_to_every_public_call_not_to_admin(sandbox_factory: Callable[..., SandboxHandle]) -> None:
    sb = sandbox_factory(scenarios=["healthy"], latency=0.05)
    api = SandboxApi(sb.url, sb.api_key)
    try:
        started = time.monotonic()
        for _ in range(4):
            assert api.get("/v1/sessions/ses_healthy").status_code == 200
        assert time.monotonic() - started >= 0.2
        assert sb.admin.traffic_info()["latency_ms"] == 50
    finally:
        api.close()
    with pytest.raises(SandboxAdminError):
        sb.admin.traffic(latency_ms=-1)


@pytest.mark.subprocess
def test_cli_sandbox_incident(capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    assert main(["sandbox", "--port", "0", "--incident", "0"]) == 2
    assert "--incident takes 1 to 20000 sessions" in capsys.readouterr().err
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "sandbox", "--port", "0", "--incident", "120", "--outage-seconds", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(5)]
        url = lines[0].rsplit(" ", 1)[-1].strip()
        assert "incident: 120 sessions" in lines[4], lines
        page = httpx.get(
            f"{url}/v1/sessions",
            params={"admission_state": "recovery_required", "limit": 1000},
            headers={"Authorization": "Bearer sandbox-key"},
            timeout=10,
        ).json()
        assert sum(s["id"].startswith("ses_inc_") for s in page["sessions"]) > 80
    finally:
        proc.terminate()
        proc.wait(10)
