"""The sandbox's mass-incident mode: listing the sessions needing an operator, and the traffic options.

1. Creates incidents of 1,000 and 5,000 sessions and times a full cursor walk of
   ``GET /v1/sessions?admission_state=recovery_required`` (pages of 50 and of 1,000) over HTTP.
2. With ``latency=20 ms`` and ``rate_limit=100/s``, sends GETs from ``--clients`` threads sharing one
   API key for ``--seconds`` and reports the accepted rate, the 429 count and the latency seen.

Usage::

    python bench/sandbox_incident.py                  # 1000 and 5000 sessions; 16 threads for 5 s
    python bench/sandbox_incident.py --seconds 10

Results are printed and written to bench/out/sandbox_incident.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.sandbox import start_sandbox  # noqa: E402


def walk(url: str, key: str, limit: int) -> tuple[int, int, float]:
    """(sessions, pages, seconds) for one full cursor walk."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        started = time.perf_counter()
        cursor: str | None = None
        sessions = pages = 0
        while True:
            params = {"admission_state": "recovery_required", "limit": str(limit)}
            if cursor:
                params["cursor"] = cursor
            page = client.get("/v1/sessions", params=params).json()
            sessions += len(page["sessions"])
            pages += 1
            cursor = page["next"]
            if cursor is None:
                return sessions, pages, time.perf_counter() - started


def listing(counts: list[int]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for count in counts:
        with start_sandbox(scenarios=None) as sb:
            created = time.perf_counter()
            sb.admin.incident(count)
            made = time.perf_counter() - created
            for limit in (50, 1000):
                sessions, pages, seconds = walk(sb.url, sb.api_key, limit)
                rows.append(
                    {
                        "incident": count,
                        "create_s": round(made, 2),
                        "limit": limit,
                        "pages": pages,
                        "sessions": sessions,
                        "walk_ms": round(seconds * 1000, 1),
                        "ms_per_page": round(seconds * 1000 / pages, 2),
                    }
                )
    return rows


def traffic(clients: int, seconds: float, latency: float, rate: float) -> dict[str, object]:
    with start_sandbox(scenarios=["healthy"], latency=latency, rate_limit=rate) as sb:
        ok = limited = 0
        took: list[float] = []
        lock = threading.Lock()
        stop = time.monotonic() + seconds

        def run() -> None:
            nonlocal ok, limited
            with httpx.Client(base_url=sb.url, headers={"Authorization": f"Bearer {sb.api_key}"}) as client:
                while time.monotonic() < stop:
                    started = time.perf_counter()
                    response = client.get("/v1/sessions/ses_healthy")
                    status = response.status_code
                    elapsed = time.perf_counter() - started
                    with lock:
                        took.append(elapsed)
                        if status == 200:
                            ok += 1
                        elif status == 429:
                            limited += 1
                    if status == 429:  # a well-behaved client waits what the host says
                        time.sleep(int(response.headers.get("RateLimit-Reset-Ms", "10")) / 1000)

        threads = [threading.Thread(target=run) for _ in range(clients)]
        begun = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - begun
        return {
            "clients": clients,
            "latency_ms": latency * 1000,
            "rate_limit": rate,
            "seconds": round(wall, 2),
            "accepted": ok,
            "accepted_per_s": round(ok / wall, 1),
            "limited_429": limited,
            "p50_ms": round(statistics.median(took) * 1000, 1),
            "p99_ms": round(sorted(took)[int(len(took) * 0.99) - 1] * 1000, 1),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1000,5000")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    rows = listing([int(c) for c in args.counts.split(",")])
    print(f"{'incident':>8} {'create s':>8} {'limit':>5} {'pages':>5} {'sessions':>8} {'walk ms':>8} {'ms/page':>7}")
    for r in rows:
        print(
            f"{r['incident']:>8} {r['create_s']:>8} {r['limit']:>5} {r['pages']:>5} {r['sessions']:>8} "
            f"{r['walk_ms']:>8} {r['ms_per_page']:>7}"
        )
    shaped = traffic(args.clients, args.seconds, 0.02, 100.0)
    print("traffic (20 ms latency, 100 requests/s per client):", json.dumps(shaped))
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "sandbox_incident.json").write_text(json.dumps({"listing": rows, "traffic": shaped}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
