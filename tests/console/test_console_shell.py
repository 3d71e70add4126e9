"""The console behaves like a shell, tried as a person does: the installed ``recover-bot demo`` in a real
terminal (tmux), keys typed one by one.

- history across runs (a file under the user's state dir), line editing with the arrow keys;
- Tab completes subcommands, their flags, decisions and the ids shown in the last answers;
- Ctrl-C drops the line or cancels the decision form and the prompt comes back; twice in a row leaves;
- log records go to the file named at start, not to the terminal.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.store import Store
from tests.fixtures.waiting import eventually

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"), pytest.mark.subprocess]


class Terminal:
    """One tmux server of our own (its own socket), one window running a command."""

    def __init__(self, tmp: Path) -> None:
        self.socket = f"rb-test-{os.getpid()}-{time.monotonic_ns()}"
        self.tmp = tmp

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        return done.stdout

    def start(self, command: str, env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        script = (  # the shell outlives a Ctrl-C sent to the window (its own trap), to print the exit status
            f"trap ':' INT; cd {shlex.quote(str(self.tmp))} && env -i {exports} {command}; echo EXIT=$?; sleep 600"
        )
        self.tmux("new-session", "-d", "-x", "220", "-y", "50", "-s", "t", "sh", "-c", script)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", "--", text)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-t", "t", "-p", "-S", "-3000")

    def wait_for(self, text: str, timeout: float = 60, after: int = 0) -> str:
        def shown() -> str:
            screen = self.screen()
            if text not in screen[after:]:
                raise AssertionError(f"not on the screen:\n{screen}")
            return screen

        return eventually(shown, timeout, f"{text!r} on the screen")

    def wait_for_count(self, text: str, n: int, timeout: float = 60) -> str:
        """``text`` shown at least ``n`` times: a repeated line's new copy, not its first."""

        def shown() -> str:
            screen = self.screen()
            if screen.count(text) < n:
                raise AssertionError(f"fewer than {n} {text!r}:\n{screen}")
            return screen

        return eventually(shown, timeout, f"{n} {text!r} on the screen")

    def prompt_count(self, prompt: str = "alice>") -> int:
        return self.screen().count(prompt)

    def wait_prompts(self, n: int, prompt: str = "alice>", timeout: float = 60) -> str:
        def prompted() -> str:
            screen = self.screen()
            if screen.count(prompt) < n:
                raise AssertionError(f"fewer prompts:\n{screen}")
            return screen

        return eventually(prompted, timeout, f"{n} {prompt!r} prompts")

    def stop(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Terminal]:
    t = Terminal(tmp_path)
    try:
        yield t
    finally:
        t.stop()


@pytest.fixture
def demo(installed: Any, tmp_path: Path) -> tuple[str, dict[str, str]]:
    env = installed.env(tmp_path, XDG_STATE_HOME=str(tmp_path / "state"), TERM="xterm")
    return str(installed.script) + " demo", env


def _started_with(term: Terminal, demo: Any, line: str) -> None:
    """The demo started in ``term`` and ``line`` typed and answered (a second prompt shown)."""
    command, env = demo
    term.start(command, env)
    term.wait_prompts(1)
    term.type(line)
    term.keys("Enter")
    term.wait_prompts(2)


def _last_prompt_line(screen: str) -> str:
    return [line for line in screen.splitlines() if line.startswith("alice>")][-1]


def test_history_survives_a_restart_and_the_arrow_keys_edit_it(term: Terminal, demo: Any, tmp_path: Path) -> None:
    command, env = demo
    _started_with(term, demo, "diagnose ses_healthy")
    term.type(":quit")
    term.keys("Enter")
    term.wait_for("EXIT=0")
    history = tmp_path / "state" / "recover-bot" / "history"
    assert "diagnose ses_healthy" in history.read_text()
    term.stop()

    again = Terminal(tmp_path)
    try:
        again.start(command, env)
        again.wait_prompts(1)
        again.keys("Up", "Up")  # the previous run's lines come back (:quit, then the diagnose)
        again.wait_for("alice> diagnose ses_healthy")
        for _ in range(len("healthy")):
            again.keys("BSpace")
        again.type("closed")
        again.keys("Left", "Left", "Left", "Left", "Left", "Left")  # edit in the middle of the line
        again.keys("Right", "Right", "Right", "Right", "Right", "Right")
        again.keys("Enter")
        screen = again.wait_for("ses_closed:")
        assert "^[[A" not in screen and "^[[D" not in screen
    finally:
        again.stop()


