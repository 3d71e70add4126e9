"""Running the Bolt app: HTTP mode (the checked front on our threaded server) or Socket Mode.

The limits on what one client can hold (see README "Deployment" for what the reverse proxy adds):
- bodies: over 1 MiB refused unread, unsigned ones never parsed (:mod:`bot.slack.front`);
- heads: 16 KiB at most, complete within 10 s of the accept or the first byte; idle keep-alive 5 s;
- connections: at most ``max_connections`` (derived from the file-descriptor limit), the oldest one
  waiting for a head closed to make room; requests being read or answered: 256, 503 beyond
  (:mod:`bot.slack.httpd`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any, TextIO

from bot.errors import RecoverError
from bot.redact import redact
from bot.settings import Settings, reveal
from bot.slack.front import EVENTS_PATH, HEALTH_PATH, SlackFront
from bot.slack.httpd import HEADER_TIMEOUT, MAX_IN_FLIGHT, Reactor
from bot.slack.supervisor import WorkerSupervisor
from bot.startup import listen_error, slack_start_error

log = logging.getLogger("recover_bot.slack")

__all__ = ["EVENTS_PATH", "HEALTH_PATH", "HttpServer", "SlackFront", "bind", "serve"]

LISTEN_BACKLOG = 2048
FD_RESERVE = 128  # descriptors kept for SQLite, outgoing HTTP, logs
MAX_CONNECTIONS = 10_000


def raise_fd_limit(target: int = 65_536) -> int:
    """Raise this process's soft file-descriptor limit towards the hard one; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else target


