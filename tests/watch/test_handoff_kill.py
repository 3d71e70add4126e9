"""The shift change's hand-off across a SIGKILL of `serve`: with `handoff:` times in the runbook and open
cases, serve claims the change (with a lease, as a stop is claimed) and posts the digest's head, then
each case in its thread. Killed while the Slack stand-in holds its answer to one of those posts (the
message is in the channel, serve never heard its ts) and restarted on the same store, the new serve
takes the claim over once its lease ran out, finds what reached the channel by its key line and posts
only what is missing: every part exactly once, none lost.

Real parts: `serve` as a process (its worker runs the watcher), the sandbox control host over HTTP,
the Slack stand-in, one SQLite file.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bot.messages import NullReporter
from bot.sandbox import SandboxHandle
from bot.settings import load_settings
from tests.fixtures.composing import default_router
from tests.fixtures.slack import SlackStandIn
from tests.fixtures.triage import clone
from tests.fixtures.waiting import eventually
from tests.fixtures.watch import runbook_copy
from tests.slack.test_worker_process import _start_serve, _worker_pid

pytestmark = pytest.mark.subprocess

CHANNEL = "C0WATCH"
CASES = 3


def _runbooks(tmp_path: Path) -> Path:
    # A shift changed a minute ago (Berlin time, by the real clock serve reads): it is handed off now.
    local = datetime.now(UTC).astimezone(ZoneInfo("Europe/Berlin")) - timedelta(minutes=1)
    other = local + timedelta(hours=12)
    return runbook_copy(
        tmp_path / "runbooks",
        (
            '# handoff: {times: ["07:00", "19:00"], time_zone: Europe/Berlin}',
            f'handoff: {{times: ["{local:%H:%M}", "{other:%H:%M}"], time_zone: Europe/Berlin}}',
        ),
        ("claim_lease: {duration: 2m,", "claim_lease: {duration: 2s,"),
    )


def _serve(
    slack_api: SlackStandIn, sandbox: SandboxHandle, db: Path, tmp_path: Path
) -> tuple[subprocess.Popen[str], str]:
    proc = _start_serve(slack_api, sandbox, db, tmp_path)
    assert proc.stdout is not None
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
    assert m, "serve did not start"
    url = m.group(1)
    eventually(lambda: _worker_pid(url) is not None, 60, "a healthy worker")
    return proc, url


def _posts(slack_api: SlackStandIn) -> list[str]:
    return [str(c.params.get("text", "")) for c in slack_api.calls_to("chat.postMessage")]


@pytest.mark.parametrize("held", [0, 2, 3], ids=["the-head", "a-case", "the-last-case"])
def test_a_sigkill_while_slack_holds_a_hand_off_post_loses_no_part_and_says_none_twice(
    held: int,
    slack_api: SlackStandIn,
    incident_sandbox: SandboxHandle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runbooks, db = _runbooks(tmp_path), tmp_path / "serve.db"
    for name, value in (
        ("RECOVER_WATCH_CHANNEL", CHANNEL),
        ("RECOVER_WATCH_INTERVAL", "0.2"),
        ("RECOVER_RUNBOOKS", str(runbooks)),
    ):
        monkeypatch.setenv(name, value)  # serve's own settings (_start_serve passes the environment on)
    ids = [f"ses_hk_{i:03d}" for i in range(CASES)]
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": db, "runbooks_dir": runbooks})
    router = default_router(settings, sandbox=incident_sandbox)
    for sid in ids:  # open cases, each with its owner, before the shift change is handed off
        incident_sandbox.admin.create_session(clone("healthy", sid))
        assert router.handle_text(
            f"/recover note {sid} checked the worker", actor="UALICE", channel=None, reporter=NullReporter()
        ).ok
    # Slack takes each post at once and answers it 3 s later: the kill lands inside that wait.
    slack_api.slow("chat.postMessage", 3.0)
    proc, url = _serve(slack_api, incident_sandbox, db, tmp_path)
    worker = _worker_pid(url)
    assert worker is not None
    try:
        eventually(lambda: len(_posts(slack_api)) > held, 60, "the held post")
        os.kill(proc.pid, signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
    finally:
        proc.wait(30)
    said_before_kill = len(_posts(slack_api))
    assert said_before_kill == held + 1, _posts(slack_api)  # the kill held this post's answer
    slack_api.slow("chat.postMessage", 0.0)
    again, url = _serve(slack_api, incident_sandbox, db, tmp_path)
    try:

        def done() -> bool:  # the restarted serve finished the claim (it looked for every part first)
            with sqlite3.connect(db) as conn:
                return conn.execute("SELECT state FROM watch_stops WHERE state LIKE 'handoff%'").fetchall() == [
                    ("handoff_posted",)
                ]

        eventually(done, 90, "the hand-off finished by the restarted serve")
        time.sleep(1.0)  # a few more polls: nothing is posted again
    finally:
        again.terminate()
        again.wait(30)
    roots = [p for p in slack_api.roots(CHANNEL) if "Shift change" in p.text]
    assert len(roots) == 1, [p.text for p in roots]  # the head once
    thread = slack_api.thread(CHANNEL, roots[0].ts)
    assert {sid: sum(f"Case `{sid}`" in p.all_text() for p in thread) for sid in ids} == dict.fromkeys(ids, 1)
    steps = router.services.store.steps_named("handoff")
    assert [s.outcome for s in steps].count("posted_by_watch") == 1  # claimed once
    assert "taken_over" in [s.outcome for s in steps]  # by the restarted serve, once the lease ran out
