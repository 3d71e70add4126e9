"""The whole store-outage incident end to end over Slack HTTP, at N sessions.

``recover-bot serve`` as its own process (signed Slack HTTP in, the Slack Web API stand-in out, the
watcher on with ``RECOVER_WATCH_CHANNEL``, polling at the runbook's 30 s unless ``--interval``), the
sandbox control host over HTTP with 20 ms per call and 100 requests/s, one SQLite store. N sessions stop
at once (``RESTORE_FAILED restore_unavailable``, their checkpoint store out); the watcher's first word,
then the same message edited into the triage; the store comes back (the fix); the triage's batch
command and a second person's Approve; the workers restore and report ready; the bot's verification
closes each case. The scenario is ``tests/fixtures/storm.py``, which the CI test runs at N = 60.

Prints one table (with the machine's load beside it), writes ``bench/out/storm.json`` and exits 1
when a target is missed.

    PYTHONPATH=. .venv/bin/python bench/storm.py [--sessions 1000] [--interval 30] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.fixtures.storm import StormFigures, run_storm

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"

#: The issue's targets: (figure, limit, what it says).
COMMANDS_MAX = 4
FIRST_WORD_MAX = 30.0  # seconds after the poll that sees the storm
VERIFIED_MAX = 180.0  # seconds from the fix to every case closed by verification
POSTS_MAX = 3


def misses(f: StormFigures) -> list[str]:
    out = []
    if len(f.commands) > COMMANDS_MAX:
        out.append(f"{len(f.commands)} human commands > {COMMANDS_MAX}")
    if f.poll_to_first_word is None or f.poll_to_first_word > FIRST_WORD_MAX:
        out.append(f"first word {f.poll_to_first_word} s after its poll > {FIRST_WORD_MAX:.0f} s")
    if f.closed_by_verification != f.n:
        out.append(f"{f.closed_by_verification}/{f.n} cases closed by verification")
    if f.fix_to_all_verified is None or f.fix_to_all_verified > VERIFIED_MAX:
        out.append(f"fix → all verified {f.fix_to_all_verified} s > {VERIFIED_MAX:.0f} s")
    if f.top_level_posts > POSTS_MAX:
        out.append(f"{f.top_level_posts} top-level posts > {POSTS_MAX}")
    if f.sessions_sent_twice or f.sends_per_session_max != 1 or f.keys_per_session_max != 1:
        out.append(f"sent twice {f.sessions_sent_twice}, max sends {f.sends_per_session_max}")
    if f.sessions_sent != f.n:
        out.append(f"{f.sessions_sent}/{f.n} sessions sent")
    return out


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| run | N | load (1-min avg: start / end) | commands | stop → first word (poll → first word) "
        "| stop → triage | fix → all verified | top-level posts | sends/session max | sent twice | met |"
    )
    lines = [head, "|" + "---|" * 11]
    for i, r in enumerate(rows, 1):
        f: StormFigures = r["figures"]
        lines.append(
            f"| {i} | {f.n} | {r['load'][0]:.1f} / {r['load'][1]:.1f} | {len(f.commands)} "
            f"| {_s(f.stop_to_first_word)} ({_s(f.poll_to_first_word)}) | {_s(f.stop_to_triage)} "
            f"| {_s(f.fix_to_all_verified)} ({f.closed_by_verification}/{f.n}) | {f.top_level_posts} "
            f"| {f.sends_per_session_max} | {f.sessions_sent_twice} | {'yes' if not r['misses'] else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=30.0, help="RECOVER_WATCH_INTERVAL (the runbook's 30 s)")
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--runs", type=int, default=1, help="runs one after another (the issue: three in a row)")
    ap.add_argument("--timeout", type=float, default=900.0, help="bound on each wait of a run")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for run in range(1, args.runs + 1):
        start_load = os.getloadavg()[0]
        t = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="storm-") as tmp:
            f = run_storm(
                args.sessions,
                Path(tmp),
                latency=args.latency,
                rate_limit=args.rate,
                interval=args.interval,
                timeout=args.timeout,
                say=lambda m, run=run: print(f"[run {run}] {m}", flush=True),
            )
        rows.append({"figures": f, "load": (start_load, os.getloadavg()[0]), "misses": misses(f)})
        print(f"[run {run}] {time.monotonic() - t:.0f} s; commands: {f.commands}", flush=True)
        for miss in rows[-1]["misses"]:
            print(f"[run {run}] MISSED: {miss}", flush=True)
    print(table(rows))
    OUT.mkdir(parents=True, exist_ok=True)
    data = [{**r["figures"].as_json(), "load": r["load"], "misses": r["misses"]} for r in rows]
    (OUT / "storm.json").write_text(json.dumps(data, indent=1) + "\n")
    return 1 if any(r["misses"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
