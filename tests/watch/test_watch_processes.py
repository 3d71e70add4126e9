"""Two watcher processes on one store file, one SIGKILLed mid-way and replaced: every stop is posted
exactly once. The killed process's claim (if it had one) is taken over when its lease runs out, and
found in the channel by its key when its post had reached Slack: 0 missed, 0 duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bot.sandbox import SandboxHandle
from bot.store import Store
from bot.watch import WatchStore
from bot.watch import migrations as watch_migrations
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackStandIn
from tests.fixtures.triage import clone
from tests.watch.test_watcher import edited_runbooks

ROOT = Path(__file__).resolve().parents[2]
CHANNEL = "C0WATCH"
STOPS = 40


def start_proc(config: dict[str, object], module: str = "tests.watch.proc") -> subprocess.Popen[str]:
    """``module`` in a process of its own, given ``config`` as JSON on stdin; back once it says ``ready``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(config) + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _unposted(saved: WatchStore, pid: int) -> set[str]:
    """Keys the process ``pid`` has claimed and not yet recorded as posted."""
    with saved.store.read() as rdb:
        rows = rdb.conn.execute(
            "SELECT key FROM watch_stops WHERE state = 'claimed' AND claimed_by LIKE ?", [f"%:{pid}:%"]
        ).fetchall()
    return {str(r[0]) for r in rows}


def _until(ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_two_processes_and_a_sigkill_post_each_stop_exactly_once(
    incident_sandbox: SandboxHandle, slack_api: SlackStandIn, tmp_path: Path
) -> None:
    runbooks = edited_runbooks(tmp_path, "storm_threshold: {count: 10,", "storm_threshold: {count: 1000,")
    rb = runbooks / "session-recovery.yaml"
    rb.write_text(rb.read_text().replace("claim_lease: {duration: 2m,", "claim_lease: {duration: 3s,"))
    db = tmp_path / "recover.db"
    config: dict[str, object] = {
        "control_host_url": incident_sandbox.url, "control_host_api_key": incident_sandbox.api_key,
        "db_path": str(db), "slack_bot_token": BOT_TOKEN, "slack_signing_secret": SIGNING_SECRET,
        "slack_api_url": slack_api.base_url, "watch_channel": CHANNEL, "watch_interval": 0.05,
        "runbooks_dir": str(runbooks),
    }
    ids = [f"ses_wp_{i:03d}" for i in range(STOPS)]
    for sid in ids:
        incident_sandbox.admin.create_session(clone("healthy", sid))
    # Each post is answered 0.2 s after Slack holds it: the kill lands on a claim of the killed process,
    # most likely one whose post reached the channel but whose ts it never stored.
    slack_api.slow("chat.postMessage", 0.2)
    a, b = start_proc(config), start_proc(config)
    c = None
    saved = WatchStore(Store(db, migrations=[watch_migrations]), "default")
    left: set[str] = set()
    try:
        for i, sid in enumerate(ids):
            incident_sandbox.admin.stop(sid)
            time.sleep(0.03)
            if i == STOPS // 2:
                _until(lambda: bool(_unposted(saved, a.pid)), 10)
                a.send_signal(signal.SIGKILL)
                a.wait(10)
                left = _unposted(saved, a.pid)
                c = start_proc(config)
        deadline, settled = time.monotonic() + 90, 0
        while time.monotonic() < deadline and settled < 5:
            # Done once every stop is posted (and it stays so for 1 s: nothing posts it again).
            settled = settled + 1 if saved.counts().get("posted", 0) >= STOPS else 0
            time.sleep(0.2)
    finally:
        for proc in (a, b, c):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(10)
    roots = [p.text for p in slack_api.roots(CHANNEL)]
    per_session = {sid: sum(f"Stopped: {sid} " in t for t in roots) for sid in ids}
    assert [s for s, n in per_session.items() if n > 1] == []  # 0 duplicates
    assert [s for s, n in per_session.items() if n == 0] == []  # 0 missed
    assert saved.counts() == {"posted": STOPS}
    # What the killed process left claimed was taken over by a live one (found in the channel or posted).
    taken = {s.inputs["key"] for s in saved.store.steps() if s.step == "watch_stop" and s.outcome == "taken_over"}
    assert left <= taken, (left, taken)
