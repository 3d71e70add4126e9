"""Mass incident: triage of N sessions and a batch retry_restore vs the single-session path.

Against the sandbox (no scenarios, N copies of the store-outage scenario) with a latency fault on
every public call. Prints: time to the first triage summary, triage complete, batch wall time,
the single-session path's time per decision (measured on a sample) and the ratio.

    PYTHONPATH=. .venv/bin/python bench/bench_triage_batch.py --sessions 1000 --latency 0.02
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bot.messages import ListReporter, Message
from bot.sandbox import start_sandbox
from bot.services import build_router
from bot.settings import load_settings
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--sample", type=int, default=50, help="single-session decisions measured")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    with start_sandbox(scenarios=None) as sbx:
        ids = [f"ses_b{i:05d}" for i in range(args.sessions + args.sample)]
        for sid in ids:
            sbx.admin.create_session(clone("restore_stopped_transient", sid))
        sbx.admin.fault("latency", path="/v1/*", seconds=args.latency, times=None)
        settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp / "recover.db"})
        router = build_router(settings, sandbox=sbx)
        # The single-session path on a sample, one after another.
        t = time.monotonic()
        for sid in ids[args.sessions:]:
            reply = router.handle_text(f'/recover decide {sid} retry_restore --reason "bench" --yes', actor="alice",
                                       channel=None, reporter=ListReporter())
            assert reply.ok, reply.messages[0].plain_text()
        per = (time.monotonic() - t) / args.sample
        rep = TimedReporter()
        t = time.monotonic()
        reply = router.handle_text("/recover triage", actor="alice", channel=None, reporter=rep)
        triage = time.monotonic() - t
        print(reply.messages[0].headline)
        group = router.services.bulk.batches.triages.group("t1.g1")
        t = time.monotonic()
        reply = router.handle_text(f'/recover batch decide {group.id} retry_restore --reason "bench" --yes',
                                   actor="alice", channel=None, reporter=ListReporter())
        batch = time.monotonic() - t
        print(reply.messages[0].headline)
        if reply.messages[0].kind == "batch_request":  # over the threshold: a second person approves
            t = time.monotonic()
            reply = router.handle_text(f"/recover approve {reply.messages[0].ref}", actor="bob", channel=None,
                                       reporter=ListReporter())
            batch = time.monotonic() - t
            print(reply.messages[0].headline)
        sent = router.services.bulk.client._http  # noqa: SLF001 - count only
        del sent
        n = args.sessions
        print(f"sessions {n}, latency {args.latency * 1000:.0f} ms/call")
        print(f"triage: first summary {rep.first:.2f} s, complete {triage:.2f} s")
        print(f"single-session path: {per * 1000:.0f} ms/decision → {per * n:.1f} s for {n}")
        print(f"batch: {batch:.2f} s for {n} ({n / batch:.0f}/s); speed-up {per * n / batch:.1f}×; "
              f"rate-limit floor {n / router.services.bulk.limiter.rate:.1f} s")
        print(f"effects: {len(sbx.admin.effects())}")


if __name__ == "__main__":
    main()
