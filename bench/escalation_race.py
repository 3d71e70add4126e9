"""The escalation ladder's race, many times: ``--requests`` two-person requests across a shortened
ladder on a simulated clock, each decided (approve, reject, withdraw) while one of its steps is being
posted, the rest left to expire; over the real core, the sandbox control host and a SQLite file.

Prints, summed over ``--runs`` runs: steps posted, posts after a decision (late), posts twice, lost
steps, and decisions that found a post in flight (they waited, or were refused and retried).

    PYTHONPATH=. .venv/bin/python bench/escalation_race.py --runs 1000 --requests 100
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from bot.runbook import load_runbooks
from bot.sandbox import start_sandbox
from tests.escalation.ladder_env import decider, race_env, requester
from tests.escalation.race import RaceResult, run_race
from tests.fixtures.escalation import short_ladder_folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    totals: Counter[str] = Counter()
    started = time.monotonic()
    sandbox = start_sandbox(scenarios=None)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runbooks = load_runbooks(short_ladder_folder(Path(tmp)))
            for run in range(args.runs):
                result = RaceResult()
                env, svc, runner = race_env(sandbox, Path(tmp) / f"race-{run}.db", runbooks, result)
                try:
                    out = run_race(requester(env, svc, f"b{run}"), decider(env, svc), runner, env.clock,
                                   requests=args.requests, seed=run)
                finally:
                    env.close()
                totals.update(requests=out.requests, posts=out.posts, late=out.late, duplicates=out.duplicates,
                              lost=out.lost, busy=out.busy, decided=sum(out.decided.values()))
                print(f"run {run + 1}/{args.runs}: {out.posts} posts, {out.late} late, {out.duplicates} twice, "
                      f"{out.lost} lost, {sum(out.decided.values())} decided", flush=True)
    finally:
        sandbox.stop()
    print(f"{args.runs} run(s) of {args.requests} requests in {time.monotonic() - started:.0f}s: "
          f"{totals['posts']} steps posted, {totals['decided']} decisions racing a post, "
          f"{totals['late']} posted after a decision, {totals['duplicates']} posted twice, "
          f"{totals['lost']} lost; {totals['busy']} decisions refused while a post was in flight (retried)")
    return 1 if totals["late"] or totals["duplicates"] or totals["lost"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
