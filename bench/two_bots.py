"""Two bots, one PostgreSQL store: 100 two-person requests approved alternately, one bot SIGKILLed mid-run.

Each run is tests/fixtures/two_bots.py's ``run_pair`` on a fresh PostgreSQL schema, a fresh sandbox
control host (over HTTP, in this process) and a fresh Slack Web API stand-in: two real
``recover-bot serve`` processes (HTTP, each with its worker), request ``i`` through bot ``i % 2`` and
its approval through the other, in waves of ``--wave`` at once; after the middle wave's approvals bot
A is SIGKILLed with its worker and started again. A person told their delivery was interrupted types
it again. Counted per run: requests lost (the host never applied the close), sent twice (applied
twice or POSTed under two keys), posted twice (two approval requests or two results for one session).

The ack p99 of the two bots is set against a bare Bolt app's in the same run: every command sent to a
bot is sent to the bare app right after (bench/ack_latency.py's ``BareStdlibServer``, in a process of
its own), so both see the same load. The chain's append rate with two writers against one is
bench/store_engines.py's (one ratio per engine).

    PYTHONPATH=. .venv/bin/python bench/two_bots.py --runs 20 --requests 100 --pg-url "$RECOVER_TEST_PG_URL"

Targets: every run 0 lost, 0 sent twice, 0 posted twice, every case applied once; the bots' ack p99 at
most 1.5 × the bare app's (over all runs). Exit 1 when one is missed. Results: bench/out/two_bots.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
RATIO_MAX = 1.5


def _schema(server: str) -> tuple[str, str]:
    import psycopg

    schema = f"b_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    joiner = "&" if "?" in server else "?"
    return schema, f"{server}{joiner}options=-csearch_path%3D{schema}"


def _drop(server: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def one_run(server: str, n: int, wave: int, bare_url: str, say: Any) -> dict[str, Any]:
    from bot.clock import SystemClock
    from bot.sandbox import AdjustableClock, start_sandbox
    from tests.fixtures.slack import SlackSender, SlackStandIn
    from tests.fixtures.two_bots import run_pair

    local = threading.local()

    def mirror() -> SlackSender:
        if getattr(local, "sender", None) is None:
            local.sender = SlackSender(bare_url + "/slack/events")
        sender: SlackSender = local.sender
        return sender

    schema, url = _schema(server)
    api = SlackStandIn()
    try:
        with (
            start_sandbox(scenarios=None, clock=AdjustableClock(SystemClock())) as sbx,
            tempfile.TemporaryDirectory(prefix="recover-pair-") as folder,
        ):
            figures = run_pair(api, sbx, url, Path(folder), n=n, wave=wave, mirror=mirror, say=say)
        data = figures.as_json()
        data["ok"] = figures.ok
        data["_bot_ms"], data["_bare_ms"] = figures.bot_ack_ms, figures.bare_ack_ms
        return data
    finally:
        api.stop()
        _drop(server, schema)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--wave", type=int, default=10)
    parser.add_argument("--pg-url", default=os.environ.get("RECOVER_TEST_PG_URL", ""))
    args = parser.parse_args()
    if not args.pg_url:
        print('no PostgreSQL: pass --pg-url or eval "$(scripts/start-postgres.sh /tmp/recover-pg)"', file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from bench.ack_latency import Child
    from tests.fixtures.two_bots import p99

    load_start = os.getloadavg()
    logs = Path(tempfile.mkdtemp(prefix="recover-pair-bare-"))
    # The bare app gets a Web API stand-in of its own (a child, as in ack_latency): Bolt calls auth.test
    # on a request until one succeeds, and against no server slack_sdk's retries made each ack 1.1-1.3 s
    # (and a 500), which is no baseline.
    script = str(REPO / "bench" / "ack_latency.py")
    slack = Child("bare-slack-stand-in", [sys.executable, script, "--serve-slack"], logs=logs, stdin=True)
    bare = Child("bare", [sys.executable, script, "--serve-bare", slack.url], logs=logs, stdin=True)
    runs: list[dict[str, Any]] = []
    bot_ms: list[float] = []
    bare_ms: list[float] = []
    try:
        for i in range(args.runs):
            began = time.monotonic()
            data = one_run(args.pg_url, args.requests, args.wave, bare.url, lambda _: None)
            bot_ms += data.pop("_bot_ms")
            bare_ms += data.pop("_bare_ms")
            runs.append(data)
            print(
                f"run {i + 1:>2}: {data['applied']}/{data['n']} applied, lost {len(data['lost'])}, "
                f"sent twice {len(data['sent_twice'])}, posted twice {len(data['posted_twice'])}, "
                f"told interrupted {data['told_interrupted']}, typed again {data['typed_again']}, "
                f"approval posts {data['approval_posts']}/{data['n']}, ack p99 bot {data['bot_ack_p99_ms']} ms "
                f"/ bare {data['bare_ack_p99_ms']} ms, {time.monotonic() - began:.0f} s",
                flush=True,
            )
    finally:
        bare.stop("stdin", 10)
        slack.stop("stdin", 10)
    load_end = os.getloadavg()
    bot_p99, bare_p99 = p99(bot_ms), p99(bare_ms)
    ratio = round(bot_p99 / max(bare_p99 or 0.001, 0.001), 2) if bot_p99 is not None else None
    lost = sum(len(r["lost"]) for r in runs)
    twice = sum(len(r["sent_twice"]) for r in runs)
    posted = sum(len(r["posted_twice"]) for r in runs)
    met = all(r["ok"] for r in runs) and ratio is not None and ratio <= RATIO_MAX
    summary = {
        "runs": runs,
        "requests_per_run": args.requests,
        "wave": args.wave,
        "lost": lost,
        "sent_twice": twice,
        "posted_twice": posted,
        "ack_p99_ms": {"bots": bot_p99, "bare": bare_p99, "ratio": ratio, "acks": len(bot_ms)},
        "ack_p50_ms": {
            "bots": round(statistics.median(bot_ms), 1) if bot_ms else None,
            "bare": round(statistics.median(bare_ms), 1) if bare_ms else None,
        },
        "seconds_per_run_median": statistics.median(r["seconds"] for r in runs) if runs else None,
        "load_average": {"start": load_start, "end": load_end},
        "cpus": os.cpu_count(),
        "targets_met": met,
    }
    print(
        f"{len(runs)} runs × {args.requests} requests: lost {lost}, sent twice {twice}, posted twice {posted}; "
        f"ack p99 bots {bot_p99} ms vs bare Bolt {bare_p99} ms (ratio {ratio}, target ≤ {RATIO_MAX}); "
        f"load {load_start[0]:.1f} → {load_end[0]:.1f} on {os.cpu_count()} cores; targets met: {met}"
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "two_bots.json").write_text(json.dumps(summary, indent=2))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
