"""The demo finishes its stories: a wait is time passing for the sandbox too (each wait step runs a
sandbox scheduler pass), so an approval given before `:pass` is sent once a pass confirms the worker
gone (R3.9), after the effects re-check (R3.10), exactly once; `:release` ends a workspace reclamation
so a resume goes through (R4.2); Docker-only commands say they need a Docker engine.

The console over the real router and the sandbox control host over HTTP; the sandbox's effect log is
the ground truth for what was executed.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from bot.console import DemoClock, compose_demo, run_console
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import Settings


@pytest.fixture
def demo_sandbox() -> Any:
    with start_sandbox() as handle:
        yield handle


def _demo(sbx: SandboxHandle, tmp_path: Path, script: str) -> tuple[int, str]:
    # As `recover-bot demo` composes it: the console's ports, watch and the ladder speaking here.
    composed, demo = compose_demo(Settings(db_path=tmp_path / "demo.db"), sbx, clock=DemoClock(sbx, pace=0))
    out = io.StringIO()
    code = run_console(
        composed.router, stdin=io.StringIO(script), stdout=out, allow_switch_user=True, sandbox=sbx, demo=demo
    )
    return code, out.getvalue()


def test_an_approval_given_before_the_scheduler_pass_is_executed_once_after_it(
    demo_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    sid = "ses_unknown_unanswered"
    assert demo_sandbox.admin.session(sid)["execution"]["state"] != "gone"  # the worker is not gone yet
    script = "\n".join(
        [
            f'/recover decide {sid} abandon --turn turn_uu5 --effects "nothing outside" --reason "checked the tools"',
            ":as bob",
            "1",  # bob approves at once, before any :pass
            "/recover pending",
            "RECHECK",
            "/recover pending",
        ]
    )
    # The request id is only known once it is made: run in two halves on the same store.
    code, out = _demo(demo_sandbox, tmp_path, script.split("\nRECHECK")[0] + "\n")
    assert "waits for the scheduler to confirm the previous worker gone" in out
    assert "The scheduler confirmed the worker" in out and "Effects re-check needed" in out
    assert out.count("[!] Effects re-check needed") == 1  # said once, not once per route it took
    assert demo_sandbox.admin.effect_counts() == {}  # nothing sent before the re-check (R3.10)
    request_id = out.split("/recover confirm ")[1].split()[0]
    code, out = _demo(
        demo_sandbox, tmp_path, f":as bob\n/recover confirm {request_id}\n/recover confirm {request_id}\n"
    )
    assert "executed" in out, out
    assert demo_sandbox.admin.effect_counts() == {sid: 1}  # executed exactly once
    assert demo_sandbox.admin.session(sid)["execution"]["state"] == "gone"


def test_release_ends_a_reclamation_and_the_resume_goes_through(demo_sandbox: SandboxHandle, tmp_path: Path) -> None:
    sid = "ses_resume_reclaiming"
    code, out = _demo(demo_sandbox, tmp_path, f"/recover resume {sid}\n:release\n/recover resume {sid}\n")
    first, second = out.split("Workspace reclamation ended:")
    assert "BACKEND_UNAVAILABLE" in first and sid in second.splitlines()[0]
    assert demo_sandbox.admin.session(sid)["reclamation_claim"] is False
    resumed = [r for r in demo_sandbox.admin.requests(sid) if str(r.get("path", "")).endswith("/resume")]
    assert resumed and resumed[-1].get("status") in (200, 202), resumed[-1]


@pytest.mark.parametrize("command", ["status", "dryrun", "preflight"])
def test_docker_only_commands_say_they_need_a_docker_engine(
    demo_sandbox: SandboxHandle, tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    code, out = _demo(demo_sandbox, tmp_path, f"/recover {command}\n")
    assert code == 1 and f"`/recover {command}` needs a Docker engine" in out
    if not Path("/var/run/docker.sock").exists():  # how to give it one
        assert "DOCKER_HOST=unix:///var/run/docker.sock recover-bot demo" in out
    assert "RECOVER_INSTALLATION is not set" not in out


def test_stop_lets_a_person_watch_the_watcher_post_each_stop_once(demo_sandbox: SandboxHandle, tmp_path: Path) -> None:
    """`:stop <session>` stops it in the sandbox and the watcher polls once, posting to the console as
    to the watch channel; the same stop again is not posted twice (R2.1, R3.1)."""
    sid = "ses_resume_reclaiming"
    script = (
        f":stop ses_closed\n:advance 600\n:stop {sid}\n:stop {sid}\n/recover watch\n"
        "/recover watch pause --for 1h\n/recover watch resume\n"
    )
    code, out = _demo(demo_sandbox, tmp_path, script)
    # The console's user is a member of its channel (the console): pausing and resuming are allowed.
    assert "Watch paused until" in out and "Watch resumed" in out and "Only members of" not in out
    first, second, third = out.split("Watch polls once:")[1:]
    # The scenarios stuck already when the demo began are known, not new: the first stop is that one session.
    assert first.count("Stopped: ") == 1 and "Stopped: ses_closed (" in first, first
    assert "Many sessions stopped at once" not in out
    assert second.count(f"Stopped: {sid} (RESTORE_FAILED") == 1, second
    assert "Watch posted nothing new" in third and "Stopped:" not in third.split("alice> /recover watch")[0]
    assert "posted" in third.split("alice> /recover watch")[1]
