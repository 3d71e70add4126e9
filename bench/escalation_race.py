"""The escalation ladder's race, many times: ``--requests`` two-person requests across a shortened
ladder on a simulated clock, each decided (approve, reject, withdraw) while one of its steps is being
posted, the rest left to expire; over the real core, the sandbox control host and a SQLite file.

Prints, summed over ``--runs`` runs: steps posted, posts after a decision (late), posts twice, lost
steps, decisions that began while their request's post was in flight (racing), and decisions refused
while a post was in flight (busy, retried). Writes the totals to ``bench/out/escalation_race.json``
after every run, so a stopped bench (``--until``, a signal) leaves honest totals of the runs it finished.

    PYTHONPATH=. .venv/bin/python bench/escalation_race.py --runs 1000 --requests 100 --jobs 4

Where one run's time went (100 requests, 10-30 ms Slack latency, one process, 2 shared cores at load
1.3-2; cProfile and py-spy): 13.3 s (36 s with eight sessions' work on the machine) — making the 100
requests 3.3 s (each a diagnosis over HTTP to the sandbox and ~8 fsync'd write transactions), the
race ~10 s, in which the one ladder thread posts ~280 steps one after another and sleeps 5.7 s of
simulated Slack latency, the rest its claim and posted commits (``synchronous=FULL``, a connection
per transaction: the product's store) and the decisions' sends; opening and migrating the store 0.2 s.
Sleeps and fsyncs leave a core mostly idle: one run used ~7 s of CPU in 13 s.

What makes it faster, keeping what it proves (the real core, store, runner and decision paths, a real
SQLite file with the product's pragmas, every decision's send to the sandbox over HTTP, each decision
let go while its request's post is in flight): each run copies a store file migrated once per process
instead of migrating, and ``--jobs`` processes, each with its own sandbox, share the runs (a run mostly
sleeps or waits for fsync, so 3-4 of them fill two cores). A shorter simulated latency is possible
(``--latency-ms``, ``--lag-ms``) but weakens the bench: with the fence and the in-transaction check
removed, one 40-request run posted 12 steps after their decision at 10-30 ms / 4 ms and only 1 at
3-9 ms / 1.5 ms (most decisions take longer than a 3-9 ms post to commit), so the default stays the
CI test's 10-30 ms. ``racing`` counts the decisions that began while their post was in flight.
Measured (one process, back to back, same load): 12.0-13.0 s per run before, 7.4-8.6 s at 3-9 ms;
bench/README.md has the throughput with ``--jobs`` and the 1,000-run attempt.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
KEYS = ("requests", "posts", "late", "duplicates", "lost", "busy", "racing", "decided")

_worker: dict[str, Any] = {}


def _migrated_template(folder: Path) -> Path:
    """A store file with every migration applied and no binding (each worker binds its own sandbox)."""
    from bot.app.services import MIGRATIONS
    from bot.clock import ManualClock
    from bot.store import Store

    path = folder / "template.db"
    Store(path, ManualClock(), migrations=MIGRATIONS)
    with sqlite3.connect(path) as conn:  # fold the WAL into the file, so copying the file copies it all
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _start(latency: tuple[float, float], lag: float) -> None:
    from bot.runbook import load_runbooks
    from bot.sandbox import start_sandbox
    from tests.fixtures.escalation import short_ladder_folder

    tmp = Path(tempfile.mkdtemp(prefix="escalation-race-"))
    _worker.update(
        tmp=tmp,
        sandbox=start_sandbox(scenarios=None),
        latency=latency,
        lag=lag,
        runbooks=load_runbooks(short_ladder_folder(tmp)),
        template=_migrated_template(tmp),
    )


def _one(job: tuple[int, int]) -> dict[str, Any]:
    from tests.escalation.ladder_env import decider, race_env, requester
    from tests.escalation.race import RaceResult, run_race

    run, requests = job
    started = time.monotonic()
    db = _worker["tmp"] / f"race-{run}.db"
    shutil.copyfile(_worker["template"], db)
    result = RaceResult()
    env, svc, runner = race_env(_worker["sandbox"], db, _worker["runbooks"], result, latency=_worker["latency"])
    try:
        out = run_race(
            requester(env, svc, f"b{run}"),
            decider(env, svc),
            runner,
            env.clock,
            requests=requests,
            seed=run,
            lag=_worker["lag"],
        )
    finally:
        env.close()
    for leftover in _worker["tmp"].glob(f"race-{run}.db*"):
        leftover.unlink()
    return {
        "run": run,
        "seconds": time.monotonic() - started,
        "requests": out.requests,
        "posts": out.posts,
        "late": out.late,
        "duplicates": out.duplicates,
        "lost": out.lost,
        "busy": out.busy,
        "racing": out.racing,
        "decided": sum(out.decided.values()),
    }


def _summary(
    args: argparse.Namespace, totals: Counter[str], done: int, started: float, stopped: str | None
) -> dict[str, Any]:
    elapsed = time.monotonic() - started
    return {
        "runs_planned": args.runs,
        "runs_completed": done,
        "requests_per_run": args.requests,
        "jobs": args.jobs,
        "latency_ms": list(args.latency_ms),
        "lag_ms": args.lag_ms,
        "seconds": round(elapsed, 1),
        "seconds_per_run": round(elapsed / done, 2) if done else None,
        "stopped": stopped,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        **{k: totals[k] for k in KEYS},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1, help="processes sharing the runs (each its own sandbox)")
    parser.add_argument(
        "--latency-ms",
        type=float,
        nargs=2,
        default=(10.0, 30.0),
        metavar=("LOW", "HIGH"),
        help="Slack's simulated answer time, the window a decision races (the CI test's)",
    )
    parser.add_argument("--lag-ms", type=float, default=4.0, help="a decision starts within this of its post")
    parser.add_argument("--until", help="stop at this UTC time (HH:MM) and record the runs finished by then")
    parser.add_argument("--json", type=Path, default=OUT / "escalation_race.json")
    args = parser.parse_args()
    if not 0 < args.lag_ms < args.latency_ms[0]:
        parser.error("--lag-ms must be above 0 and below the latency's low end, or posts end before decisions")
    deadline = None
    if args.until:
        hh, mm = (int(x) for x in args.until.split(":"))
        now = datetime.now(UTC)
        deadline = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if deadline <= now:  # past midnight
            deadline += timedelta(days=1)
    latency = (args.latency_ms[0] / 1000, args.latency_ms[1] / 1000)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    totals: Counter[str] = Counter()
    done = 0
    stopped: str | None = None
    started = time.monotonic()
    pool = multiprocessing.Pool(args.jobs, initializer=_start, initargs=(latency, args.lag_ms / 1000))
    try:
        for out in pool.imap_unordered(_one, [(run, args.requests) for run in range(args.runs)]):
            done += 1
            totals.update({k: out[k] for k in KEYS})
            print(
                f"run {out['run'] + 1} ({done}/{args.runs}, {out['seconds']:.1f}s): {out['posts']} posts, "
                f"{out['late']} late, {out['duplicates']} twice, {out['lost']} lost, {out['decided']} decided, "
                f"{out['racing']} racing, {out['busy']} busy",
                flush=True,
            )
            args.json.write_text(json.dumps(_summary(args, totals, done, started, None), indent=2))
            if deadline is not None and datetime.now(UTC) >= deadline:
                stopped = f"stopped at {args.until} UTC after {done} of {args.runs} runs"
                break
    except KeyboardInterrupt:
        stopped = f"interrupted after {done} of {args.runs} runs"
    finally:
        pool.terminate()
        pool.join()
    args.json.write_text(json.dumps(_summary(args, totals, done, started, stopped), indent=2))
    print(
        f"{done} run(s) of {args.requests} requests in {time.monotonic() - started:.0f}s ({args.jobs} jobs): "
        f"{totals['requests']} requests, {totals['posts']} steps posted, {totals['decided']} decisions, "
        f"{totals['racing']} of them begun while their post was in flight, "
        f"{totals['late']} posted after a decision, {totals['duplicates']} posted twice, "
        f"{totals['lost']} lost; {totals['busy']} decisions refused while a post was in flight (retried)"
        + (f" [{stopped}]" if stopped else "")
    )
    return 1 if totals["late"] or totals["duplicates"] or totals["lost"] or not done else 0


if __name__ == "__main__":
    raise SystemExit(main())
