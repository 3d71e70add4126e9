"""The `recover-bot console` script as a user runs it: from an empty folder, against a sandbox control host
over HTTP, with no RECOVER_* setting but the ones each test names.

- one login cannot request and approve a `close` from two console runs, whatever --user, USER or LOGNAME say;
- Ctrl-C (SIGINT) during the resume's 503 wait (R4.2) is recorded as a withdrawal and never replayed;
- a later console start sends nothing unasked: it names what an earlier run left, and sends only on `replay`.

The sandbox's request log is the ground truth for what reached the control host.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bot.console import terminal_login
from bot.store import Store
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess

SCRIPT = Path(sys.executable).with_name("recover-bot")
LOGIN = terminal_login()
SLACK_ID = "UCONSOLE01"


@pytest.fixture(autouse=True)
def _the_installed_wheel(installed, monkeypatch) -> None:
    # The built wheel's console script in its own virtualenv (tests/fixtures/install.py), as users
    # install it, not the checkout's editable one.
    monkeypatch.setattr(sys.modules[__name__], "SCRIPT", installed.script)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


def _env(sandbox: Any, db: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECOVER_", "CONTROL_HOST_", "SLACK_"))}
    env.update(
        CONTROL_HOST_URL=sandbox.url,
        CONTROL_HOST_API_KEY=sandbox.api_key,
        RECOVER_DB=str(db),
        RECOVER_CONSOLE_USERS=f"{LOGIN}:{SLACK_ID}",
    )
    env.update(extra)
    return env


def _console(sandbox: Any, db: Path, cwd: Path, script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), "console", *args],
        input=script,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(sandbox, db, **env),
        timeout=120,
    )


def _posts(sandbox: Any, sid: str) -> list[dict[str, Any]]:
    return [r for r in sandbox.admin.requests(sid) if r.get("method") == "POST"]


def _stopped_resumable(sandbox: Any, sid: str, *, claim: bool) -> None:
    sandbox.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "stopped",
                "admission_state": "open",
                "revision": 3,
                "resumable": True,
                "attention": None,
                "checkpoint": {"id": "ckpt_3", "covers_turn_id": None},
                "execution": {"state": "gone", "alive": False},
                "reclamation_claim": claim,
            }
        }
    )


def test_one_login_cannot_request_and_approve_from_two_console_runs(sandbox, workdir, tmp_path):
    db = tmp_path / "recover.db"
    sid = "ses_restore_transient"
    made = _console(sandbox, db, workdir, f'decide {sid} close --reason "store gone for good"\n')
    assert made.returncode == 0, made.stdout + made.stderr
    assert f"You are {LOGIN}" in made.stdout
    (rid,) = set(re.findall(r"req_[0-9a-f]{16}", made.stdout))

    posing = _console(sandbox, db, workdir, f"approve {rid}\n", "--user", "bob")
    assert posing.returncode == 2
    assert "--user exists only in `recover-bot demo`" in posing.stderr and "Traceback" not in posing.stderr

    for who in ({"USER": "bob", "LOGNAME": "bob"}, {"USER": "root", "LOGNAME": "someone-else"}):
        again = _console(sandbox, db, workdir, f"approve {rid}\n", **who)
        assert again.returncode == 1, again.stdout
        assert "cannot approve your own request" in again.stdout

    steps = Store(db).steps(session_id=sid)
    asked = [s for s in steps if s.step == "approve"]
    assert [(s.actor, s.outcome) for s in asked] == [(f"console:{LOGIN}", "self_approval")] * 2
    assert {s.actor for s in steps if s.step == "decision_requested"} == {f"console:{LOGIN}"}
    assert _posts(sandbox, sid) == [] and sandbox.admin.effects(sid) == []


def _read_lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in iter(stream.readline, ""):
        into.put(line)
    into.put("")


def test_ctrl_c_in_the_resume_wait_is_recorded_and_never_replayed(sandbox, workdir, tmp_path):
    db = tmp_path / "recover.db"
    sid = "ses_ctrl_c1"
    _stopped_resumable(sandbox, sid, claim=True)
    proc = subprocess.Popen(
        [str(SCRIPT), "console"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=workdir,
        env=_env(sandbox, db),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    out: list[str] = []
    try:
        assert proc.stdin is not None
        proc.stdin.write(f"resume {sid}\n")
        proc.stdin.flush()  # stdin stays open: the console is waiting, as at a terminal

        def told() -> bool:
            while not lines.empty():
                out.append(lines.get_nowait())
            if not any("waiting for reclamation" in line for line in out):
                raise AssertionError("".join(out))
            return True

        eventually(told, 60, "'waiting for reclamation' in the console's output")
        time.sleep(0.3)  # inside the backoff's sleep, between two 503s
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while (line := lines.get(timeout=10)) != "":
        out.append(line)
    text = "".join(out)
    assert code == 130, text
    assert "withdrawn (interrupted)" in text and "Traceback" not in text

    store = Store(db)
    assert ("resume_withdrawn", "withdrawn") in [(s.step, s.outcome) for s in store.steps(session_id=sid)]
    assert store.unfinished_requests() == []
    sent = len(_posts(sandbox, sid))
    assert sent >= 1 and {p["status"] for p in _posts(sandbox, sid)} == {503}

    # The reclamation ends. A later console start, and even an explicit replay, send nothing for it.
    sandbox.admin.reclamation(sid, False)
    later = _console(sandbox, db, workdir, "cases\nreplay\n")
    assert later.returncode == 0, later.stdout + later.stderr
    assert "unfinished request" not in later.stdout  # nothing left to name: the withdrawal ended it
    assert len(_posts(sandbox, sid)) == sent and sandbox.admin.effects(sid) == []


def test_a_later_console_start_sends_nothing_unasked(sandbox, workdir, tmp_path):
    db = tmp_path / "recover.db"
    sid = "ses_left_over"
    _stopped_resumable(sandbox, sid, claim=False)
    # An earlier run stored a resume, sent it, and died before its answer arrived.
    store = Store(db)
    record = store.begin_request("POST", f"/v1/sessions/{sid}/resume", '{"reason":"r"}', "resume", session_id=sid)
    vouched = {"method": "POST", "path": f"/v1/sessions/{sid}/resume", "body": {"reason": "r"}}
    store.record_step(sid, f"console:{LOGIN}", "resume_requested", vouched, "sending", idempotency_key=record.key)
    store.note_attempt(record.key)
    before = len(sandbox.admin.requests())

    first = _console(sandbox, db, workdir, "cases\nhistory " + sid + "\nhandoff\n")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Found 1 unfinished request(s)" in first.stdout
    assert sid in first.stdout and "`resume`" in first.stdout and "uncertain" in first.stdout
    assert "/recover replay" in first.stdout
    assert len(sandbox.admin.requests()) == before and sandbox.admin.effects(sid) == []

    asked = _console(sandbox, db, workdir, "replay\n")
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert [p["idempotency_key"] for p in _posts(sandbox, sid)] == [record.key]
    assert len(sandbox.admin.effects(sid)) == 1
    assert Store(db).unfinished_requests() == []


def test_a_mistyped_session_id_gets_the_nearest_known_ids_and_is_never_offered_itself(sandbox, workdir, tmp_path):
    db = tmp_path / "recover.db"
    typo = "ses_restore_transiet"  # one letter from a session the host lists as recovery_required
    script = (
        f"diagnose {typo}\n"
        f'decide {typo} close --reason "store gone for good"\n'
        f"take {typo}\n"
        f"history {typo}\n"
        "diagnose ses_nothing_like_any_session\n"
    )
    run = _console(sandbox, db, workdir, script)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "Did you mean:\n  /recover diagnose ses_restore_transient\n" in out
    assert 'Did you mean:\n  /recover decide ses_restore_transient close --reason "store gone for good"\n' in out
    assert "Did you mean:\n  /recover take ses_restore_transient\n" in out
    assert "Did you mean:\n  /recover history ses_restore_transient\n" in out  # its steps, not the typo's none
    # Far from every known id: where to find it, no guess.
    assert "has no session ses_nothing_like_any_session" in out and "Check the id" in out
    # The mistyped id is never offered as a line to run (a next step, a Details button, a retyped decide).
    assert not re.search(rf"/recover [a-z ]+ {typo}\b", out), out
    assert _posts(sandbox, "ses_restore_transient") == [] and Store(db).list_open_cases() == []


def test_an_empty_reason_is_said_in_words_not_as_the_runbooks_pattern(sandbox, workdir, tmp_path):
    run = _console(sandbox, tmp_path / "recover.db", workdir, 'decide ses_restore_transient close --reason ""\n')
    assert run.returncode == 1
    assert "[error] --reason needs text: why; sent to the control host and recorded\n" in run.stdout, run.stdout
    assert "must match" not in run.stdout and "\\S" not in run.stdout
    assert _posts(sandbox, "ses_restore_transient") == []
