"""Acks while hostile clients hold the HTTP front: idle connections, slow heads and stalled bodies.

The real ``recover-bot serve`` (HTTP), the sandbox and the Slack stand-in run as bench/ack_latency.py
starts them (its helpers are used here). ``help`` commands are acked in rounds of C concurrent signed
requests, first with nothing else open ("quiet"), then while this process holds open:

- ``--idle`` connections that never send a byte (a half-open flood);
- ``--slow-heads`` connections sending their request head one byte every 0.5 s (slowloris);
- ``--stalled-bodies`` signed-looking requests (a current timestamp, a well-formed signature) whose
  head is complete and whose body stops after 10 bytes: each holds a request thread until the body
  deadline.

The floods are opened just before the rounds (the server closes a head that is not complete in 10 s,
by design), and the rounds take a few seconds.

    python bench/hostile_ack.py [--idle 1100] [--slow-heads 64] [--stalled-bodies 64] [--rounds 5] [--concurrency 20]

Target: under the floods, ack p99 < 300 ms (the ack target), every command answered 200. Exit 0 when
met and the teardown was clean. Results: bench/out/hostile_ack.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import secrets
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ack_latency as ack  # noqa: E402  (bench/ack_latency.py: the children and the load generator)

from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackSender  # noqa: E402


class Floods:
    """The hostile connections, held by this process until :meth:`close`."""

    def __init__(self, url: str, idle: int, slow_heads: int, stalled_bodies: int) -> None:
        parsed = urllib.parse.urlparse(url)
        self.address = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.idle = [self._connect() for _ in range(idle)]
        self.slow = [self._connect() for _ in range(slow_heads)]
        self.stalled = [self._connect() for _ in range(stalled_bodies)]
        ts = int(time.time())
        for sock in self.stalled:
            sock.sendall(
                f"POST /slack/events HTTP/1.1\r\nHost: bot\r\nX-Slack-Request-Timestamp: {ts}\r\n"
                f"X-Slack-Signature: v0={'0' * 64}\r\nContent-Length: 1000\r\n\r\n{'x' * 10}".encode()
            )
        self._head = b"POST /slack/events HTTP/1.1\r\nHost: bot\r\nX-Pad: " + b"p" * 4000
        self._stop = threading.Event()
        self._dribbler = threading.Thread(target=self._dribble, daemon=True)
        self._dribbler.start()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _dribble(self) -> None:
        for i in range(len(self._head)):
            if self._stop.wait(0.5):
                return
            for sock in self.slow:
                with contextlib.suppress(OSError):
                    sock.send(self._head[i : i + 1])

    def close(self) -> None:
        self._stop.set()
        self._dribbler.join(5)
        for sock in [*self.idle, *self.slow, *self.stalled]:
            sock.close()


def rounds(url: str, slack_api_url: str, count: int, concurrency: int) -> list[float]:
    address = ack.StandInAddress(slack_api_url)
    senders = [SlackSender(url, stand_in=address) for _ in range(concurrency)]  # type: ignore[arg-type]
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            ack.one_round("help", concurrency, pool, senders)  # warm-up: connections
            return [x for _ in range(count) for x in ack.one_round("help", concurrency, pool, senders)]
    finally:
        for sender in senders:
            sender.close()


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 1),
        "p99_ms": round(ack.pct(values, 99), 1),
        "max_ms": round(max(values), 1),
    }


def run(args: argparse.Namespace) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.idle + args.slow_heads + args.stalled_bodies + 512
    if soft < want:  # this process holds the floods; serve (a child) inherits the same limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    console = Path(sys.executable).parent / "recover-bot"
    script = Path(ack.__file__).resolve()
    tmp = tempfile.TemporaryDirectory(prefix="recover-hostile-")
    work = Path(tmp.name)
    children: list[tuple[ack.Child, str, float]] = []
    serve: ack.Child | None = None
    floods: Floods | None = None
    load_start = os.getloadavg()
    try:
        slack = ack.Child(
            "slack-stand-in", [sys.executable, str(script), "--serve-slack"], logs=work, stdin=True, world=True
        )
        children.append((slack, "stdin", 10))
        api_key = secrets.token_urlsafe(16)
        sandbox = ack.Child(
            "sandbox",
            [str(console), "sandbox", "--port", "0", "--api-key", api_key],
            logs=work,
            env=ack.user_env(RECOVER_LOG_LEVEL="ERROR"),
            cwd=work,
            world=True,
        )
        children.append((sandbox, "SIGINT", 15))
        env = ack.user_env(
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.url,
            CONTROL_HOST_URL=sandbox.url,
            CONTROL_HOST_API_KEY=api_key,
            RECOVER_DB=str(work / "bench.db"),
            HOST="127.0.0.1",
            PORT="0",
            RECOVER_LOG_LEVEL="ERROR",
        )
        serve = ack.Child("recover-bot-serve", [str(console), "serve"], logs=work, env=env, cwd=work)
        children.append((serve, "SIGTERM", 60))
        ack.wait_healthy(serve.url, serve)
        events = serve.url + "/slack/events"
        quiet = rounds(events, slack.url, args.rounds, args.concurrency)
        opened = time.monotonic()
        floods = Floods(serve.url, args.idle, args.slow_heads, args.stalled_bodies)
        held = time.monotonic() - opened
        hostile = rounds(events, slack.url, args.rounds, args.concurrency)
        within = time.monotonic() - opened
    finally:
        if floods is not None:
            floods.close()
        codes = {child.name: child.stop(how, grace) for child, how, grace in reversed(children)}
        stderr = serve.stderr_text() if serve is not None else ""
        tmp.cleanup()
    clean = "Traceback" not in stderr and all(code == 0 for code in codes.values())
    result = {
        "floods": {
            "idle": args.idle,
            "slow_heads": args.slow_heads,
            "stalled_bodies": args.stalled_bodies,
            "opened_in_s": round(held, 2),
            "rounds_done_within_s": round(within, 2),
        },
        "quiet": summary(quiet),
        "hostile": summary(hostile),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "cpus": os.cpu_count(),
    }
    met = result["hostile"]["p99_ms"] < 300
    result["targets_met"], result["teardown_clean"] = met, clean
    print(f"{'phase':<8} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for phase in ("quiet", "hostile"):
        row = result[phase]
        print(f"{phase:<8} {row['n']:>5} {row['p50_ms']:>8} {row['p99_ms']:>8} {row['max_ms']:>8}")
    print(
        f"floods: {args.idle} idle, {args.slow_heads} slow heads, {args.stalled_bodies} stalled bodies, opened in "
        f"{held:.2f} s, the rounds done {within:.2f} s after; load average {load_start[0]:.1f} → "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; p99 < 300 ms: {met}; teardown clean: {clean}"
    )
    out = ack.ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "hostile_ack.json").write_text(json.dumps(result, indent=2))
    return 0 if met and clean else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=1100)
    parser.add_argument("--slow-heads", type=int, default=64)
    parser.add_argument("--stalled-bodies", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=20)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
