"""Sessions that stop on a schedule (``POST /_sandbox/schedule``): one by one, in a burst, every so
often; over HTTP against the sandbox, and ``recover-bot sandbox --stop-every`` as a process."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.clock import ManualClock
from bot.sandbox import SandboxAdminError, SandboxHandle
from tests.fixtures.triage import clone
from tests.fixtures.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sbx(sandbox_factory: Callable[..., SandboxHandle]) -> SandboxHandle:
    return sandbox_factory(scenarios=["healthy", "closed"])


def _listed(sbx: SandboxHandle) -> list[str]:
    """Every page of the public recovery_required listing, as the bot reads it."""
    ids: list[str] = []
    cursor: str | None = None
    with httpx.Client(base_url=sbx.url, headers={"Authorization": f"Bearer {sbx.api_key}"}) as http:
        while True:
            params: dict[str, Any] = {"admission_state": "recovery_required", "limit": 200}
            if cursor:
                params["cursor"] = cursor
            page = http.get("/v1/sessions", params=params).json()
            ids += [s["id"] for s in page["sessions"]]
            cursor = page.get("next")
            if not cursor:
                return ids


def test_planned_stops_happen_at_their_time_on_the_sandbox_clock(sbx: SandboxHandle, clock: ManualClock) -> None:
    for sid in ("ses_sc_a", "ses_sc_b"):
        sbx.admin.create_session(clone("healthy", sid))
    answer = sbx.admin.schedule(
        {
            "stops": [
                {"at": 30, "session": "ses_sc_a"},
                {
                    "at": "2m",
                    "session": "ses_sc_b",
                    "code": "STARTUP_FAILED",
                    "reason": "startup_failed",
                    "failures": 3,
                },
            ]
        }
    )
    assert [p["session"] for p in answer["planned"]] == ["ses_sc_a", "ses_sc_b"]
    assert _listed(sbx) == []
    clock.advance(30)
    assert _listed(sbx) == ["ses_sc_a"]  # the listing read after its time shows it
    clock.advance(90)
    assert _listed(sbx) == ["ses_sc_a", "ses_sc_b"]
    b = sbx.admin.session("ses_sc_b")
    assert b["attention"]["code"] == "STARTUP_FAILED" and b["admission_state"] == "recovery_required"
    assert sbx.admin.scheduled() == {"planned": [], "every": None, "fired": 2}


def test_a_scenario_is_loaded_then_stopped(sbx: SandboxHandle, clock: ManualClock) -> None:
    sid = sbx.scenarios["healthy"].session_id
    sbx.admin.schedule({"stops": [{"at": 10, "scenario": "healthy"}]})
    clock.advance(10)
    assert _listed(sbx) == [sid]


def test_a_burst_creates_and_stops_many_sessions_at_once(sbx: SandboxHandle, clock: ManualClock) -> None:
    answer = sbx.admin.schedule({"burst": 450, "at": 5, "prefix": "ses_bst"})
    assert len(answer["planned"]) == 450 and _listed(sbx) == []
    clock.advance(5)
    listed = _listed(sbx)
    assert len(listed) == 450 and listed[0] == "ses_bst_00000"


def test_every_stops_the_next_session_in_turn_and_settles_it_on_its_next_turn(
    sbx: SandboxHandle, clock: ManualClock
) -> None:
    for sid in ("ses_ev_a", "ses_ev_b"):
        sbx.admin.create_session(clone("healthy", sid))
    sbx.admin.schedule({"every": 30, "sessions": ["ses_ev_a", "ses_ev_b"]})
    clock.advance(30)
    assert _listed(sbx) == ["ses_ev_a"]
    clock.advance(30)
    assert _listed(sbx) == ["ses_ev_a", "ses_ev_b"]
    clock.advance(30)
    assert _listed(sbx) == ["ses_ev_b"]  # a flapping session: settled, it stops again on its next turn
    clock.advance(60)
    assert _listed(sbx) == ["ses_ev_a"]
    sbx.admin.clear_schedule()
    clock.advance(300)
    assert _listed(sbx) == ["ses_ev_a"]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({}, "nothing to plan"),
        ({"stops": [{"at": 5, "session": "ses_nobody"}]}, 'give an existing "session"'),
        ({"stops": [{"at": 5, "scenario": "no_such"}]}, "no scenario 'no_such'"),
        ({"burst": 0}, "burst must be a whole number from 1 to 20000"),
        ({"every": -1}, "every must be a number of seconds above 0"),
        ({"stops": [{"at": "soon", "session": "ses_sc_a"}]}, "at:"),
    ],
)
def test_a_schedule_it_cannot_follow_is_refused_with_what_to_fix(
    sbx: SandboxHandle, body: dict[str, Any], said: str
) -> None:
    sbx.admin.create_session(clone("healthy", "ses_sc_a"))
    with pytest.raises(SandboxAdminError) as info:
        sbx.admin.schedule(body)
    assert info.value.status == 400 and said in str(info.value)
    assert sbx.admin.scheduled()["planned"] == []


@pytest.mark.subprocess
def test_the_sandbox_command_stops_a_session_every_so_often(tmp_path: Path) -> None:
    """``recover-bot sandbox --stop-every 1s``: on the real clock, with nobody asking meanwhile."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "sandbox",
            "--port",
            "0",
            "--scenarios",
            str(_scenarios(tmp_path)),
            "--stop-every",
            "1s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in iter(proc.stdout.readline, "")], daemon=True).start()
    try:
        out: list[str] = []

        def started() -> bool:
            while not lines.empty():
                out.append(lines.get_nowait())
            if not any("stops: every 1 s" in line for line in out):
                raise AssertionError("".join(out))
            return True

        eventually(started, 30, "'stops: every 1 s' in the sandbox's output")
        url = next(line.split()[-1] for line in out if "listening on" in line)
        fired = eventually(lambda: httpx.get(f"{url}/_sandbox/schedule").json()["fired"], 10, "a scheduled stop fired")
        assert fired >= 1, out
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def _scenarios(tmp_path: Path) -> Path:
    """A scenario folder of two healthy sessions (the builtin ones are mostly stopped already)."""
    import yaml

    folder = tmp_path / "scn"
    folder.mkdir()
    for sid in ("ses_cli_a", "ses_cli_b"):
        spec = clone("healthy", sid)
        data = {"id": sid, "title": sid, "description": "healthy copy", "branch": "healthy", **spec}
        (folder / f"{sid}.yaml").write_text(yaml.safe_dump(data))
    return folder
