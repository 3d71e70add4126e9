"""Isolation of installations: one installation's control host answering 503 (or 429) for a while leaves
another's triage of ~1,000 sessions within 1.2× its solo time (separate clients, pacing and pools).

us-1 is the sandbox in mass-incident mode (20 ms per call, 100 requests/s per key, as
bench_triage_batch.py); eu-1 is a stand-in that answers every call 503 (or 429 with Retry-After),
hammered the whole time by eu-1 diagnoses and triages from the same bot. Prints the solo and the
outage figures (best of ``--runs``), the ratio, and what eu-1's host received.

    PYTHONPATH=. .venv/bin/python bench/installations_isolation.py --sessions 1000 --outage 60

``--mode hang``: eu-1's host accepts every connection and never answers, for ``--outage`` seconds,
and everything goes over the real serve path: `recover-bot serve` with an installations file (its
worker process claiming from the inbox), signed Slack HTTP in, the Slack stand-in out. us-1's
``diagnose`` (``--diagnoses`` of them, one after another: p95) and its triage are timed from the
signed post to the answer posted in us-1's channel, alone and then while eu-1 commands keep arriving
(two a second, far more than eu-1's slots), in the same run.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bot.app.compose import FrontPorts, compose
from bot.installations import InstallationSpec
from bot.messages import ListReporter
from bot.sandbox import start_sandbox
from bot.settings import load_settings
from tests.fixtures.slack import SlackSender, SlackStandIn
from tests.installations.standin import TroubledHost, installations_env, installations_file
from tests.slack.test_worker_process import _served

TARGET = 1.2
COMPLETE = re.compile(r"\[us-1\] Triage (t\d+): .* · complete · ")


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
    ap.add_argument("--mode", choices=("503", "429", "hang"), default="503")
    ap.add_argument("--diagnoses", type=int, default=40, help="--mode hang: us-1 diagnoses timed in each phase")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--rate", type=float, default=100.0)
    args = ap.parse_args()
    size = round(args.sessions / 0.82)  # 18 % of an incident waits in backoff: not listed
    if args.mode == "hang":
        hang_over_serve(args, size)
        return
    troubled = TroubledHost(args.mode)
    with start_sandbox(scenarios=None, incident=size, latency=args.latency, rate_limit=args.rate) as sbx:
        settings = load_settings({}, dotenv=None).model_copy(update={"db_path": Path(tempfile.mkdtemp()) / "r.db"})
        specs = [
            InstallationSpec(
                name="eu-1", control_host_url=troubled.url, api_key=SecretStr("k-eu"), channels=("C0EU1",)
            ),
            InstallationSpec(
                name="us-1", control_host_url=sbx.url, api_key=SecretStr(sbx.api_key), channels=("C0US1",)
            ),
        ]
        router = compose(settings, specs, ports=FrontPorts(), startup=False).router
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
    print(
        f"eu-1 answering {args.mode} for {time.monotonic() - started:.0f} s: us-1 triage {outage:.2f} s "
        f"(best of {len(during)}; all: {', '.join(f'{d:.2f}' for d in during)})"
    )
    print(
        f"eu-1: {counts[0]} commands run against it, its host answered {troubled.calls} calls, {troubled.posts} POSTs"
    )
    print(f"ratio {ratio:.2f}× (target ≤ {TARGET}×): {'PASS' if ratio <= TARGET else 'FAIL'}")


class Served:
    """`recover-bot serve` over two installations, and the us-1 answers it posts, counted."""

    def __init__(self, api: SlackStandIn, sender: SlackSender) -> None:
        self.api, self.sender = api, sender

    def posted(self, marker: str) -> int:
        """Messages posted in us-1's channel holding ``marker`` (posts only: a repeated answer may be
        an edit of the last one, and a diagnosis is edited once more when its logs are read)."""
        return sum(
            1
            for c in list(self.api.calls)
            if c.method == "chat.postMessage"
            and c.params.get("channel") == "C0US1"
            and marker in str(c.params.get("text"))
        )

    def triaged(self) -> int:
        """us-1 triages complete (their live message is edited until it says so)."""
        done = {
            m.group(1)
            for c in list(self.api.calls)
            if c.method in ("chat.postMessage", "chat.update")
            and c.params.get("channel") == "C0US1"
            and (m := COMPLETE.search(str(c.params.get("text")))) is not None
        }
        return len(done)

    def say(self, line: str, channel: str) -> None:
        r = self.sender.post(
            self.sender.command_body(line, channel=channel), content_type="application/x-www-form-urlencoded"
        )
        assert r.status_code == 200, r.status_code

    def timed(self, line: str, count: Callable[[], int], timeout: float = 300.0) -> float:
        """Seconds from the signed post of a us-1 command to ``count`` (its answers so far) growing."""
        before = count()
        started = time.monotonic()
        self.say(line, "C0US1")
        while count() <= before:
            assert time.monotonic() - started < timeout, f"no answer to {line!r} within {timeout:.0f} s"
            time.sleep(0.01)
        return time.monotonic() - started


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def _phase(served: Served, args: argparse.Namespace, first: int) -> tuple[list[float], list[float]]:
    """us-1's diagnoses (each of its own session: a new case, a new post) one after another, then its triages."""
    sessions = [f"ses_inc_{i:05d}" for i in range(first, first + args.diagnoses)]
    diagnoses = [served.timed(f"diagnose {sid}", partial(served.posted, f"[us-1] {sid}:")) for sid in sessions]
    triages = [served.timed("triage", served.triaged) for _ in range(args.runs)]
    return diagnoses, triages


