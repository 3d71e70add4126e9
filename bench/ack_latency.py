"""Ack latency of `/recover` under 20 concurrent commands, against a bare Bolt app on the same server.

Both apps run on the same server kind (Bolt's ASGI adapter under uvicorn, bot.slack.server) on
127.0.0.1:0 and answer the same signed slash commands. The bot's app is the real one (build_bot) over
the real router and the sandbox control host, with a 10 s latency fault on every control-host call,
so any control-host call on the ack path would show. The bare app only acks.

    python bench/ack_latency.py [--rounds 15] [--concurrency 20]

Targets: bot p99 ≤ 1.5 × bare p99, and bot p99 < 300 ms. Results: bench/out/ack_latency.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from slack_bolt import Ack, App  # noqa: E402
from slack_sdk import WebClient  # noqa: E402

from bot.sandbox import start_sandbox  # noqa: E402
from bot.services import build_router  # noqa: E402
from bot.slack import HttpServer, RecoverAsgi, build_bot  # noqa: E402
from bot.store import Store  # noqa: E402
from tests.fixtures.slack import SIGNING_SECRET, SlackSender, SlackStandIn, slack_settings  # noqa: E402


def bare_app(api: SlackStandIn) -> App:
    app = App(client=WebClient(token="xoxb-bare", base_url=api.base_url), signing_secret=SIGNING_SECRET)

    @app.command("/recover")
    def ack_only(ack: Ack) -> None:
        ack(text="received")

    return app


def one_round(url: str, concurrency: int, pool: ThreadPoolExecutor, clients: list[SlackSender]) -> list[float]:
    barrier = threading.Barrier(concurrency)

    def one(i: int) -> float:
        sender = clients[i]
        body = sender.command_body("diagnose ses_restore_transient", user=f"UBENCH{i}")
        barrier.wait()
        t0 = time.perf_counter()
        r = sender.post(body, content_type="application/x-www-form-urlencoded")
        elapsed = time.perf_counter() - t0
        assert r.status_code == 200, r.status_code
        return elapsed * 1000

    return list(pool.map(one, range(concurrency)))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    # Background diagnoses keep failing against the 10 s fault and a stopped stand-in: not the subject.
    logging.getLogger("recover_bot").setLevel(logging.CRITICAL)

    api = SlackStandIn()
    sandbox = start_sandbox()
    sandbox.admin.fault("latency", "*", seconds=10, times=None)  # the control host takes 10 s
    tmp = tempfile.TemporaryDirectory(prefix="recover-bench-")
    db = Path(tmp.name) / "bench.db"
    settings = slack_settings(api, db)
    bot = build_bot(settings, build_router(settings, sandbox=sandbox), store=Store(db))
    servers = {
        "bare": HttpServer(RecoverAsgi(bare_app(api)), "127.0.0.1", 0).start(),
        "recover-bot": HttpServer(RecoverAsgi(bot.app), "127.0.0.1", 0).start(),
    }
    latencies: dict[str, list[float]] = {name: [] for name in servers}
    pool = ThreadPoolExecutor(args.concurrency)
    senders = {
        name: [SlackSender(s.url + "/slack/events", stand_in=api) for _ in range(args.concurrency)]
        for name, s in servers.items()
    }
    try:
        for name, server in servers.items():  # warm-up: connections, imports, first SQLite open
            one_round(server.url + "/slack/events", args.concurrency, pool, senders[name])
        for _ in range(args.rounds):  # interleaved, so both see the same machine load
            for name, server in servers.items():
                latencies[name].extend(one_round(server.url + "/slack/events", args.concurrency, pool, senders[name]))
    finally:
        pool.shutdown()
        for group in senders.values():
            for s in group:
                s.close()
        for server in servers.values():
            server.stop()
        bot.work.shutdown(wait=False)  # queued diagnoses are abandoned; running ones end on their timeout
        bot.ui.shutdown(wait=False)
        sandbox.admin.clear_faults()
        sandbox.stop()
        api.stop()
        tmp.cleanup()

    summary = {
        name: {
            "n": len(v),
            "p50_ms": round(statistics.median(v), 1),
            "p99_ms": round(pct(v, 99), 1),
            "max_ms": round(max(v), 1),
        }
        for name, v in latencies.items()
    }
    ratio = summary["recover-bot"]["p99_ms"] / max(summary["bare"]["p99_ms"], 0.001)
    summary["p99_ratio"] = round(ratio, 2)  # type: ignore[assignment]
    met = ratio <= 1.5 and summary["recover-bot"]["p99_ms"] < 300
    summary["targets_met"] = met  # type: ignore[assignment]
    print(f"{'app':<12} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name in servers:
        s = summary[name]
        print(f"{name:<12} {s['n']:>5} {s['p50_ms']:>8} {s['p99_ms']:>8} {s['max_ms']:>8}")
    print(f"p99 ratio recover-bot/bare: {ratio:.2f} (target ≤ 1.5); p99 < 300 ms: "
          f"{summary['recover-bot']['p99_ms'] < 300}")
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "ack_latency.json").write_text(json.dumps(summary, indent=2))
    _ = httpx  # the senders use httpx; imported here so a missing install fails early
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
