"""A batch's runner killed mid-batch is resumed by another bot's periodic job, on any host: the runner
held ``batch:<id>`` (renewed while it ran); once that lease and its in-flight members' send leases ran
out, the other process's periodic job (``Composed.start``) resumes the batch and every member is applied
once, each with one Idempotency-Key. Real processes (SIGKILL), the sandbox control host over HTTP, one
SQLite file; the leases and the periodic job at a test's pace (a runbook copy)."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.sandbox import SandboxHandle
from tests.fixtures.decisions import REPO
from tests.fixtures.runbook import runbooks_with_limits
from tests.fixtures.triage import make_incident
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess

_SETTINGS = """
import sys, time
from bot.settings import load_settings
settings = load_settings({"CONTROL_HOST_URL": sys.argv[1], "CONTROL_HOST_API_KEY": sys.argv[2],
                          "RECOVER_DB": sys.argv[3], "RECOVER_RUNBOOKS": sys.argv[4]}, dotenv=None)
"""

# The runner: a batch of every member, sent at the host's slow pace until it is killed.
_RUNNER = (
    _SETTINGS
    + """
from bot.messages import ListReporter
from tests.fixtures.composing import default_router
router = default_router(settings)
reply = router.handle_text(sys.argv[5], actor="alice", channel=None, reporter=ListReporter())
print(reply.messages[0].headline, flush=True)
"""
)

# The other bot: composed as serve's worker composes it (no start-up replay), its background parts started.
_OTHER = (
    _SETTINGS
    + """
from bot.app.compose import FrontPorts, compose
composed = compose(settings, ports=FrontPorts(), startup=False)
composed.start()
batches = composed.core().bulk.batches.batches
deadline = time.monotonic() + 120
batch = None
while time.monotonic() < deadline:
    batch = batches.get(sys.argv[5])
    if batch is not None and batch.state == "executed" and not batches.counts(batch.id).get("sending"):
        break
    time.sleep(0.1)
print(batch.state if batch else "none", batch.runner if batch else "", flush=True)
composed.stop()
"""
)


def _bot(script: str, sandbox: SandboxHandle, db: Path, runbooks: Path, arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", script, sandbox.url, sandbox.api_key, str(db), str(runbooks), arg],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_runner_killed_mid_batch_is_resumed_by_another_bots_periodic_job_each_member_once(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 16})["startup_stopped"]
    db = tmp_path / "recover.db"
    runbooks = runbooks_with_limits(tmp_path / "runbooks", batch_lease="3s", send_lease="3s", replay_every="0.2s")
    incident_sandbox.admin.fault("latency", path="/v1/sessions/*/recovery-decisions", seconds=0.3, times=None)
    runner = _bot(
        _RUNNER,
        incident_sandbox,
        db,
        runbooks,
        f'/recover batch decide --sessions {",".join(made)} start_fresh --reason "x" --yes',
    )
    seen: dict[str, Any] = {"done": 0, "batch_id": ""}

    def some_sent() -> bool:
        with contextlib.suppress(sqlite3.OperationalError), sqlite3.connect(db) as conn:
            seen["done"], seen["batch_id"] = conn.execute(
                "SELECT count(*), max(batch_id) FROM batch_members WHERE state != 'requested'"
            ).fetchone()
        return bool(seen["done"] >= 3)

    with contextlib.suppress(pytest.fail.Exception):  # the runner is killed either way; the assertion says why
        eventually(some_sent, 60, "three members past requested")
    runner.send_signal(signal.SIGKILL)
    runner.wait(10)
    assert seen["done"] >= 3, (runner.stdout.read() if runner.stdout else b"") + (
        runner.stderr.read() if runner.stderr else b""
    )
    assert len(incident_sandbox.admin.effects()) < len(made)
    incident_sandbox.admin.clear_faults()
    other = _bot(_OTHER, incident_sandbox, db, runbooks, seen["batch_id"])
    out, err = other.communicate(timeout=150)
    assert other.returncode == 0, err.decode()
    state, _, resumed_by = out.decode().strip().splitlines()[-1].partition(" ")
    assert state == "executed", err.decode()[-3000:]
    assert str(other.pid) in resumed_by  # the other bot's holder ran the rest of the batch
    counts = incident_sandbox.admin.effect_counts()
    assert sorted(counts) == sorted(made) and set(counts.values()) == {1}, counts  # each member exactly once
    for sid in made:
        keys = {r["idempotency_key"] for r in incident_sandbox.admin.requests(sid) if r["method"] == "POST"}
        assert len(keys) == 1, (sid, keys)