def hang_over_serve(args: argparse.Namespace, size: int) -> None:
    folder = Path(tempfile.mkdtemp())
    troubled = TroubledHost("hang", hang_seconds=args.outage)
    api = SlackStandIn()
    load = [os.getloadavg()[0]]
    with start_sandbox(scenarios=None, incident=size, latency=args.latency, rate_limit=args.rate) as sbx:
        path = installations_file(
            folder, {"eu-1": (troubled.url, "k-eu-0123456789", "C0EU1"), "us-1": (sbx.url, sbx.api_key, "C0US1")}
        )
        with _served(api, sbx, folder / "r.db", folder, env_update=installations_env(path)) as (_, _, sender):
            served = Served(api, sender)
            served.timed("diagnose ses_inc_09999", partial(served.posted, "[us-1] ses_inc_09999:"))  # warm-up
            solo_diag, solo_triage = _phase(served, args, 1)
            load.append(os.getloadavg()[0])
            stop, sent = threading.Event(), [0]

            def hammer() -> None:  # eu-1 commands, two a second: each held by the host to its deadline
                lines = ("diagnose ses_inc_00001", "triage")
                while not stop.wait(0.5):
                    served.say(lines[sent[0] % 2], "C0EU1")
                    sent[0] += 1

            thread = threading.Thread(target=hammer, daemon=True)
            started = time.monotonic()
            thread.start()
            time.sleep(5.0)  # eu-1's slots full and its queue growing before us-1 is timed
            hang_diag, hang_triage = _phase(served, args, 1 + args.diagnoses)
            while time.monotonic() - started < args.outage:
                hang_triage.append(served.timed("triage", served.triaged))
            held = time.monotonic() - started
            stop.set()
            thread.join(10)
            load.append(os.getloadavg()[0])
    troubled.stop()
    api.stop()
    d_ratio, t_ratio = _p95(hang_diag) / _p95(solo_diag), min(hang_triage) / min(solo_triage)
    print(
        f"over `recover-bot serve` (signed Slack HTTP, the worker process); load average "
        f"{', '.join(f'{x:.1f}' for x in load)} (start, after solo, end) on {os.cpu_count()} cores"
    )
    print(
        f"us-1 diagnose p95: solo {_p95(solo_diag):.3f} s, eu-1 hanging {_p95(hang_diag):.3f} s "
        f"({args.diagnoses} each; max {max(solo_diag):.3f} / {max(hang_diag):.3f} s): {d_ratio:.2f}×"
    )
    print(
        f"us-1 triage of {args.sessions}: solo {min(solo_triage):.2f} s (best of {len(solo_triage)}), "
        f"eu-1 hanging {min(hang_triage):.2f} s (best of {len(hang_triage)}; all: "
        f"{', '.join(f'{t:.2f}' for t in hang_triage)}): {t_ratio:.2f}×"
    )
    print(
        f"eu-1 hanging {held:.0f} s: {sent[0]} eu-1 commands sent, its host received {troubled.calls} calls, "
        f"{troubled.posts} POSTs"
    )
    ok = d_ratio <= TARGET and t_ratio <= TARGET
    print(f"target ≤ {TARGET}× for both: {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
