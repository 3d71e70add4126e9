"""Isolation of installations: one installation's control host answering 503 (or 429) for a while leaves
another's triage of ~1,000 sessions within 1.2× its solo time (separate clients, pacing and pools).

us-1 is the sandbox in mass-incident mode (20 ms per call, 100 requests/s per key, as
bench_triage_batch.py); eu-1 is a stand-in that answers every call 503 (or 429 with Retry-After),
hammered the whole time by eu-1 diagnoses and triages from the same bot. Prints the solo and the
outage figures (best of ``--runs``), the ratio, and what eu-1's host received.

    PYTHONPATH=. .venv/bin/python bench/installations_isolation.py --sessions 1000 --outage 60
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bot.fleet_router import build_fleet_router
from bot.installations import InstallationSpec
from bot.messages import ListReporter
from bot.sandbox import start_sandbox
from bot.settings import load_settings
from tests.installations.standin import TroubledHost

TARGET = 1.2


def _triage(router: Any) -> float:
    t = time.monotonic()
    reply = router.handle_text("/recover triage", actor="alice", channel="C0US1", reporter=ListReporter())
    assert reply.ok, reply.messages[0].plain_text()
    return time.monotonic() - t


def _hammer(router: Any, stop: threading.Event, counts: list[int]) -> None:
    lines = ("/recover triage", "/recover diagnose ses_i00001")
    i = 0
    while not stop.is_set():
        router.handle_text(lines[i % 2], actor="bob", channel="C0EU1", reporter=ListReporter())
        counts[0] += 1
        i += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--outage", type=float, default=60.0, help="seconds eu-1 answers 503/429 (at least one triage)")
    ap.add_argument("--mode", choices=("503", "429"), default="503")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--rate", type=float, default=100.0)
    args = ap.parse_args()
    size = round(args.sessions / 0.82)  # 18 % of an incident waits in backoff: not listed
    troubled = TroubledHost(args.mode)
    with start_sandbox(scenarios=None, incident=size, latency=args.latency, rate_limit=args.rate) as sbx:
        settings = load_settings({}, dotenv=None).model_copy(update={"db_path": Path(tempfile.mkdtemp()) / "r.db"})
        specs = [
            InstallationSpec(name="eu-1", control_host_url=troubled.url, api_key=SecretStr("k-eu"), channels=("C0EU1",)),
            InstallationSpec(name="us-1", control_host_url=sbx.url, api_key=SecretStr(sbx.api_key), channels=("C0US1",)),
        ]
        router = build_fleet_router(settings, specs, startup=False)
        solo = min(_triage(router) for _ in range(args.runs))
        stop, counts = threading.Event(), [0]
        hammers = [threading.Thread(target=_hammer, args=(router, stop, counts), daemon=True) for _ in range(2)]
        started = time.monotonic()
        for h in hammers:
            h.start()
        during = []
        while len(during) < args.runs or time.monotonic() - started < args.outage:
            during.append(_triage(router))
        stop.set()
        for h in hammers:
            h.join(120)
        outage = min(during)
    troubled.stop()
    ratio = outage / solo
    print(f"us-1 triage of {args.sessions} sessions ({args.latency * 1000:.0f} ms/call, {args.rate:.0f}/s limit)")
    print(f"solo: {solo:.2f} s (best of {args.runs})")
    print(f"eu-1 answering {args.mode} for {time.monotonic() - started:.0f} s: us-1 triage {outage:.2f} s "
          f"(best of {len(during)}; all: {', '.join(f'{d:.2f}' for d in during)})")
    print(f"eu-1: {counts[0]} commands run against it, its host answered {troubled.calls} calls, {troubled.posts} POSTs")
    print(f"ratio {ratio:.2f}× (target ≤ {TARGET}×): {'PASS' if ratio <= TARGET else 'FAIL'}")


if __name__ == "__main__":
    main()
