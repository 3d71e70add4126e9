"""Running the Bolt app: HTTP mode (Bolt's ASGI adapter under uvicorn) or Socket Mode.

Bolt's ASGI adapter calls ``App.dispatch`` on the event loop, and dispatch waits (polling) for the
listener's ack: with twenty requests at once they would queue one behind another. The handler below
keeps the adapter but runs dispatch on a thread pool, and adds ``GET /healthz``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

import uvicorn
from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.adapter.asgi import SlackRequestHandler
from slack_bolt.adapter.asgi.http_request import AsgiHttpRequest

from bot.errors import RecoverError
from bot.redact import redact
from bot.settings import Settings, reveal

log = logging.getLogger("recover_bot.slack")

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
LISTEN_BACKLOG = 2048


class RecoverAsgi(SlackRequestHandler):
    """Bolt's ASGI adapter with dispatch off the event loop and a readiness endpoint."""

    def __init__(self, app: App, *, path: str = EVENTS_PATH, dispatch_threads: int = 64) -> None:
        super().__init__(app, path=path)
        self._pool = ThreadPoolExecutor(max_workers=dispatch_threads, thread_name_prefix="recover-dispatch")
        self.ready = threading.Event()

    async def dispatch(self, request: AsgiHttpRequest) -> BoltResponse:
        raw = await request.get_raw_body()
        bolt_request = BoltRequest(body=raw, query=request.query_string, headers=request.get_headers())
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.app.dispatch, bolt_request)

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.ready.set()
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
            if message["type"] == "lifespan.shutdown":
                self.ready.clear()
                self._pool.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] == "http" and scope["path"] == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
            ok = self.ready.is_set()
            body = b"ok\n" if ok else b"starting\n"
            await send(
                {
                    "type": "http.response.start",
                    "status": 200 if ok else 503,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await super().__call__(scope, receive, send)


def bind(host: str, port: int) -> socket.socket:
    """Bind first (PORT=0 picks a free port we can print), with a large listen backlog."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


class HttpServer:
    """uvicorn serving one ASGI app on a bound socket; in the foreground or a thread (tests, bench)."""

    def __init__(
        self, asgi: Any, host: str = "127.0.0.1", port: int = 0, *, log_level: str = "warning"
    ) -> None:
        self.sock = bind(host, port)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self.config = uvicorn.Config(
            asgi,
            lifespan="on",
            log_level=log_level.lower(),
            access_log=False,
            backlog=LISTEN_BACKLOG,
            timeout_keep_alive=30,
        )
        self.server = uvicorn.Server(self.config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def run(self) -> None:
        """Serve in the foreground until SIGINT/SIGTERM."""
        self.server.run(sockets=[self.sock])

    def start(self, timeout: float = 10.0) -> HttpServer:
        """Serve in a background thread; returns once uvicorn accepts connections."""
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the HTTP server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()


def serve(settings: Settings, *, out: TextIO | None = None) -> int:
    """``recover-bot serve``: Socket Mode when SLACK_APP_TOKEN is set, otherwise HTTP on HOST:PORT."""
    from bot.services import build_router  # the core; imported here so the Slack package stays light
    from bot.slack.app import build_bot
    from bot.slack.web import SlackDirectory, make_client

    out = out or sys.stdout
    try:
        settings.require_slack()
        client = make_client(settings)
        directory = SlackDirectory(client)
        router = build_router(settings, directory=directory, startup=False)
        bot = build_bot(settings, router, client=client)
    except RecoverError as exc:
        print(redact(str(exc)), file=sys.stderr)
        return 2
    except Exception as exc:  # auth.test refused, Slack unreachable…
        print(f"recover-bot cannot start: {redact(str(exc))}", file=sys.stderr)
        return 2
    bot.start_sweeper()
    bot.work.submit(bot.run_startup)
    try:
        if settings.slack_app_token:
            from slack_bolt.adapter.socket_mode import SocketModeHandler

            print("recover-bot: connecting to Slack in Socket Mode", file=out, flush=True)
            SocketModeHandler(bot.app, reveal(settings.slack_app_token)).start()
            return 0
        server = HttpServer(RecoverAsgi(bot.app), settings.host, settings.port, log_level=settings.log_level)
        print(
            f"recover-bot listening on {server.url} "
            f"(Slack request URL path {EVENTS_PATH}, health {HEALTH_PATH})",
            file=out,
            flush=True,
        )
        server.run()
        return 0
    finally:
        bot.close()
