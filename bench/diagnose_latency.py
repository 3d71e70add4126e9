"""diagnose latency against the sandbox control host over HTTP (127.0.0.1).

Each run is the whole ``/recover diagnose`` command: four API reads in parallel (session, turns + turn
detail, events), the worker-log scan through FileLogSource, the runbook evaluation, the step written to
SQLite (WAL, synchronous=FULL) and the rendered message. Runs cycle through every builtin scenario, so
every branch of the runbook is measured. Usage::

    python bench/diagnose_latency.py                # 200 runs
    python bench/diagnose_latency.py --runs 50 --noise-mb 20

``--noise-mb`` adds other sessions' lines to the log file (the scan then has to skip them).
Results are printed and written to bench/out/diagnose_latency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.app.services import MIGRATIONS  # noqa: E402
from bot.clock import ManualClock  # noqa: E402
from bot.controlhost import ControlHostClient, RetryPolicy  # noqa: E402
from bot.diagnosis import Diagnoser, ReconcilerStatus  # noqa: E402
from bot.logs import FileLogSource  # noqa: E402
from bot.runbook import load_runbooks  # noqa: E402
from bot.sandbox import start_sandbox  # noqa: E402
from bot.store import Store  # noqa: E402


class _Reconciler:
    def read_status(self) -> ReconcilerStatus:
        return ReconcilerStatus(last_pass="completed", last_pass_at="2026-11-29T09:59:00Z", raw={})


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--noise-mb", type=float, default=0.0, help="other sessions' log lines to add")
    args = parser.parse_args()

    clock = ManualClock()
    sandbox = start_sandbox(scenarios="builtin", clock=clock)
    with tempfile.TemporaryDirectory(prefix="recover-bot-bench-") as tmp:
        folder = Path(tmp)
        log = folder / "worker.log"
        with log.open("w", encoding="utf-8") as fh:
            for scenario in sandbox.scenarios.values():
                for line in sandbox.admin.worker_logs(scenario.session_id):
                    fh.write(line["text"] + "\n")
            if args.noise_mb > 0:
                filler = (
                    '{"ts":"2026-11-29T09:59:59.000Z","level":"info","event":"worker.turn.progress",'
                    '"session_id":"ses_noise_%06d","turn_id":"turn_n","tokens":1234}\n'
                )
                written, i = 0, 0
                while written < args.noise_mb * 1_000_000:
                    text = filler % (i % 5000)
                    fh.write(text)
                    written += len(text)
                    i += 1
        store = Store(folder / "recover.db", clock, migrations=MIGRATIONS)
        client = ControlHostClient(
            sandbox.url, sandbox.api_key, store=store, clock=clock, retry=RetryPolicy(attempts=1)
        )
        diagnoser = Diagnoser(
            client=client,
            runbooks=load_runbooks(ROOT / "runbooks"),
            store=store,
            log_source=FileLogSource(str(log)),
            reconciler_status=_Reconciler(),
            clock=clock,
        )
        sessions = [s.session_id for s in sandbox.scenarios.values()]
        for sid in sessions:  # warm-up: connections, imports, first SQLite write
            diagnoser.diagnose(sid, "U_BENCH")
        timings: list[float] = []
        branches: dict[str, int] = {}
        for i in range(args.runs):
            sid = sessions[i % len(sessions)]
            started = time.perf_counter()
            diagnoser.diagnose(sid, "U_BENCH")
            timings.append((time.perf_counter() - started) * 1000)
        for sid in sessions:
            branch = diagnoser.gather(sid).evaluation.branch_id
            branches[branch] = branches.get(branch, 0) + 1
        log_bytes = log.stat().st_size
        client.close()
    sandbox.stop()

    result = {
        "runs": args.runs,
        "scenarios": len(sessions),
        "branches": branches,
        "log_bytes": log_bytes,
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(_percentile(timings, 95), 1),
        "p99_ms": round(_percentile(timings, 99), 1),
        "max_ms": round(max(timings), 1),
        "mean_ms": round(statistics.fmean(timings), 1),
        "budget_ms": 10000,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    print(f"diagnose latency over {args.runs} runs ({len(sessions)} scenarios, log {log_bytes:,} bytes)")
    print("| p50 ms | p95 ms | p99 ms | max ms | mean ms |")
    print("|-------:|-------:|-------:|-------:|--------:|")
    print(
        f"| {result['p50_ms']} | {result['p95_ms']} | {result['p99_ms']} | {result['max_ms']} | {result['mean_ms']} |"
    )
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "diagnose_latency.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
