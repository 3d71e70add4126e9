"""Two watcher processes on one store file, one SIGKILLed mid-way and replaced: every stop is posted
exactly once. The killed process's claim (if it had one) is taken over when its lease runs out, and
found in the channel by its key when its post had reached Slack: 0 missed, 0 duplicates."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.sandbox import SandboxHandle
from bot.store import Store
from bot.watch import WatchStore
from bot.watch import migrations as watch_migrations
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackStandIn
from tests.fixtures.triage import clone
from tests.fixtures.waiting import eventually
from tests.fixtures.watch import start_watcher_process
from tests.watch.test_watcher import edited_runbooks

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
CHANNEL = "C0WATCH"
STOPS = 40


def _unposted(saved: WatchStore, pid: int) -> set[str]:
    """Keys the process ``pid`` has claimed and not yet recorded as posted."""
    with saved.store.read() as rdb:
        rows = rdb.conn.execute(
            "SELECT key FROM watch_stops WHERE state = 'claimed' AND claimed_by LIKE ?", [f"%:{pid}:%"]
        ).fetchall()
    return {str(r[0]) for r in rows}


def _until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    """A best-effort wait for the kill point: no claim of a's in time, and the kill lands between claims."""
    with contextlib.suppress(pytest.fail.Exception):
        eventually(ready, timeout, what)


def test_two_processes_and_a_sigkill_post_each_stop_exactly_once(
    incident_sandbox: SandboxHandle, slack_api: SlackStandIn, tmp_path: Path
) -> None:
    runbooks = edited_runbooks(tmp_path, "storm_threshold: {count: 10,", "storm_threshold: {count: 1000,")
    rb = runbooks / "session-recovery.yaml"
    rb.write_text(rb.read_text().replace("claim_lease: {duration: 2m,", "claim_lease: {duration: 3s,"))
    db = tmp_path / "recover.db"
    config: dict[str, object] = {
        "control_host_url": incident_sandbox.url,
        "control_host_api_key": incident_sandbox.api_key,
        "db_path": str(db),
        "slack_bot_token": BOT_TOKEN,
        "slack_signing_secret": SIGNING_SECRET,
        "slack_api_url": slack_api.base_url,
        "watch_channel": CHANNEL,
        "watch_interval": 0.05,
        "runbooks_dir": str(runbooks),
    }
    ids = [f"ses_wp_{i:03d}" for i in range(STOPS)]
    for sid in ids:
        incident_sandbox.admin.create_session(clone("healthy", sid))
    # Each post is answered 0.2 s after Slack holds it: the kill lands on a claim of the killed process,
    # most likely one whose post reached the channel but whose ts it never stored.
    slack_api.slow("chat.postMessage", 0.2)
    a, b = start_watcher_process(config), start_watcher_process(config)
    c = None
    saved = WatchStore(Store(db, migrations=[watch_migrations]), "default")
    left: set[str] = set()
    try:
        for i, sid in enumerate(ids):
            incident_sandbox.admin.stop(sid)
            time.sleep(0.03)
            if i == STOPS // 2:
                _until(lambda: bool(_unposted(saved, a.pid)), 10, "a claim of a not yet posted")
                a.send_signal(signal.SIGKILL)
                a.wait(10)
                left = _unposted(saved, a.pid)
                c = start_watcher_process(config)
        # Done once every stop is posted (and it stays so for 1 s: nothing posts it again).
        eventually(lambda: saved.counts().get("posted", 0) >= STOPS, 90, "every stop posted")
        time.sleep(1.0)
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
