"""Socket Mode over the ``websockets`` library's threaded client, with prompt reconnection.

Why not slack_sdk's built-in client: against a stand-in that follows Slack's protocol it acked a
command on the new connection after a ``refresh_requested`` disconnect in 3.08 s (past Slack's 3 s),
stayed deaf for 55 s with one core at 100 % after a connection dropped without a close frame, and
neither answered nor acted on a server close frame for 9 s (its read loop and ping interval).

Here one thread reads; a ``disconnect`` message, a close frame, an EOF or a missed pong ends the read
at once and a new connection is opened (``apps.connections.open``) with a short, bounded backoff only
when opening fails. After a ``refresh_requested`` the new connection is opened before the old one is
closed. Envelopes are dispatched on a pool and acked with their ``envelope_id`` as soon as the
listener acks; one whose delivery could not be committed to the inbox is left unacked, so Slack sends
it again (an ack would have told Slack it was taken). A text frame that is not a JSON object is
logged and ignored (it ended ``serve`` once).

A link can also go silent: no FIN, no RST, nothing read. Our own keepalive pings every
``PING_INTERVAL`` s; a pong missing for ``PING_TIMEOUT`` s ends the link (noticed within their sum,
3.5 s, of the last pong), and while a pong is overdue (``PONG_OVERDUE``) ``/healthz`` says
``socket_mode: unconfirmed`` (503) instead of ``connected``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.socket_mode.internals import run_bolt_app
from slack_sdk import WebClient
from slack_sdk.socket_mode.request import SocketModeRequest
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from bot.redact import redact
from bot.slack.inbox import NOT_COMMITTED_STATUS

log = logging.getLogger("recover_bot.slack.socket")

PING_INTERVAL = 1.5  # seconds from a pong to the next ping
PING_TIMEOUT = 2.0  # a pong later than this: the link is taken for dead
PONG_OVERDUE = 1.0  # a pong later than this: /healthz no longer vouches for the link


class SocketLink:
    """One Socket Mode link for a Bolt app; ``state`` is shown by ``/healthz``."""

    def __init__(
        self,
        app: App,
        app_token: str,
        *,
        api_url: str | None = None,
        ping_interval: float = PING_INTERVAL,
        ping_timeout: float = PING_TIMEOUT,
        pong_overdue: float = PONG_OVERDUE,
        workers: int = 16,
        max_backoff: float = 5.0,
    ) -> None:
        self.app = app
        self.app_token = app_token
        self.client = WebClient(token=app_token, base_url=api_url or app.client.base_url)
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.pong_overdue = pong_overdue
        self.max_backoff = max_backoff
        self.state = "starting"
        self.connections = 0
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="recover-socket")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ws: ClientConnection | None = None
        self._ping: tuple[ClientConnection, float] | None = None  # a link's unanswered ping, and when it went

    # -- life cycle -----------------------------------------------------------------------------------

    def start(self) -> SocketLink:
        self._thread = threading.Thread(target=self._run, name="recover-socket-link", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """In the foreground until :meth:`close` (``recover-bot serve``)."""
        self._run()

    def close(self) -> None:
        self._stop.set()
        ws = self._ws
        if ws is not None:
            ws.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.state = "stopped"

    def health(self) -> tuple[bool, list[str]]:
        state, ping = self.state, self._ping
        late = time.monotonic() - ping[1] if ping is not None and ping[0] is self._ws else 0.0
        if state == "connected" and late > self.pong_overdue:
            return False, [
                f"socket_mode: unconfirmed (no pong for {late:.1f} s; connections opened: {self.connections})"
            ]
        return state == "connected", [f"socket_mode: {state} (connections opened: {self.connections})"]

    # -- the loop ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.1
        previous: ExitStack | None = None
        while not self._stop.is_set():
            link = ExitStack()
            try:
                url = str(self.client.apps_connections_open(app_token=self.app_token).get("url"))
                ws = link.enter_context(
                    connect(
                        url,
                        open_timeout=5,
                        close_timeout=1,
                        ping_interval=None,  # our own keepalive (below): it also tells /healthz
                        max_size=1024 * 1024,
                    )
                )
            except Exception as exc:  # noqa: BLE001 - Slack or the network: retry, bounded
                link.close()
                self.state = "reconnecting"
                log.warning("Socket Mode: cannot connect (%s); retrying in %.1f s", redact(str(exc))[:200], backoff)
                self._stop.wait(backoff)
                backoff = min(self.max_backoff, backoff * 2)
                continue
            backoff = 0.1
            self.connections += 1
            self._ws = ws
            if previous is not None:
                previous.close()  # after a refresh: the new link is up before the old one goes
                previous = None
            read_done = threading.Event()
            threading.Thread(
                target=self._keepalive, args=(ws, read_done), name="recover-socket-ping", daemon=True
            ).start()
            try:
                refresh = self._read(ws)
            finally:
                read_done.set()
            self.state = "reconnecting" if not self._stop.is_set() else "stopped"
            if refresh and not self._stop.is_set():
                previous = link
            else:
                link.close()
        if previous is not None:
            previous.close()

    def _read(self, ws: ClientConnection) -> bool:
        """Read until the link ends; True when Slack asked for a refresh (keep it open meanwhile)."""
        try:
            for raw in ws:
                try:
                    message = json.loads(raw)
                except (ValueError, RecursionError):
                    message = None
                if not isinstance(message, dict):
                    log.warning("Socket Mode: ignored a frame that is not a JSON object (%d bytes)", len(raw))
                    continue
                kind = message.get("type")
                if kind == "hello":
                    self.state = "connected"
                elif kind == "disconnect":
                    log.info("Socket Mode: disconnect (%s): reconnecting", message.get("reason"))
                    return bool(message.get("reason") == "refresh_requested")
                elif message.get("envelope_id"):
                    self._pool.submit(self._handle, ws, message)
        except (ConnectionClosed, WebSocketException, OSError) as exc:
            log.info("Socket Mode: link ended (%s): reconnecting", type(exc).__name__)
        return False

    def _keepalive(self, ws: ClientConnection, read_done: threading.Event) -> None:
        """Ping the link until its read ends; a pong missing for ``ping_timeout`` ends the read (the
        socket is shut down: a silent peer would answer no close frame)."""
        while not read_done.wait(self.ping_interval):
            self._ping = (ws, time.monotonic())
            try:
                pong = ws.ping()
            except (ConnectionClosed, WebSocketException, OSError):
                return
            answered = pong.wait(self.ping_timeout)
            if read_done.is_set():
                return
            if answered:
                self._ping = None
                continue
            log.warning("Socket Mode: no pong within %.1f s (a silent link): reconnecting", self.ping_timeout)
            with contextlib.suppress(OSError):
                ws.socket.shutdown(socket.SHUT_RDWR)  # the read sees the end at once
            return

    def _handle(self, ws: ClientConnection, message: dict[str, Any]) -> None:
        envelope_id = message["envelope_id"]
        try:
            request = SocketModeRequest.from_dict(message)
            if request is None:
                ack: dict[str, Any] = {"envelope_id": envelope_id}
            else:
                response = run_bolt_app(self.app, request)
                if response.status == NOT_COMMITTED_STATUS:
                    log.warning("Socket Mode: envelope %s not acked (not committed): Slack sends it again", envelope_id)
                    return
                ack = {"envelope_id": envelope_id}
                if response.status == 200 and response.body:
                    ctype = (response.headers.get("content-type") or [""])[0]
                    ack["payload"] = (
                        json.loads(response.body) if ctype.startswith("application/json") else {"text": response.body}
                    )
        except Exception as exc:  # noqa: BLE001 - ack anyway: Slack must not retry a broken payload forever
            log.warning("Socket Mode: envelope failed (%s)", redact(str(exc))[:200])
            ack = {"envelope_id": envelope_id}
        started = time.monotonic()
        try:
            ws.send(json.dumps(ack))  # on the link that brought it; else on the current one
        except (ConnectionClosed, WebSocketException, OSError):
            try:
                (self._ws or ws).send(json.dumps(ack))
            except (ConnectionClosed, WebSocketException, OSError):
                log.warning("Socket Mode: ack for %s lost with its link (Slack retries it)", envelope_id)
        log.debug("Socket Mode: acked %s in %.3f s", envelope_id, time.monotonic() - started)
