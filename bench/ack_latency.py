"""Ack latency of `/recover` under load, against a bare Bolt app on the standard library's server.

Every server runs in a process of its own, so that neither app shares its interpreter (and its GIL)
with the load generator's client threads or with the other app:

- **recover-bot**: the real ``recover-bot serve`` as users run it — the installed console script of
  this interpreter's venv, started with only the settings a user would set (no SLACK_APP_TOKEN: HTTP),
  in a temporary directory. It runs its supervised worker process itself; the work behind each ack
  (diagnose, help) happens there, against the sandbox control host with a 10 s latency fault on
  every control-host call.
- **bare**: the plainest server a Bolt app can have — an app whose `/recover` listener only acks,
  dispatched from ``http.server.ThreadingHTTPServer`` (``--serve-bare``, this script run again).
- the sandbox control host (``recover-bot sandbox``; the fault is set through its admin API) and the
  Slack Web API stand-in (``--serve-slack``: tests/fixtures/slack.py's ``SlackStandIn``, where the
  worker posts its answers).
- the load generator, in this process: each round sends C signed commands at once (released by a
  barrier) to one app, then the same to the other; round i hits the bare app first when i is even and
  recover-bot first when it is odd, so neither is favoured by going first. Latency is from send to the
  HTTP answer (the ack). Two commands: ``diagnose`` (the background work waits 10 s on the control
  host) and ``help`` (no control host: what competes with the ack is the bot's own background work).

    python bench/ack_latency.py [--rounds 10] [--concurrency 20] [--db postgresql://…]

Targets: bot p99 ≤ 1.5 × bare p99, and bot p99 < 300 ms (exit 0 when both are met for both commands,
1 otherwise; 1 also when the teardown was not clean). Results: bench/out/ack_latency.json. Linux only
(the children are tied to the bench with ``PR_SET_PDEATHSIG``; leftovers are found through /proc).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import os
import queue
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackSender  # noqa: E402

WORLD_NICE = 10  # the Slack stand-in's and the sandbox's niceness (see _world_child)
COMMANDS = {"diagnose": "diagnose ses_restore_transient", "help": "help"}
APPS = ("bare", "recover-bot")
URL_LINE = re.compile(r"(http://127\.0\.0\.1:\d+\S*)")


# -- the servers run by this script in their own processes ---------------------------------------------


class BareStdlibServer:
    """A Bolt app served by ``ThreadingHTTPServer``: one thread per connection, dispatch inline."""

    def __init__(self, slack_api_url: str) -> None:
        from slack_bolt import Ack, App, BoltRequest
        from slack_sdk import WebClient

        app = App(
            client=WebClient(token="xoxb-bare", base_url=slack_api_url),
            signing_secret=SIGNING_SECRET,
            token_verification_enabled=False,
        )

        @app.command("/recover")
        def ack_only(ack: Ack) -> None:
            ack(text="received")

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The head and the body go out in two writes: with Nagle's algorithm on, the body waits for
            # the client's delayed ACK (~40 ms) now and then. The baseline gets its best: no stall.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
                return None

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode("utf-8")
                headers = {k.lower(): [v] for k, v in self.headers.items()}
                response = app.dispatch(BoltRequest(body=body, headers=headers))
                data = response.body.encode("utf-8")
                self.send_response(response.status)
                for key, values in response.headers.items():
                    for value in values:
                        if key.lower() != "content-length":
                            self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256  # 20 connections at once must not be reset

            def handle_error(self, request: object, client_address: object) -> None:
                return None  # a client closing its keep-alive connection at the end is not news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_until_stdin_closes(kind: str, slack_api_url: str | None) -> int:
    """Child mode: start one server, print its URL, serve until stdin closes (the bench ended or died)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the bench too, which stops us
    if kind == "bare":
        assert slack_api_url
        bare = BareStdlibServer(slack_api_url)
        print(bare.url, flush=True)
        stop = bare.stop
    else:
        from tests.fixtures.slack import SlackStandIn

        api = SlackStandIn()
        print(api.base_url, flush=True)
        stop = api.stop
    sys.stdin.read()  # EOF when the bench closes our stdin or exits in any way
    stop()
    return 0


# -- starting and stopping the children -------------------------------------------------------------


_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork


