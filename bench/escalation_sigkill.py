"""The escalation ladder across a SIGKILL, many times: ``--requests`` two-person requests per run on a
real store file, two ladder runner processes (as serve workers run them) posting to the Slack
stand-in, one SIGKILLed while it holds a claim (after a seeded 0-3 of its claims), a fresh process
started in its place; real time, a 1 s / 2 s / 3 s ladder and a 15 s expiry.

Counts, summed over the runs: steps expected (three ladder steps and the expiry per request), steps
lost (a row left neither posted nor cancelled, an expiry not announced, a posted step missing from its
thread), steps said twice in a thread, ladder steps cancelled because their request expired before a
runner reached them (never said late: right, but the runners fell behind), claims the killed process
held and how many of them another process took over. The scenario is the CI test's
(tests/escalation/kill.py, 12 requests there). Writes ``bench/out/escalation_sigkill.json`` after
every run.

    PYTHONPATH=. .venv/bin/python bench/escalation_sigkill.py --runs 20 --requests 100
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"


def main() -> int:
    from bot.sandbox import start_sandbox
    from tests.escalation.kill import run_kill
    from tests.fixtures.slack import SlackStandIn

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument(
        "--post-ms",
        type=float,
        default=100.0,
        help="Slack answers each post this long after holding it (the kill's window)",
    )
    parser.add_argument("--json", type=Path, default=OUT / "escalation_sigkill.json")
    args = parser.parse_args()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    totals: dict[str, Any] = {
        "runs_planned": args.runs,
        "runs_completed": 0,
        "requests_per_run": args.requests,
        "post_ms": args.post_ms,
        "requests": 0,
        "expected": 0,
        "lost": 0,
        "twice": 0,
        "cancelled": 0,
        "killed_claims": 0,
        "taken_over": 0,
        "kills_on_a_claim": 0,
        "seconds": [],
    }
    sandbox, slack = start_sandbox(scenarios=None), SlackStandIn()
    bad = 0
    try:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="escalation-kill-") as folder:
                out = run_kill(
                    sandbox,
                    slack,
                    Path(folder),
                    requests=args.requests,
                    seed=run,
                    post_seconds=args.post_ms / 1000,
                    wait=120 + 4 * args.requests,
                )
            taken = len(out.left & out.taken)
            totals["runs_completed"] += 1
            for key, value in (
                ("requests", out.requests),
                ("expected", out.expected),
                ("lost", out.lost),
                ("twice", out.twice),
                ("cancelled", out.cancelled),
                ("killed_claims", len(out.left)),
                ("taken_over", taken),
                ("kills_on_a_claim", int(bool(out.left))),
            ):
                totals[key] += value
            totals["seconds"].append(round(out.seconds, 1))
            if out.odd or out.unsaid:  # what was not posted, and why (its row and request)
                totals.setdefault("not_posted", []).append(
                    {"run": run, "rows": [list(r) for r in out.odd], "unsaid": out.unsaid}
                )
            bad += out.lost + out.twice  # a left claim whose request expired is looked for, then cancelled
            totals["at"] = datetime.now(UTC).isoformat(timespec="seconds")
            args.json.write_text(json.dumps(totals, indent=2))
            print(
                f"run {run + 1}/{args.runs} ({out.seconds:.0f}s): {out.expected} steps, {out.lost} lost, "
                f"{out.twice} twice, {out.cancelled} cancelled at the expiry; the kill left {len(out.left)} "
                f"claim(s), {taken} taken over",
                flush=True,
            )
            time.sleep(0.2)
    finally:
        sandbox.stop()
        slack.stop()
    print(
        f"{totals['runs_completed']} run(s) of {args.requests} requests: {totals['expected']} steps, "
        f"{totals['lost']} lost, {totals['twice']} twice, {totals['cancelled']} cancelled by their request's "
        f"expiry; {totals['killed_claims']} claim(s) left by the "
        f"SIGKILL ({totals['kills_on_a_claim']} of {totals['runs_completed']} kills on a claim), "
        f"{totals['taken_over']} taken over"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
