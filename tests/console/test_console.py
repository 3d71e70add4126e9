"""The console over the real router and the sandbox: stdin mode (exit codes) and a tmux-driven demo."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bot.console import DEMO_CONSOLE_USERS, render, run_console
from bot.messages import Button, Message, ref
from bot.settings import Settings
from tests.fixtures.composing import default_router
from tests.fixtures.waiting import eventually


@pytest.fixture
def router(sandbox, tmp_path):
    return default_router(
        Settings(db_path=tmp_path / "console.db"), sandbox=sandbox, console_users_map=DEMO_CONSOLE_USERS
    )


def _run(router, script: str, **kw) -> tuple[int, str]:
    out = io.StringIO()
    code = run_console(router, stdin=io.StringIO(script), stdout=out, **kw)
    return code, out.getvalue()


def test_every_command_succeeds_exit_0(router) -> None:
    code, out = _run(router, "/recover help\ncases\n# a comment\n\n/recover diagnose ses_restore_transient\n")
    assert code == 0, out
    assert "alice> /recover diagnose ses_restore_transient" in out
    assert "[1] retry_restore" in out and "R2.10" in out


def test_a_failing_command_gives_exit_1_but_the_rest_still_run(router) -> None:
    code, out = _run(router, "/recover frobnicate\n/recover cases\n")
    assert code == 1
    assert "frobnicate" in out and "No open cases" in out


def test_switching_user_only_against_the_sandbox(router) -> None:
    code, out = _run(router, ":as bob\n", allow_switch_user=False)
    assert code == 1 and "only against the embedded sandbox" in out
    code, out = _run(router, ":as bob\n:as mallory\n", allow_switch_user=True)
    assert code == 1 and "You are now bob" in out and "choose one of alice, bob" in out


def test_two_person_story_through_numbered_choices(router, sandbox) -> None:
    script = "\n".join(
        [
            "/recover diagnose ses_restore_transient",
            "3",  # close → the decision form
            "the store never came back",
            "",
            "",
            "",
            "1",  # alice tries to approve her own request
            ":as bob",
            "1",  # … bob approves
            ":quit",
            "/recover cases",  # never reached
        ]
    )
    code, out = _run(router, script, allow_switch_user=True)
    assert code == 1  # alice's own approval was refused (the two-person rule)
    assert "Approval needed" in out and "bob> 1" in out
    assert "Verified `ses_restore_transient` after `close`" in out
    assert "<@" not in out and "\u2063" not in out  # mentions as readable ids, no Slack syntax
    posted = [r for r in sandbox.admin.requests("ses_restore_transient") if "decision" in str(r.get("path", ""))]
    assert len(posted) == 1


def test_choice_out_of_range_fails(router) -> None:
    code, out = _run(router, "7\n")
    assert code == 1 and "no choice [7]" in out


def test_render_numbers_buttons_and_shows_commands() -> None:
    text = render(
        Message(headline="h", buttons=[Button("Approve", "approve", "r1", command="/recover approve r1")]),
        first_choice=4,
    )
    assert "[4] Approve   /recover approve r1" in text


def test_render_shows_the_cores_mentions_as_readable_ids_and_outside_text_as_it_came() -> None:
    text = render(
        Message(
            headline=f"{ref('UBOB')} now owns the case",
            lines=[f"Run it in one of: {ref('CINC', '#')}.", "log: restore failed <!channel> <@U0BAD|eve>"],
        )
    )
    assert text.splitlines()[:2] == ["@UBOB now owns the case", "Run it in one of: #CINC."]
    # Outside text is shown as it came (a terminal notifies nobody): no pattern rewrites it.
    assert "log: restore failed <!channel> <@U0BAD|eve>" in text and "\u2063" not in text


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_demo_in_tmux_as_two_users(tmp_path: Path) -> None:
    # A private tmux server (-L): a server already running would hand the demo its own environment.
    name = f"rbdemo-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RECOVER_DB": str(tmp_path / "demo.db"), "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable,
        "-c",
        "import sys; from bot.settings import load_settings; from bot.console import run_demo;"
        " sys.exit(run_demo(load_settings(dotenv=None)))",
    ]
    subprocess.run(
        ["tmux", "-L", name, "new-session", "-d", "-s", name, "-x", "200", "-y", "50", *cmd],
        check=True,
        env=env,
        cwd=str(tmp_path),
    )

    def screen() -> str:
        return subprocess.run(
            ["tmux", "-L", name, "capture-pane", "-p", "-S", "-3000", "-t", name], capture_output=True, text=True
        ).stdout

    def wait_for(text: str, timeout: float = 30.0) -> str:
        def shown() -> str:
            s = screen()
            if text not in s:
                raise AssertionError(f"not on screen:\n{s}")
            return s

        return eventually(shown, timeout, f"{text!r} on screen")

    def type_line(line: str) -> None:
        subprocess.run(["tmux", "-L", name, "send-keys", "-t", name, "-l", line], check=True)
        subprocess.run(["tmux", "-L", name, "send-keys", "-t", name, "Enter"], check=True)

    try:
        wait_for("alice>")
        type_line("/recover diagnose ses_restore_transient")
        wait_for("[3] close")
        type_line("3")
        wait_for("Reason (required")
        type_line("store gone for good")
        for _ in range(3):
            type_line("")
        wait_for("Approval needed")
        type_line(":as bob")
        wait_for("bob>")
        type_line("1")
        s = wait_for("Verified `ses_restore_transient`")
        assert "executed (approved by @console:bob)" in s
        type_line(":quit")
        eventually(
            lambda: (
                subprocess.run(["tmux", "-L", name, "has-session", "-t", name], capture_output=True).returncode != 0
            ),
            15,
            "the demo to exit on :quit",
        )
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


@pytest.mark.subprocess
def test_demo_from_stdin_exit_status(tmp_path: Path) -> None:
    env = {**os.environ, "RECOVER_DB": str(tmp_path / "demo.db")}
    code = (
        "import sys; from bot.settings import load_settings; from bot.console import run_demo;"
        " sys.exit(run_demo(load_settings(dotenv=None)))"
    )
    ok = subprocess.run(
        [sys.executable, "-c", code],
        input="/recover cases\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert "ses_restore_transient" in ok.stdout  # the banner lists the scenario sessions
    bad = subprocess.run(
        [sys.executable, "-c", code],
        input="/recover cases\n/recover nope\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert bad.returncode == 1


def test_demo_drives_the_sandbox_scheduler_and_clock(router, sandbox) -> None:
    """R3.9 in the demo: abandon waits for the worker to be confirmed gone; `:pass` is that scheduler pass."""
    before = sandbox.admin.scheduler_pass  # the real admin API is what the console calls
    assert before is not None
    script = "\n".join(
        [
            "/recover diagnose ses_unknown_unanswered",
            ":pass",
            "/recover diagnose ses_unknown_unanswered",
            ":advance 90",
            ":advance soon",
        ]
    )
    code, out = _run(router, script + "\n", allow_switch_user=True, sandbox=sandbox)
    assert code == 1  # the malformed :advance fails, the rest ran
    assert "workers confirmed gone: " in out and "ses_unknown_unanswered" in out.split("Scheduler pass:")[1]
    first, second = out.split("Scheduler pass:")
    assert "abandon: 409 RECOVERY_REQUIRED" in first  # not yet confirmed gone
    assert "abandon: 409 RECOVERY_REQUIRED" not in second
    assert "Sandbox clock is now 2026-11-29T10:01:30" in out
    assert ":advance takes a number of seconds" in out


def test_sandbox_commands_refused_without_the_sandbox(router) -> None:
    code, out = _run(router, ":pass\n")
    assert code == 1 and "only against the embedded sandbox" in out


FULL_TEXT = re.compile(r"\(full text: (?P<where>.+?), (?P<size>\d+) chars\)")


@pytest.mark.subprocess
def test_a_file_a_reply_names_exists(tmp_path: Path) -> None:
    """The demo (the console script's own code, from stdin) names the triage file by the path it wrote,
    with the whole text in it; no reply names a bare file name that nothing holds."""
    env = {**os.environ, "RECOVER_DB": str(tmp_path / "demo.db"), "XDG_STATE_HOME": str(tmp_path / "state")}
    code = (
        "import sys; from bot.settings import load_settings; from bot.console import run_demo;"
        " sys.exit(run_demo(load_settings(dotenv=None)))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code],
        input="/recover triage\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    named = [m for m in FULL_TEXT.finditer(ran.stdout)]
    assert named, ran.stdout
    for m in named:
        path = Path(m["where"])
        assert path.is_file(), (m["where"], ran.stdout)
        assert path.parent == tmp_path / "state" / "recover-bot" / "files"
        assert len(path.read_bytes().decode("utf-8")) == int(m["size"])  # the whole text, as said
    (triage,) = [Path(m["where"]) for m in named if Path(m["where"]).name == "triage-t1.csv"]
    rows = list(csv.reader(io.StringIO(triage.read_bytes().decode("utf-8"), newline="")))
    assert rows[0][:2] == ["group", "session_id"] and len(rows) > 1


def test_without_a_files_folder_the_reply_names_the_command_that_shows_the_text(router) -> None:
    code, out = _run(router, "/recover triage\n")
    assert code == 0, out
    assert "triage-t1.csv" not in out  # a name that nothing holds
    assert "(full text: `/recover details t1`, " in out
