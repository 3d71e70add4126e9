"""Mass incident: triage of ~1,000 stuck sessions, and a batch retry_restore vs the single-session path.

Both against the sandbox with its traffic options: 20 ms latency on every public call and a rate limit
of 100 requests/s per API key (429 + Retry-After past it).
- Triage: the sandbox's mass-incident mode (mixed causes; the 18 % in backoff are not listed), sized so
  about ``--sessions`` sessions need an operator. Prints the time to the first summary and to the end.
- Batch: ``--sessions`` copies of the store-outage scenario, one group; S decisions sent one after
  another through the single-session path (``decide … --yes``) give the time per decision; then the
  batch (approved by a second person: it is above the threshold). Prints both, the ratio, and the
  floor the rate limit sets (N POSTs at the bot's own pace, bulk_rate).

    PYTHONPATH=. .venv/bin/python bench/bench_triage_batch.py --sessions 1000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.messages import ListReporter, Message
from bot.sandbox import start_sandbox
from bot.settings import load_settings
from tests.fixtures.composing import default_router
from tests.fixtures.triage import clone


class TimedReporter(ListReporter):
    def __init__(self) -> None:
        super().__init__()
        self.started = time.monotonic()
        self.first: float | None = None

    def progress(self, message: Message) -> None:
        if self.first is None:
            self.first = time.monotonic() - self.started
        super().progress(message)


def router_for(sbx: Any) -> Any:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": Path(tempfile.mkdtemp()) / "r.db"})
    return default_router(settings, sandbox=sbx)


def triage(n: int, latency: float, rate: float) -> None:
    size = round(n / 0.82)  # 18 % of an incident waits in backoff, admission open: not listed
    with start_sandbox(scenarios=None, incident=size, latency=latency, rate_limit=rate) as sbx:
        router = router_for(sbx)
        rep = TimedReporter()
        t = time.monotonic()
        reply = router.handle_text("/recover triage", actor="alice", channel=None, reporter=rep)
        took = time.monotonic() - t
        print(reply.messages[0].headline)
        print(
            f"triage: first summary {rep.first:.2f} s, complete {took:.2f} s, "
            f"429s {router.services.bulk.limiter.throttled}"
        )


def batch(n: int, sample: int, latency: float, rate: float) -> None:
    with start_sandbox(scenarios=None) as sbx:
        ids = [f"ses_b{i:05d}" for i in range(n + sample)]
        for sid in ids:
            sbx.admin.create_session(clone("restore_stopped_transient", sid))
        sbx.admin.traffic(latency_ms=latency * 1000, rate_limit=rate)
        router = router_for(sbx)
        t = time.monotonic()
        for sid in ids[n:]:
            reply = router.handle_text(
                f'/recover decide {sid} retry_restore --reason "bench" --yes',
                actor="alice",
                channel=None,
                reporter=ListReporter(),
            )
            assert reply.ok, reply.messages[0].plain_text()
        per = (time.monotonic() - t) / sample
        router.handle_text("/recover triage", actor="alice", channel=None, reporter=ListReporter())
        reply = router.handle_text(
            '/recover batch decide t1.g1 retry_restore --reason "bench"',
            actor="alice",
            channel=None,
            reporter=ListReporter(),
        )
        batch_id = reply.messages[0].ref
        t = time.monotonic()
        reply = router.handle_text(f"/recover approve {batch_id}", actor="bob", channel=None, reporter=ListReporter())
        took = time.monotonic() - t
        print(reply.messages[0].headline)
        pace = router.services.bulk.limiter.rate
        print(f"single-session path: {per * 1000:.0f} ms/decision → {per * n:.1f} s for {n}")
        print(
            f"batch: {took:.2f} s for {n} ({n / took:.0f}/s); speed-up {per * n / took:.1f}×; floor {n / pace:.1f} s "
            f"at the bot's {pace:.0f}/s, {n / rate:.1f} s at the limit's {rate:.0f}/s; "
            f"429s {router.services.bulk.limiter.throttled}; effects {len(sbx.admin.effects())}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--sample", type=int, default=30, help="single-session decisions measured")
    ap.add_argument("--only", choices=("triage", "batch"))
    args = ap.parse_args()
    print(f"sessions {args.sessions}, latency {args.latency * 1000:.0f} ms/call, rate limit {args.rate:.0f}/s")
    if args.only != "batch":
        triage(args.sessions, args.latency, args.rate)
    if args.only != "triage":
        batch(args.sessions, args.sample, args.latency, args.rate)


if __name__ == "__main__":
    main()
