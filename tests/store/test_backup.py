"""``recover-bot backup DEST``: a consistent copy of the store and its inbox while the bot writes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.slack.inbox import Inbox, inbox_path
from bot.store import Store, audit
from bot.store.backup import backup, step_count
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess

REPO = Path(__file__).resolve().parents[2]
WRITER = """
import sys, time
from pathlib import Path
from bot.clock import ManualClock
from bot.store import Store
store = Store(sys.argv[1], ManualClock())
Path(sys.argv[2]).write_text("started")
i = 0
while not Path(sys.argv[3]).exists():
    i += 1
    store.record_step(f"ses_{i % 5}", "U1", "note", {"i": i, "pad": "x" * 200}, "ok")
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_a_backup_taken_while_a_process_writes_is_one_consistent_snapshot(tmp_path: Path) -> None:
    live = tmp_path / "live" / "recover.db"
    live.parent.mkdir()
    store = Store(live, ManualClock())
    store.record_step("ses_0", "U1", "note", {"i": 0}, "ok")
    inbox = Inbox(store)
    for n in range(3):
        inbox.put("command", f"ev{n}", {"n": n})
    started, stop = tmp_path / "started", tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(live), str(started), str(stop)], cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        eventually(lambda: started.exists() or writer.poll() is not None, 60, "the writer started")
        if not started.exists():
            assert writer.poll() is None
        time.sleep(0.5)  # the writer commits steps all the while
        res = _cli("backup", str(tmp_path / "copy.db"), "--db", str(live), cwd=tmp_path)
        during = step_count(live)
        # a loaded machine: let the writer commit once more before it is stopped
        eventually(lambda: step_count(live) > during, 20, "one more commit of the writer")
    finally:
        stop.write_text("stop")
        writer.wait(timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    copy = tmp_path / "copy.db"
    lines = res.stdout.splitlines()
    copied = step_count(copy)
    assert lines[0] == f"backed up {live} ({copied} steps) to {copy}; keep it off this host"
    assert lines[1] == f"  {inbox_path(live)} to {inbox_path(copy)}"
    assert 1 < copied <= during < step_count(live)  # taken while the writer ran, not after it stopped
    # One self-contained file per database, each a consistent snapshot: the chain verifies end to end.
    assert not copy.with_name("copy.db-wal").exists()
    assert sqlite3.connect(copy).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    report = audit.verify(copy)
    assert report.ok and report.steps == copied, report.summary()
    conn = sqlite3.connect(inbox_path(copy))
    assert conn.execute("SELECT count(*) FROM slack_inbox").fetchone()[0] == 3
    # The bot opens the copy as its store and carries on.
    restored = Store(copy, ManualClock())
    restored.record_step("ses_0", "U1", "note", {"after": "restore"}, "ok")
    assert audit.verify(copy).ok


def test_backup_never_overwrites_and_names_a_missing_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "recover.db", ManualClock())
    store.record_step("ses_0", "U1", "note", {}, "ok")
    (tmp_path / "taken.db").write_text("an earlier backup")
    res = _cli("backup", str(tmp_path / "taken.db"), "--db", str(store.path), cwd=tmp_path)
    assert res.returncode == 2
    assert (
        res.stderr.strip() == f"error: {tmp_path / 'taken.db'} exists: a backup never overwrites; give a new file name"
    )
    assert (tmp_path / "taken.db").read_text() == "an earlier backup"
    res = _cli("backup", str(tmp_path / "x.db"), "--db", str(tmp_path / "none.db"), cwd=tmp_path)
    assert res.returncode == 2 and "no step store at" in res.stderr
    res = _cli("backup", str(tmp_path / "no" / "such" / "x.db"), "--db", str(store.path), cwd=tmp_path)
    assert res.returncode == 2 and "is not a folder" in res.stderr
    # Without an inbox beside the store (the console alone), only the store is copied.
    copies = backup(store.path, tmp_path / "only.db", companions=[inbox_path])
    assert [c.dest for c in copies] == [tmp_path / "only.db"] and not list(tmp_path.glob("*.partial"))
