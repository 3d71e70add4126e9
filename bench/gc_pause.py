"""How long the garbage collector holds the acking process, with and without ``gc.freeze``.

The acking side of ``recover-bot serve`` is built as serve builds it (build_bot over the real router
and the inbox, the checked front on the threaded server); then N signed `/recover diagnose` commands
are sent one after another from a client thread and every collection is timed through
``gc.callbacks``. Run twice in fresh processes: as the process is after start-up, and after
``bot.slack.server.freeze_startup_heap()`` (what serve calls before it accepts).

    python bench/gc_pause.py [--requests 3000]

What matters for the ack tail is the longest pause (a full, generation-2 collection walks every
long-lived object with the interpreter held). Results: bench/out/gc_pause.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(requests: int, freeze: bool) -> dict[str, Any]:
    """One process's run: build, optionally freeze, send, and time every collection."""
    from bot.slack import HttpServer, SlackFront, build_bot
    from bot.slack.server import freeze_startup_heap
    from bot.store import Store
    from tests.fixtures.composing import default_router
    from tests.fixtures.slack import SIGNING_SECRET, SlackSender, SlackStandIn, slack_settings

    logging.getLogger("recover_bot").setLevel(logging.CRITICAL)
    api = SlackStandIn()
    db = Path(tempfile.mkdtemp(prefix="recover-gc-")) / "gc.db"
    settings = slack_settings(api, db, control_host_url="http://127.0.0.1:9", control_host_api_key="k")
    bot = build_bot(settings, default_router(settings, startup=False), store=Store(db))
    bot.handoff = lambda item_id: None  # the acking side only: nothing runs the queued work here
    server = HttpServer(SlackFront(bot.app, signing_secret=SIGNING_SECRET)).start()
    long_lived = len(gc.get_objects())
    if freeze:
        freeze_startup_heap()
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses[info["generation"]].append((time.perf_counter() - started[0]) * 1000)

    gc.callbacks.append(timed)
    sender = SlackSender(server.url + "/slack/events", stand_in=api)
    t0 = time.perf_counter()
    for i in range(requests):
        assert sender.command(f"diagnose ses_{i}", user=f"U{i % 50}").status_code == 200
    elapsed = time.perf_counter() - t0
    gc.callbacks.remove(timed)
    return {
        "frozen": freeze,
        "objects_after_start": long_lived,
        "requests": requests,
        "seconds": round(elapsed, 2),
        **{
            f"gen{g}": {"collections": len(v), "max_ms": round(max(v, default=0.0), 1), "total_ms": round(sum(v), 1)}
            for g, v in pauses.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--child", choices=["plain", "frozen"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.requests, args.child == "frozen")), flush=True)
        return 0
    results = []
    for mode in ("plain", "frozen"):  # each in a fresh process: a frozen heap cannot be thawed for a fair second run
        out = subprocess.run(
            [sys.executable, __file__, "--requests", str(args.requests), "--child", mode],
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'heap':<7} {'objects':>8} {'gen2 n':>7} {'gen2 max ms':>12} {'all pauses ms':>14} {'longest ms':>11}")
    for r in results:
        longest = max(r[f"gen{g}"]["max_ms"] for g in range(3))
        total = sum(r[f"gen{g}"]["total_ms"] for g in range(3))
        name = "frozen" if r["frozen"] else "plain"
        print(
            f"{name:<7} {r['objects_after_start']:>8} {r['gen2']['collections']:>7} {r['gen2']['max_ms']:>12} "
            f"{total:>14.1f} {longest:>11}"
        )
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "gc_pause.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
