"""Watch mode against the sandbox (20 ms per call) and the Slack Web API stand-in: the issue's figures.

Parts (``--parts``, all by default):
- ``latency``: ``--stops`` (50) sessions stop one by one at random moments while one watcher polls
  every ``--interval`` seconds (scaled down from the runbook's 30 s so the run is short). Each stop's
  latency is the time from the sandbox's stop to Slack receiving its post. It splits into the wait for
  the next poll and the poll's own work (listing, diagnose, post), both measured; the default-interval
  figure keeps each stop's measured work and its measured phase within the interval, scaled to 30 s
  (a stop waits the same fraction of a 30 s interval), so nothing is assumed but the interval.
- ``burst``: ``--burst`` (1,000) sessions stop at once (the sandbox's scheduled burst); channel posts.
- ``kill``: ``--kill-stops`` (500) stops with two watcher processes on one store, one SIGKILLed mid-way
  and replaced; duplicates and missed stops in the channel.
- ``pages``: 5 % of listing pages failing (a seeded sandbox fault), ``--page-stops`` (200) stops over
  pages of 10; missed and duplicated.
- ``quiet``: 50 stops during quiet hours (manual clock); digests at the window's end.
- ``handoff``: two shift changes, a restart between them (manual clock); hand-off posts per change.

    PYTHONPATH=. .venv/bin/python bench/watch.py --interval 1
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.app.compose import FrontPorts
from bot.clock import ManualClock, SystemClock
from bot.sandbox import AdjustableClock, SandboxHandle, start_sandbox
from bot.settings import load_settings
from bot.slack import make_client
from bot.slack.watching import SlackChannelMembers, SlackWatchPoster
from bot.slack.web import SlackOut
from bot.store import Store
from bot.watch import Watcher, WatchStore
from bot.watch import migrations as watch_migrations
from tests.fixtures.composing import composed
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackStandIn, slack_settings
from tests.fixtures.triage import clone
from tests.fixtures.watch import runbook_copy, start_watcher_process

REPO = Path(__file__).resolve().parents[1]
CHANNEL = "C0WATCH"
DEFAULT_INTERVAL = 30.0
OUT = REPO / "bench" / "out"


def runbooks(tmp: Path, *edits: tuple[str, str]) -> Path:
    """A copy of the packaged runbooks with edits to session-recovery.yaml (a new folder each time)."""
    return runbook_copy(tmp / f"runbooks-{len(list(tmp.glob('runbooks-*')))}", *edits)


NO_STORM = ("storm_threshold: {count: 10,", "storm_threshold: {count: 100000,")


def watcher(sbx: SandboxHandle, api: SlackStandIn, db: Path, rb: Path, **overrides: Any) -> Watcher:
    settings = load_settings({}, dotenv=None).model_copy(
        update={"db_path": db, "watch_channel": CHANNEL, "runbooks_dir": rb, **overrides}
    )
    out = SlackOut(make_client(slack_settings(api, db)))
    ports = FrontPorts(
        watch_poster=lambda installation, named: SlackWatchPoster(out), members=SlackChannelMembers(out.client)
    )
    return composed(settings, sandbox=sbx, ports=ports, startup=False).watchers["default"]


def healthy(sbx: SandboxHandle, prefix: str, n: int) -> list[str]:
    ids = [f"{prefix}_{i:04d}" for i in range(n)]
    for sid in ids:
        sbx.admin.create_session(clone("healthy", sid))
    return ids


def per_session(api: SlackStandIn, ids: list[str]) -> tuple[int, int]:
    """(duplicated, missed) case posts in the channel."""
    roots = [p.text for p in api.roots(CHANNEL)]
    counts = {sid: sum(f"Stopped: {sid} " in t for t in roots) for sid in ids}
    return sum(1 for n in counts.values() if n > 1), sum(1 for n in counts.values() if n == 0)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


# -- parts ------------------------------------------------------------------------------------------


def part_latency(tmp: Path, stops: int, interval: float, latency: float) -> dict[str, Any]:
    api = SlackStandIn()
    with start_sandbox(scenarios=None, clock=AdjustableClock(SystemClock()), latency=latency) as sbx:
        ids = healthy(sbx, "ses_lat", stops)
        w = watcher(sbx, api, tmp / "lat.db", runbooks(tmp, NO_STORM), watch_interval=interval)
        starts: list[float] = []
        done = threading.Event()

        def loop() -> None:
            while not done.is_set():
                starts.append(time.monotonic())
                w.poll_once()
                done.wait(max(0.0, interval - (time.monotonic() - starts[-1])))

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        stopped: dict[str, float] = {}
        rng = random.Random(5)
        for sid in ids:
            time.sleep(rng.uniform(0.2, 1.6) * interval)
            stopped[sid] = time.monotonic()
            sbx.admin.stop(sid)
        deadline = time.monotonic() + 20 * interval + 30
        while per_session(api, ids)[1] and time.monotonic() < deadline:
            time.sleep(0.1)
        done.set()
        thread.join(30)
    posted = {}
    for call in api.calls_to("chat.postMessage"):
        text = str(call.params.get("text", ""))
        for sid in ids:
            if f"Stopped: {sid} " in text and sid not in posted:
                posted[sid] = call.at
    api.stop()
    measured, work, phase = [], [], []
    for sid in ids:
        t0, tp = stopped[sid], posted[sid]
        poll = max(s for s in starts if s <= tp)
        measured.append(tp - t0)
        work.append(tp - poll)
        phase.append(min(1.0, max(0.0, (poll - t0) / interval)))
    default = [p * DEFAULT_INTERVAL + wk for p, wk in zip(phase, work, strict=True)]
    return {
        "stops": stops,
        "interval_s": interval,
        "missed": stops - len(posted),
        "scaled_p50_s": statistics.median(measured),
        "scaled_p95_s": pct(measured, 0.95),
        "work_p95_s": pct(work, 0.95),
        "work_max_s": max(work),
        "default_interval_p95_s": pct(default, 0.95),
        "default_interval_max_s": max(default),
        "default_interval_bound_s": DEFAULT_INTERVAL + max(work),
    }


def part_burst(tmp: Path, n: int, latency: float) -> dict[str, Any]:
    api = SlackStandIn()
    with start_sandbox(scenarios=None, clock=AdjustableClock(SystemClock()), latency=latency) as sbx:
        rb = runbooks(tmp)
        a, b = watcher(sbx, api, tmp / "burst.db", rb), watcher(sbx, api, tmp / "burst.db", rb)
        sbx.admin.schedule({"burst": n, "at": 1, "prefix": "ses_bst"})
        a.poll_once()
        time.sleep(1.1)
        t = time.monotonic()
        a.poll_once()
        took = time.monotonic() - t
        b.poll_once()
        a.poll_once()
        counts = a.saved.counts()
    roots = api.roots(CHANNEL)
    api.stop()
    return {
        "sessions": n,
        "channel_posts": len(roots),
        "storm_updates": sum(p.updates for p in roots),
        "counts": counts,
        "first_poll_s": round(took, 2),
    }


def part_kill(tmp: Path, n: int, latency: float) -> dict[str, Any]:
    api = SlackStandIn()
    api.slow("chat.postMessage", 0.05)  # the kill lands between Slack doing a post and the bot hearing it
    rb = runbooks(tmp, NO_STORM, ("claim_lease: {duration: 2m,", "claim_lease: {duration: 3s,"))
    db = tmp / "kill.db"
    with start_sandbox(scenarios=None, clock=AdjustableClock(SystemClock()), latency=latency) as sbx:
        ids = healthy(sbx, "ses_kil", n)
        config = {
            "control_host_url": sbx.url,
            "control_host_api_key": sbx.api_key,
            "db_path": str(db),
            "slack_bot_token": BOT_TOKEN,
            "slack_signing_secret": SIGNING_SECRET,
            "slack_api_url": api.base_url,
            "watch_channel": CHANNEL,
            "watch_interval": 0.2,
            "runbooks_dir": str(rb),
        }
        a, b = start_watcher_process(config), start_watcher_process(config)
        c = None
        saved = WatchStore(Store(db, migrations=[watch_migrations]), "default")
        t = time.monotonic()
        try:
            for i, sid in enumerate(ids):
                sbx.admin.stop(sid)
                time.sleep(0.01)
                if i == n // 2:
                    a.send_signal(signal.SIGKILL)
                    a.wait(10)
                    c = start_watcher_process(config)
            deadline, settled = time.monotonic() + 600, 0
            while time.monotonic() < deadline and settled < 10:
                settled = settled + 1 if saved.counts().get("posted", 0) >= n else 0
                time.sleep(0.2)
            took = time.monotonic() - t
        finally:
            for proc in (a, b, c):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
        taken = sum(1 for s in saved.store.steps() if s.step == "watch_stop" and s.outcome == "taken_over")
    dup, missed = per_session(api, ids)
    api.stop()
    return {"stops": n, "duplicates": dup, "missed": missed, "taken_over": taken, "seconds": round(took, 1)}


def part_pages(tmp: Path, n: int, latency: float) -> dict[str, Any]:
    api = SlackStandIn()
    rb = runbooks(tmp, NO_STORM, ("bulk_page_size: {count: 500,", "bulk_page_size: {count: 10,"))
    with start_sandbox(scenarios=None, clock=AdjustableClock(SystemClock()), latency=latency) as sbx:
        ids = healthy(sbx, "ses_pag", n)
        w = watcher(sbx, api, tmp / "pages.db", rb)
        fault = sbx.admin.fault("server_error", "/v1/sessions", method="GET", times=None, probability=0.05, seed=3)
        polls = incomplete = 0
        for start in range(0, n, 20):
            for sid in ids[start : start + 20]:
                sbx.admin.stop(sid)
            polls += 1
            incomplete += not w.poll_once().complete
        while per_session(api, ids)[1] and polls < n:
            polls += 1
            incomplete += not w.poll_once().complete
        hits = next(f["hits"] for f in sbx.admin.faults() if f["id"] == fault["id"])
        pages = sum(1 for r in sbx.admin.requests() if r.get("path") == "/v1/sessions")
    dup, missed = per_session(api, ids)
    api.stop()
    return {
        "stops": n,
        "polls": polls,
        "incomplete_polls": incomplete,
        "listing_requests": pages,
        "failed_requests": hits,
        "duplicates": dup,
        "missed": missed,
    }


def _manual(
    tmp: Path, name: str, rb: Path, polls: Callable[[SandboxHandle, Callable[[], Watcher]], None], api: SlackStandIn
) -> None:
    clock = ManualClock()  # 10:00 UTC, 11:00 in Berlin
    with start_sandbox(scenarios=None, clock=clock, latency=0.02) as sbx:
        polls(sbx, lambda: watcher(sbx, api, tmp / f"{name}.db", rb))


def part_quiet(tmp: Path) -> dict[str, Any]:
    api = SlackStandIn()
    rb = runbooks(
        tmp,
        (
            '  # quiet_hours: {start: "23:00", end: "07:00", time_zone: Europe/Berlin}',
            '  quiet_hours: {start: "11:00", end: "11:30", time_zone: Europe/Berlin}',
        ),
    )
    during: list[int] = []

    def run(sbx: SandboxHandle, make: Callable[[], Watcher]) -> None:
        a, b = make(), make()
        for i, sid in enumerate(healthy(sbx, "ses_qui", 50)):
            sbx.admin.stop(sid)
            if i % 5 == 4:
                sbx.clock.advance(30)  # type: ignore[attr-defined]
                (a if i % 10 else b).poll_once()
        during.append(len(api.roots(CHANNEL)))
        sbx.clock.advance(30 * 60)  # type: ignore[attr-defined]
        for w in (b, a, b):
            w.poll_once()

    _manual(tmp, "quiet", rb, run, api)
    roots = [p.text for p in api.roots(CHANNEL)]
    api.stop()
    digests = [t for t in roots if "Quiet hours are over" in t]
    return {
        "stops": 50,
        "posts_during": during[0],
        "digests": len(digests),
        "digest_says_50": bool(digests) and "50 session(s) stopped meanwhile" in digests[0],
        "posts": len(roots),
    }


def part_handoff(tmp: Path) -> dict[str, Any]:
    api = SlackStandIn()
    rb = runbooks(
        tmp,
        (
            '# handoff: {times: ["07:00", "19:00"], time_zone: Europe/Berlin}',
            'handoff: {times: ["11:00", "11:30"], time_zone: Europe/Berlin}',
        ),
    )

    def run(sbx: SandboxHandle, make: Callable[[], Watcher]) -> None:
        sid = healthy(sbx, "ses_hof", 1)[0]
        sbx.admin.stop(sid)
        a, b = make(), make()
        a.poll_once()
        b.poll_once()
        a.stop()
        sbx.clock.advance(600)  # type: ignore[attr-defined]
        restarted = make()  # a restart at 11:10
        restarted.poll_once()
        sbx.clock.advance(20 * 60)  # type: ignore[attr-defined]
        for w in (b, restarted, b):
            w.poll_once()

    _manual(tmp, "handoff", rb, run, api)
    roots = [p.text for p in api.roots(CHANNEL) if "Shift change" in p.text]
    api.stop()
    return {
        "changes": 2,
        "handoff_posts": len(roots),
        "per_change": {c: sum(c in t for t in roots) for c in ("11:00", "11:30")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="latency,burst,kill,pages,quiet,handoff")
    ap.add_argument("--interval", type=float, default=1.0, help="poll interval of the latency part (s)")
    ap.add_argument("--stops", type=int, default=50)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--kill-stops", type=int, default=500)
    ap.add_argument("--page-stops", type=int, default=200)
    ap.add_argument("--latency", type=float, default=0.02, help="seconds added to every control-host call")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="recover-watch-bench-"))
    results: dict[str, Any] = {}
    for part in args.parts.split(","):
        t = time.monotonic()
        if part == "latency":
            results[part] = part_latency(tmp, args.stops, args.interval, args.latency)
        elif part == "burst":
            results[part] = part_burst(tmp, args.burst, args.latency)
        elif part == "kill":
            results[part] = part_kill(tmp, args.kill_stops, args.latency)
        elif part == "pages":
            results[part] = part_pages(tmp, args.page_stops, args.latency)
        elif part == "quiet":
            results[part] = part_quiet(tmp)
        elif part == "handoff":
            results[part] = part_handoff(tmp)
        else:
            raise SystemExit(f"unknown part {part!r}")
        print(f"{part} ({time.monotonic() - t:.1f} s): {json.dumps(results[part], default=str)}", flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "watch.json").write_text(json.dumps(results, indent=2, default=str))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