def test_tab_completes_subcommands_flags_decisions_and_shown_ids(term: Terminal, demo: Any) -> None:
    _started_with(term, demo, "diagnose ses_startup_stopped")
    term.type("hist")
    term.keys("Tab")
    term.type("ses_startup_s")  # an id shown in the last answer
    term.keys("Tab")
    term.wait_for("alice> history ses_startup_stopped\n")  # (tmux drops the completion's trailing space)
    term.keys("C-u")
    term.type("decide ses_startup_stopped clo")
    term.keys("Tab")
    term.type("--rea")
    term.keys("Tab")
    screen = term.wait_for("alice> decide ses_startup_stopped close --reason\n")
    assert _last_prompt_line(screen).startswith("alice> decide ses_startup_stopped close --reason")


def test_ctrl_c_drops_the_line_or_the_form_and_twice_leaves(term: Terminal, demo: Any, tmp_path: Path) -> None:
    command, env = demo
    term.start(command, env)
    screen = term.wait_prompts(1)
    log_line = next(line for line in screen.splitlines() if line.startswith("Log records: "))
    assert str(tmp_path / "state" / "recover-bot" / "demo.log") in log_line
    term.type("diagnose ses_half_typed")
    term.keys("C-c")
    term.wait_for("^C (the line was dropped")
    term.type("diagnose ses_stopped_no_checkpoint")
    term.keys("Enter")
    screen = term.wait_prompts(3)
    choice = next(line for line in screen.splitlines() if "start_fresh" in line and line.strip().startswith("["))
    term.type(choice.strip()[1 : choice.strip().index("]")])
    term.keys("Enter")
    term.wait_for("Reason (required")
    term.keys("C-c")
    term.wait_for("^C: the decision form was cancelled; nothing was sent")
    term.wait_prompts(4)
    term.type("pending")
    term.keys("Enter")
    term.wait_for("Nothing is pending")  # the form sent nothing, the console still serves
    screen = term.screen()
    assert " INFO " not in screen  # log records went to the file
    hints, prompts = term.screen().count("Ctrl-C again or Ctrl-D leaves"), term.prompt_count()
    term.keys("C-c")
    # The first line's drop already printed this hint: wait for a new one and the prompt after it, so the
    # second Ctrl-C reaches the prompt that reads it rather than the moment between two prompts.
    term.wait_for_count("Ctrl-C again or Ctrl-D leaves", hints + 1)
    term.wait_prompts(prompts + 1)
    term.keys("C-c")
    term.wait_for("EXIT=130")


def test_the_two_ways_out_say_what_each_does_to_this_runs_waiting_request(
    term: Terminal, demo: Any, tmp_path: Path
) -> None:
    command, env = demo
    env = {**env, "RECOVER_DB": str(tmp_path / "kept.db")}  # the demo's store, kept for the look after
    term.start(command, env)
    term.wait_prompts(1)
    term.type('decide ses_restore_transient close --reason "store gone for good"')
    term.keys("Enter")
    term.wait_prompts(2)
    term.keys("C-c")  # the first Ctrl-C says, before anything happens, what the second would do
    term.wait_for("Ctrl-C again withdraws the 1 request(s) of this run still waiting and leaves; Ctrl-D or :quit")
    term.keys("C-d")  # the other way out leaves it waiting, and says so
    screen = term.wait_for("EXIT=0")
    assert "Left waiting: 1 request(s) of this run" in screen and "`/recover withdraw req_" in screen, screen
    assert "withdrawn" not in screen
    steps = Store(tmp_path / "kept.db").steps()
    assert [s.step for s in steps if s.step.startswith("decision_")] == ["decision_requested"]


def test_a_reply_longer_than_the_terminal_goes_through_the_pager(term: Terminal, demo: Any) -> None:
    _started_with(term, demo, "triage")
    term.type("details t1")
    term.keys("Enter")
    term.wait_for("Details of Triage t1")

    # The reply is taller than the 50-line window: its head is on the screen, the pager waits below it.
    def paged() -> str:
        shown = term.tmux("capture-pane", "-t", "t", "-p").rstrip("\n").splitlines()
        assert shown and shown[-1].startswith(":"), "\n".join(shown)
        return "\n".join(shown)

    visible = eventually(paged, 30, "the pager's prompt")
    assert "Details of Triage t1" in visible and term.prompt_count() == 2, visible
    term.keys("q")
    term.wait_prompts(3)  # the console goes on after the pager
    assert "EXIT=" not in term.screen()