def _fd_soft_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def listen_backlog() -> int:
    """The listen backlog (how many connections the kernel holds before the reactor accepts them)."""
    return max(64, min(LISTEN_BACKLOG, _fd_soft_limit() // 8))


def connection_cap() -> int:
    """How many client sockets fit under the descriptor limit.

    The reactor enforces the cap at each accept (the oldest waiting connection is closed before the
    next accept), so besides the reserve for SQLite, outgoing HTTP and logs only a small margin is
    kept: the process never runs out of descriptors (``accept`` failing with EMFILE).
    """
    return max(32, min(MAX_CONNECTIONS, _fd_soft_limit() - FD_RESERVE - 32))


def bind(host: str, port: int) -> socket.socket:
    """Bind first (PORT=0 picks a free port we can print), with a large listen backlog."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(listen_backlog())
    sock.set_inheritable(True)
    return sock


class HttpServer:
    """The reactor serving one :class:`SlackFront` on a bound socket; in the foreground or a thread."""

    def __init__(
        self,
        front: SlackFront,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        header_timeout: float = HEADER_TIMEOUT,
        max_connections: int | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        sock: socket.socket | None = None,
    ) -> None:
        self.sock = sock if sock is not None else bind(host, port)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self.front = front
        self.max_connections = max_connections or connection_cap()
        self.reactor = Reactor(
            self.sock,
            front,
            header_timeout=header_timeout,
            max_connections=self.max_connections,
            max_in_flight=max_in_flight,
        )
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def evictions(self) -> int:
        """Connections closed to make room under the cap (for tests and the log)."""
        return self.reactor.evictions

    def run(self) -> None:
        """Serve in the foreground until SIGINT/SIGTERM (both end it cleanly: ``finally`` blocks run)."""
        previous = signal.signal(signal.SIGTERM, _exit_cleanly)
        self.front.ready.set()
        try:
            self.reactor.run()
        except KeyboardInterrupt:
            pass
        finally:
            self.front.ready.clear()
            signal.signal(signal.SIGTERM, previous)
            self.sock.close()

    def start(self, timeout: float = 10.0) -> HttpServer:
        """Serve in a background thread; returns once the reactor runs."""
        self._thread = threading.Thread(target=self.reactor.run, name="recover-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.reactor.running:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the HTTP server on {self.url} did not start")
            time.sleep(0.005)
        self.front.ready.set()
        return self

    def stop(self) -> None:
        self.front.ready.clear()
        self.reactor.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()


def freeze_startup_heap() -> None:
    """Move everything built at start-up out of the garbage collector's sight (``gc.freeze``).

    Why: the Bolt app, slack_sdk, the router and the runbooks leave ~82,000 long-lived objects, and a
    full collection walks them all with the interpreter held, so every ack of a burst waits behind it:
    one such pause of 56–58 ms in 3,000 commands measured by bench/gc_pause.py; frozen, none, and the
    longest pause 0.7 ms. What requests create is still collected as usual.
    """
    gc.collect()
    gc.freeze()


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _socket_health(link: Any, settings: Settings, out: TextIO, worker: WorkerSupervisor) -> HttpServer | None:
    """In Socket Mode, ``/healthz`` (the link's and the worker's state) on HOST:PORT; best effort: a
    busy port costs the health endpoint, not the bot."""

    def health() -> tuple[bool, list[str]]:
        (link_ok, link_lines), (worker_ok, worker_lines) = link.health(), worker.health()
        return link_ok and worker_ok, [*link_lines, *worker_lines]

    try:
        front = SlackFront(link.app, events=False, health=health)
        server = HttpServer(front, settings.host, settings.port).start()
    except (OSError, RuntimeError) as exc:
        log.warning("no /healthz in Socket Mode: %s", exc)
        return None
    print(f"recover-bot health on {server.url}{HEALTH_PATH}", file=out, flush=True)
    return server


@contextlib.contextmanager
def _quiet_start() -> Iterator[None]:
    """While Bolt starts: a failed auth.test is reported once, in our one line, not also as
    slack_sdk's ERROR log; Bolt's note that SLACK_BOT_TOKEN in the environment is unused (we pass
    the client) is noise."""
    loggers = [logging.getLogger("slack_sdk.web.base_client"), logging.getLogger("recover_bot.slack.bolt")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def serve(settings: Settings, *, out: TextIO | None = None) -> int:
    """``recover-bot serve``: Socket Mode when SLACK_APP_TOKEN is set, otherwise HTTP on HOST:PORT."""
    from bot.slack.app import build_bot
    from bot.slack.ports import slack_compose
    from bot.slack.web import make_client

    out = out or sys.stdout
    sock: socket.socket | None = None
    try:
        settings.require_slack()
        if not settings.slack_app_token:
            # The port first: a busy PORT is named before anything else is contacted.
            try:
                sock = bind(settings.host, settings.port)
            except OSError as exc:
                raise listen_error(settings.host, settings.port, exc, host_name="HOST", port_name="PORT") from None
        client = make_client(settings)
        router = slack_compose(settings, client).router  # as the worker composes it, without its voices
        try:
            with _quiet_start():
                bot = build_bot(settings, router, client=client)  # Bolt calls auth.test here
        except RecoverError:
            raise
        except Exception as exc:
            raise slack_start_error(settings.slack_api_url, exc) from None
    except RecoverError as exc:
        if sock is not None:
            sock.close()
        print(redact(str(exc)), file=sys.stderr)
        return 2
    # The work (router, core, posts, start-up replays, expiry) runs in the worker process; this one
    # only checks, commits each delivery to the inbox and acks (see bot.slack.worker).
    assert bot.inbox is not None
    store = bot.inbox.store
    if store.path is None:
        # Litestream (deploy/) replicates the SQLite files; on a server engine it has nothing to do.
        print(
            f"recover-bot: step store and Slack inbox on PostgreSQL ({store.where}), shared by every bot on it; "
            "Litestream does not apply: back it up with `recover-bot backup DEST` (pg_dump)",
            file=out,
            flush=True,
        )
    worker = WorkerSupervisor(settings, bot.inbox).start()
    bot.handoff = worker.wake
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_cleanly)  # SIGTERM still stops the worker (finally below)
    freeze_startup_heap()
    try:
        if settings.slack_app_token:
            from bot.slack.socket_link import SocketLink

            link = SocketLink(bot.app, reveal(settings.slack_app_token) or "", api_url=settings.slack_api_url)
            print("recover-bot: connecting to Slack in Socket Mode", file=out, flush=True)
            health = _socket_health(link, settings, out, worker)
            try:
                link.run()
            finally:
                link.close()
                if health is not None:
                    health.stop()
            return 0
        raise_fd_limit()
        front = SlackFront(bot.app, signing_secret=reveal(settings.slack_signing_secret), health=worker.health)
        server = HttpServer(front, settings.host, settings.port, sock=sock)
        print(
            f"recover-bot listening on {server.url} (Slack request URL path {EVENTS_PATH}, health {HEALTH_PATH})",
            file=out,
            flush=True,
        )
        server.run()
        return 0
    finally:
        worker.stop()
        bot.close()