def _term_with_parent() -> None:
    """In the child before exec: SIGTERM when the bench dies, even by SIGKILL (nothing is orphaned)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _world_child() -> None:
    """The same, for a stand-in of the world (Slack, the control host): also at a lower priority.

    In production they run on other machines; here they share two cores with the apps under test,
    and the Slack stand-in in particular wakes for every answer the bot's worker posts, which the
    bare app never does. At nice 10 they take the CPU when the apps are not using it.
    """
    _term_with_parent()
    os.nice(WORLD_NICE)


class Child:
    """A server subprocess: its URL from the first stdout line naming one; stderr kept in a file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        logs: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        stdin: bool = False,
        world: bool = False,
    ) -> None:
        self.name = name
        self.stderr_path = logs / f"{name}.stderr"
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            cwd=cwd,
            preexec_fn=_world_child if world else _term_with_parent,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, args=(self.proc.stdout,), daemon=True).start()
        try:
            self.url = self._wait_url(timeout=60)
        except BaseException:
            self.stop("SIGTERM", 10)
            raise

    def _drain(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:  # read to the end, so a chatty child never blocks on a full pipe
            self._lines.put(line)
        self._lines.put(None)

    def _wait_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is not None and (m := URL_LINE.search(line)):
                return m.group(1)
            if line is None:
                raise RuntimeError(f"{self.name} printed no URL; stderr: {self.stderr_tail()}")

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stderr_tail(self, chars: int = 3000) -> str:
        return self.stderr_text()[-chars:]

    def stop(self, how: str, grace: float) -> int:
        """Stop by ``how`` ("stdin", "SIGTERM", "SIGINT"), wait ``grace`` s, then SIGKILL; the exit code."""
        if self.proc.poll() is None:
            if how == "stdin":
                assert self.proc.stdin is not None
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            else:
                self.proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                print(f"{self.name} did not stop within {grace:.0f} s of {how}: killed", file=sys.stderr)
                self.proc.kill()
                self.proc.wait(5)
        self._stderr.close()
        return self.proc.returncode


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (Linux: /proc/<pid>/task/*/children)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for c in children.read_text().split():
                    if int(c) not in found:
                        found.add(int(c))
                        todo.append(int(c))
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited but not yet reaped by its new parent, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def user_env(**settings: str) -> dict[str, str]:
    """This environment without any of recover-bot's settings, plus exactly ``settings``."""
    from bot.settings import environ_names

    names = set(environ_names())
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(settings)
    return env


def wait_healthy(url: str, child: Child, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return
        if child.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{child.name} never healthy; stderr: {child.stderr_tail()}")
        time.sleep(0.1)


# -- the load generator ------------------------------------------------------------------------------


class StandInAddress:
    """The remote stand-in's response URLs, for SlackSender (which only asks it for ``response_url``)."""

    def __init__(self, slack_api_url: str) -> None:
        self.root = slack_api_url.rstrip("/").removesuffix("/api")
        self._n = itertools.count(1)

    def response_url(self, name: str = "r") -> str:
        return f"{self.root}/response/{name}-{next(self._n)}"


def one_round(text: str, concurrency: int, pool: ThreadPoolExecutor, clients: list[SlackSender]) -> list[float]:
    barrier = threading.Barrier(concurrency)

    def one(i: int) -> float:
        sender = clients[i]
        body = sender.command_body(text, user=f"UBENCH{i}")
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


def measure(
    urls: dict[str, str], slack_api_url: str, rounds: int, concurrency: int
) -> dict[str, dict[str, list[list[float]]]]:
    """Per command and app, the latencies (ms) of each measured round."""
    address = StandInAddress(slack_api_url)
    senders = {
        name: [SlackSender(url, stand_in=address) for _ in range(concurrency)]  # type: ignore[arg-type]
        for name, url in urls.items()
    }
    results: dict[str, dict[str, list[list[float]]]] = {c: {name: [] for name in APPS} for c in COMMANDS}
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            for command, text in COMMANDS.items():
                for name in APPS:  # warm-up: connections, imports, first SQLite open
                    one_round(text, concurrency, pool, senders[name])
                for i in range(rounds):
                    order = APPS if i % 2 == 0 else APPS[::-1]  # neither app always goes first
                    for name in order:
                        results[command][name].append(one_round(text, concurrency, pool, senders[name]))
    finally:
        for group in senders.values():
            for sender in group:
                sender.close()
    return results


# -- the run -------------------------------------------------------------------------------------------


def run(rounds: int, concurrency: int, db: str | None = None) -> int:
    script = Path(__file__).resolve()
    console = Path(sys.executable).parent / "recover-bot"
    if not console.exists():
        print(f"no {console}: run this with the python of the venv recover-bot is installed in", file=sys.stderr)
        return 2
    tmp = tempfile.TemporaryDirectory(prefix="recover-bench-")
    work = Path(tmp.name)
    children: list[tuple[Child, str, float]] = []  # each with how to stop it, stopped in reverse order
    serve: Child | None = None
    worker_pids: set[int] = set()
    load_start = os.getloadavg()
    try:
        slack = Child(
            "slack-stand-in", [sys.executable, str(script), "--serve-slack"], logs=work, stdin=True, world=True
        )
        children.append((slack, "stdin", 10))
        api_key = secrets.token_urlsafe(16)
        sandbox = Child(
            "sandbox",
            [str(console), "sandbox", "--port", "0", "--api-key", api_key],
            logs=work,
            env=user_env(RECOVER_LOG_LEVEL="ERROR"),
            cwd=work,
            world=True,
        )
        children.append((sandbox, "SIGINT", 15))
        from bot.sandbox import SandboxAdmin

        admin = SandboxAdmin(sandbox.url)
        admin.fault("latency", "*", seconds=10, times=None)  # every control-host call takes 10 s
        admin.close()
        bare = Child("bare", [sys.executable, str(script), "--serve-bare", slack.url], logs=work, stdin=True)
        children.append((bare, "stdin", 10))
        env = user_env(
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.url,
            CONTROL_HOST_URL=sandbox.url,
            CONTROL_HOST_API_KEY=api_key,
            RECOVER_DB=db or str(work / "bench.db"),
            RECOVER_AUDIT_KEY="none",  # serve needs the choice said; the chain is not what is measured
            HOST="127.0.0.1",
            PORT="0",
            RECOVER_LOG_LEVEL="ERROR",
        )
        serve = Child("recover-bot-serve", [str(console), "serve"], logs=work, env=env, cwd=work)
        children.append((serve, "SIGTERM", 60))
        wait_healthy(serve.url, serve)
        worker_pids = descendants(serve.proc.pid)
        urls = {"bare": bare.url + "/slack/events", "recover-bot": serve.url + "/slack/events"}
        latencies = measure(urls, slack.url, rounds, concurrency)
    finally:
        if serve is not None:
            worker_pids |= descendants(serve.proc.pid)  # a worker restarted meanwhile counts too
        # serve first: SIGTERM stops its worker, which marks what is still queued (nothing to drain here).
        codes = {child.name: child.stop(how, grace) for child, how, grace in reversed(children)}
        tmp_stderr = serve.stderr_text() if serve is not None else ""
        tmp.cleanup()
    load_end = os.getloadavg()

    left = sorted(p for p in worker_pids | {c.proc.pid for c, _, _ in children} if alive(p))
    left_below = sorted(descendants(os.getpid()))
    clean = not left and not left_below and "Traceback" not in tmp_stderr
    if "Traceback" in tmp_stderr:
        print(f"recover-bot serve wrote a Traceback; its stderr ends:\n{tmp_stderr[-3000:]}", file=sys.stderr)
    if left or left_below:
        print(f"processes left behind: {left} {left_below}", file=sys.stderr)

    summary: dict[str, object] = {
        "method": "each server in its own process; round i: bare first if i even, recover-bot first if odd",
        "rounds": rounds,
        "concurrency": concurrency,
        "load_average": {"start": load_start, "end": load_end},
        "cpus": os.cpu_count(),
    }
    met = True
    print(f"{'command':<9} {'app':<12} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'med round max':>14}")
    for command, by_app in latencies.items():
        rows = {}
        for name, per_round in by_app.items():
            v = [x for r in per_round for x in r]
            rows[name] = {
                "n": len(v),
                "p50_ms": round(statistics.median(v), 1),
                "p99_ms": round(pct(v, 99), 1),
                "max_ms": round(max(v), 1),
                "median_round_max_ms": round(statistics.median(max(r) for r in per_round), 1),
            }
        bot = rows["recover-bot"]
        ratio = bot["p99_ms"] / max(rows["bare"]["p99_ms"], 0.001)
        ok = ratio <= 1.5 and bot["p99_ms"] < 300
        met = met and ok
        summary[command] = {**rows, "p99_ratio": round(ratio, 2), "targets_met": ok}
        for name, row in rows.items():
            print(
                f"{command:<9} {name:<12} {row['n']:>5} {row['p50_ms']:>8} {row['p99_ms']:>8} "
                f"{row['max_ms']:>8} {row['median_round_max_ms']:>14}"
            )
        print(
            f"{command:<9} p99 ratio recover-bot/bare: {ratio:.2f} (target ≤ 1.5); p99 < 300 ms: {bot['p99_ms'] < 300}"
        )
    summary["targets_met"] = met
    summary["teardown"] = {"clean": clean, "exit_codes": codes, "left_behind": left + left_below}
    print(
        f"load average {load_start[0]:.1f} → {load_end[0]:.1f} on {os.cpu_count()} cores; "
        f"targets met: {met}; teardown clean: {clean} (exit codes {codes})"
    )
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    summary["store"] = "postgresql" if db else "sqlite"
    (out / ("ack_latency_postgresql.json" if db else "ack_latency.json")).write_text(json.dumps(summary, indent=2))
    return 0 if met and clean else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument(
        "--db",
        metavar="POSTGRESQL_URL",
        help="serve on this PostgreSQL store (its inbox in the store's schema) instead of a SQLite file; "
        "results in bench/out/ack_latency_postgresql.json",
    )
    parser.add_argument("--serve-bare", metavar="SLACK_API_URL", help="internal: run the bare app (child process)")
    parser.add_argument("--serve-slack", action="store_true", help="internal: run the Slack stand-in (child process)")
    args = parser.parse_args()
    if args.serve_bare:
        return serve_until_stdin_closes("bare", args.serve_bare)
    if args.serve_slack:
        return serve_until_stdin_closes("slack", None)
    return run(args.rounds, args.concurrency, args.db)


if __name__ == "__main__":
    sys.exit(main())
