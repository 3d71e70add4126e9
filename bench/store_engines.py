"""The chain's append rate on either engine: one writer against two, SQLite file against PostgreSQL.

Each writer is a process of its own with its own :class:`bot.store.Store` (a connection per unit of
work, as the bot opens them), appending ``--steps`` steps with ``record_step`` (each its own write
transaction: on SQLite ``BEGIN IMMEDIATE`` and ``synchronous=FULL``; on PostgreSQL ``BEGIN`` and the
store's advisory lock). After each run ``audit verify`` checks the chain is one chain (every step, no
break) and the bench counts steps per second of wall time, from the first writer's start to the last
one's end. The machine's load average is printed beside the figures: the 2 cores are shared.

    PYTHONPATH=. .venv/bin/python bench/store_engines.py --steps 300 --runs 3 --pg-url "$RECOVER_TEST_PG_URL"

Without ``--pg-url`` (or ``RECOVER_TEST_PG_URL``) only SQLite is measured. Each PostgreSQL run uses a
fresh schema on that server, dropped afterwards. Results: ``bench/out/store_engines.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"


def _writer(target: str, name: str, steps: int, start: Any, done: Any) -> None:
    from bot.store import Store

    store = Store(target)
    start.wait()
    began = time.monotonic()
    for i in range(steps):
        store.record_step(f"ses_{i % 5}", name, "bench_step", {"writer": name, "i": i}, "ok")
    done.put((name, began, time.monotonic()))


def _run(target: str, writers: int, steps: int) -> dict[str, Any]:
    from bot.store import Store
    from bot.store.audit import verify

    Store(target)  # migrated once before the clock starts
    ctx = multiprocessing.get_context("spawn")
    start, done = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(target, f"W{n}", steps, start, done)) for n in range(writers)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # every writer has imported and opened its store
    start.set()
    spans = [done.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    wall = max(end for _, _, end in spans) - min(began for _, began, _ in spans)
    report = verify(target)
    assert report.ok and report.steps == writers * steps, report.summary()
    return {"steps": writers * steps, "seconds": round(wall, 3), "per_second": round(writers * steps / wall, 1)}


def _pg_target(server: str) -> tuple[str, str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    joiner = "&" if "?" in server else "?"
    return f"{server}{joiner}options=-csearch_path%3D{schema}", schema


def _drop(server: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="steps each writer appends")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-url", default=os.environ.get("RECOVER_TEST_PG_URL", ""))
    args = parser.parse_args()
    engines = ["sqlite"] + (["postgresql"] if args.pg_url else [])
    results: dict[str, Any] = {"steps_per_writer": args.steps, "runs": args.runs, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="recover-bench-") as folder:
        for engine in engines:
            for writers in (1, 2):
                rates = []
                for run in range(args.runs):
                    if engine == "sqlite":
                        target, schema = str(Path(folder) / f"w{writers}-r{run}.db"), ""
                    else:
                        target, schema = _pg_target(args.pg_url)
                    try:
                        rates.append(_run(target, writers, args.steps))
                    finally:
                        if schema:
                            _drop(args.pg_url, schema)
                per_second = [r["per_second"] for r in rates]
                results[f"{engine}_{writers}"] = {"runs": rates, "median_per_second": statistics.median(per_second)}
                print(
                    f"{engine:10s} writers={writers} steps/s median {statistics.median(per_second):7.1f} "
                    f"(runs: {', '.join(f'{r:.1f}' for r in per_second)})  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    for engine in engines:
        one, two = results[f"{engine}_1"]["median_per_second"], results[f"{engine}_2"]["median_per_second"]
        results[f"{engine}_two_over_one"] = round(two / one, 2)
        print(f"{engine:10s} two writers / one: {two / one:.2f}")
    results["load_after"] = os.getloadavg()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "store_engines.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
