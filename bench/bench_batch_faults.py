"""A batch under faults and a SIGKILL: every member ends exactly once, none lost.

Sandbox (no scenarios) with N copies of the store-outage scenario, 20 ms latency per call and a rate
limit of 100 requests/s (the sandbox's traffic options). Faults on the decision path, once each:
``--fail`` of the sessions get ``error_after_commit`` (the decision commits, the answer is a 500) and
``--drop`` get ``drop_after_commit`` (the decision commits, the connection closes without an answer);
both are uncertain outcomes, re-sent with the same key, whose replay returns the original receipt.
A first process requests the batch, a second approves it and is SIGKILLed once ``--kill-at`` of the
members have an outcome; then a third process starts (its start-up resumes the batch with the stored
keys). Counted on the sandbox: effects per session, Idempotency-Keys per session.

    PYTHONPATH=. .venv/bin/python bench/bench_batch_faults.py --sessions 1000
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bot.sandbox import start_sandbox
from tests.fixtures.triage import clone

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import sys
from bot.messages import ListReporter
from tests.fixtures.composing import default_router
from bot.settings import load_settings
settings = load_settings({"CONTROL_HOST_URL": sys.argv[1], "CONTROL_HOST_API_KEY": sys.argv[2],
                          "RECOVER_DB": sys.argv[3]}, dotenv=None)
router = default_router(settings)
for line in sys.argv[5:]:
    reply = router.handle_text(line, actor=sys.argv[4], channel=None, reporter=ListReporter())
print(reply.messages[0].ref or "", reply.messages[0].headline, flush=True)
"""


def child(url: str, key: str, db: Path, actor: str, *lines: str) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", CHILD, url, key, str(db), actor, *lines],
        cwd=REPO,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--drop", type=float, default=0.02)
    ap.add_argument("--fail", type=float, default=0.05)
    ap.add_argument("--kill-at", type=float, default=0.4)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--rate", type=float, default=100.0)
    args = ap.parse_args()
    rng = random.Random(7)  # noqa: S311 - which sessions get faults, repeatable
    db = Path(tempfile.mkdtemp()) / "recover.db"
    with start_sandbox(scenarios=None) as sbx:
        ids = [f"ses_f{i:05d}" for i in range(args.sessions)]
        for sid in ids:
            sbx.admin.create_session(clone("restore_stopped_transient", sid))
        sbx.admin.traffic(latency_ms=args.latency * 1000, rate_limit=args.rate)
        failed = rng.sample(ids, int(len(ids) * args.fail))
        dropped = rng.sample(sorted(set(ids) - set(failed)), int(len(ids) * args.drop))
        for sid in dropped:
            sbx.admin.fault("drop_after_commit", path=f"/v1/sessions/{sid}/recovery-decisions", method="POST")
        for sid in failed:
            sbx.admin.fault("error_after_commit", path=f"/v1/sessions/{sid}/recovery-decisions", method="POST")
        line = '/recover batch decide t1.g1 retry_restore --reason "store back"'
        out, err = child(sbx.url, sbx.api_key, db, "alice", "/recover triage", line).communicate(timeout=900)
        batch_id = out.split()[0]
        assert batch_id.startswith("bat_"), out + err
        started = time.monotonic()
        approver = child(sbx.url, sbx.api_key, db, "bob", f"/recover approve {batch_id}")
        done = 0
        while done < args.sessions * args.kill_at and approver.poll() is None:
            time.sleep(0.05)
            with sqlite3.connect(db) as conn:
                done = conn.execute(
                    "SELECT count(*) FROM batch_members WHERE batch_id = ? AND state NOT IN ('requested', 'sending')",
                    [batch_id],
                ).fetchone()[0]
        approver.send_signal(signal.SIGKILL)
        approver.wait()
        killed_at = time.monotonic() - started
        effects_at_kill = len(sbx.admin.effects())
        resumed = child(sbx.url, sbx.api_key, db, "carol", f"/recover batch {batch_id}")
        out, err = resumed.communicate(timeout=900)
        total = time.monotonic() - started
        effects = Counter(e["session_id"] for e in sbx.admin.effects())
        keys: dict[str, set[str]] = {}
        for r in sbx.admin.requests():
            if r["method"] == "POST":
                keys.setdefault(r["path"].split("/")[3], set()).add(r["idempotency_key"])
        with sqlite3.connect(db) as conn:
            states = dict(
                conn.execute(
                    "SELECT state, count(*) FROM batch_members WHERE batch_id = ? GROUP BY state", [batch_id]
                ).fetchall()
            )
        print(
            f"sessions {args.sessions}, {args.latency * 1000:.0f} ms/call, {args.rate:.0f} requests/s; faults: "
            f"{len(failed)} 500 after commit, {len(dropped)} drop_after_commit"
        )
        print(f"SIGKILL after {killed_at:.1f} s with {done} member outcomes recorded, {effects_at_kill} effects")
        print(f"after the restart ({total:.1f} s in all): member states {states}")
        print(
            f"effects: {sum(effects.values())} on {len(effects)} sessions; more than one: "
            f"{sum(1 for n in effects.values() if n > 1)}; none: {len([s for s in ids if s not in effects])}"
        )
        hits = Counter()
        for f in sbx.admin.faults():
            hits[f["kind"]] += f["hits"]
        print(f"faults that fired: {dict(hits)}")
        print(f"sessions whose POSTs used more than one Idempotency-Key: {sum(1 for k in keys.values() if len(k) > 1)}")


if __name__ == "__main__":
    main()
