"""The demo tells the mass-incident story, through the installed ``recover-bot demo`` from an empty folder
(commands typed into its stdin pipe, its answers read back as a person reads them):

- ``demo --incident 60``: a checkpoint-store outage stops 60 sessions, watch posts ONE triage, ``:fix``
  ends the outage, the batch of the group needs a second person, ``:as bob`` approves it, the members
  are sent and verified (the cases close on observed recovery, R5.1);
- ``/recover watch`` says watch is on from the start, and the first ``:stop`` posts that one session,
  not the sessions already stuck when the demo began (those are known, not new);
- the escalation ladder runs in the demo at its shortened times (said at the start) and its steps are
  said in the console, so "the ladder ran to its end" is true when said;
- ``break-glass`` in the console says at once that it cannot post its loud notice there, before any
  preview of what would be sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.install import ConsoleProcess

pytestmark = pytest.mark.subprocess

PROMPT = r"(alice|bob)> "


class Demo:
    """The installed demo, one command at a time: each answer is the output up to the next prompt."""

    def __init__(self, proc: ConsoleProcess) -> None:
        self.proc = proc
        self.proc.expect(r"Log records: ", timeout=60)
        self.mark = 0

    def say(self, line: str, timeout: float = 60) -> str:
        """Type ``line``; its answer (what the console printed after the line, before the next command)."""
        start = len(self.proc.output)
        self.proc.send(line)
        self.proc.send("#")  # a comment: its echo marks the end of the answer (stdin is a pipe)
        end = self.proc.expect(r"(alice|bob)> #\n", timeout=timeout, start=start)
        return self.proc.output[start : end.start()]

    def finish(self) -> tuple[int, str]:
        return self.proc.finish()


@pytest.fixture
def demo(installed: Any, tmp_path: Path) -> Iterator[Any]:
    folder = tmp_path / "empty"
    folder.mkdir()
    started: list[Demo] = []

    def start(*args: str) -> Demo:
        env = {"XDG_STATE_HOME": str(tmp_path / "state")}
        d = Demo(ConsoleProcess(installed.popen("demo", *args, cwd=folder, env=env)))
        started.append(d)
        return d

    yield start
    for d in started:
        d.proc.kill()


def test_a_mass_incident_is_posted_once_approved_by_a_second_person_and_verified(demo: Any) -> None:
    d = demo("--incident", "60")
    d.say(":help")  # the incident's post came before the first prompt
    start = d.proc.output
    assert "(demo --incident 60)" in start and "60 sessions (ses_inc_…) stopped" in start, start
    # One storm, not 60 posts: its first word, then the triage it becomes (a terminal cannot edit a line).
    assert start.count("sessions stopped, triage running.") == 1, start
    assert start.count("Many sessions stopped at once. Triage t1:") == 1, start
    assert "Stopped: ses_" not in start  # nor the scenarios already stuck at the start
    group = re.search(r"\*(t\d+\.g\d+)\* · 61 × ", start)
    assert group, start  # the 60 and the scenario stuck in a store outage of its own: one group

    fixed = d.say(":fix")
    assert "the checkpoint store answers again" in fixed
    asked = d.say(f'/recover batch decide {group.group(1)} retry_restore --reason "the store answers again" --yes')
    assert "needs a second person's approval" in asked, asked
    (batch,) = set(re.findall(r"bat_[0-9a-f]+", asked))
    own = d.say(f"/recover approve {batch}")
    assert "approve your own" in own and "accepted" not in own, own
    assert "You are now bob." in d.say(":as bob")
    sent = d.say(f"/recover approve {batch}")
    assert "61/61 accepted · verifying" in sent, sent

    d.say(":as alice")
    verified = d.say(":advance 30") + d.say(":advance 30")
    assert "recovered 60" in verified, verified
    cases = d.say("/recover cases")
    assert "ses_inc_" not in cases, cases  # every incident session's case closed on observed recovery
    code, _ = d.finish()
    assert code == 1  # alice's own approval was refused: the exit status remembers it


def test_watch_is_on_from_the_start_and_a_first_stop_posts_that_session_only(demo: Any) -> None:
    d = demo()
    state = d.say("/recover watch")
    assert "Watch is on, posting here; the sessions above that are stuck already are known" in d.proc.output
    assert "Watch is on: posting new stops to #console." in state, state
    assert "at the next `:stop` or `:incident`" in state  # what makes it poll in the demo, not a timer
    assert "No open cases." in d.say("/recover cases")  # known stops open no case nobody asked for
    stop = d.say(":stop ses_resume_reclaiming")
    assert stop.count("Stopped: ") == 1 and "Stopped: ses_resume_reclaiming (" in stop, stop
    assert "Many sessions stopped at once" not in stop
    after = d.say("/recover watch")
    assert "already stuck when watching began (known, not posted): 10" in after, after
    code, out = d.finish()
    assert code == 0, out
    assert "Watch key" not in out  # the post's find key is the watcher's, never shown


def test_the_ladder_runs_in_the_demo_and_break_glass_says_at_once_it_cannot_post_its_notice(demo: Any) -> None:
    d = demo()
    d.say(":help")
    banner = d.proc.output
    assert "The escalation ladder runs here 10× faster than the runbook says (remind 1m" in banner, banner
    asked = d.say('/recover decide ses_restore_damaged close --reason "the checkpoint is gone for good"')
    (rid,) = set(re.findall(r"req_[0-9a-f]{16}", asked))
    glass = d.say(f'/recover break-glass {rid} --incident INC-7 --reason "nobody answers"')
    assert "the loud notice cannot be posted from here; nothing was sent" in glass, glass
    assert "This will be sent" not in glass and "escalation ladder has not run" not in glass, glass

    first = d.say(":advance 70")
    assert f"Reminder: `close` on `ses_restore_damaged` (request {rid}) still waits" in first, first
    rest = d.say(":advance 60")
    assert "Approval still needed" in rest and "reached its widening step" in rest, rest
    assert "ladder step" not in first + rest  # each step's find key is the ladder's, never shown
    pending = d.say("/recover pending")
    assert "the ladder ran to its end" in pending, pending
    glass = d.say(f'/recover break-glass {rid} --incident INC-7 --reason "nobody answers"')
    assert "the loud notice cannot be posted from here" in glass and "This will be sent" not in glass, glass
    d.finish()
