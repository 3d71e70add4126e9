"""The sandbox's HTTP server: sockets, keep-alive, timeouts, and answers sent well or badly on purpose.

A real concurrent server (``ThreadingHTTPServer``, HTTP/1.1 keep-alive) with a socket timeout per
connection and a clean shutdown that closes idle keep-alive connections too. It only does I/O: every
request is decided in :class:`~bot.sandbox._app.SandboxApp` (no sockets there), and an answer that a
fault shapes (dribbled, far too big, or dropped after the commit) is sent here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bot.sandbox._app import SandboxApp
from bot.sandbox._faults import Fault
from bot.sandbox._http import Response, err

log = logging.getLogger("bot.sandbox")

MAX_BODY = 1 << 20
_CHUNK = 64 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "recover-bot-sandbox/1"
    # Headers and body go out in separate sends; without TCP_NODELAY the client's delayed ACK adds
    # ~40 ms to every answer (measured by the diagnose benchmark).
    disable_nagle_algorithm = True
    server: SandboxHTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def _serve(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._write(err(413 if length > MAX_BODY else 400, "BAD_REQUEST", "Bad or too large Content-Length."))
            return
        raw = self.rfile.read(length) if length else b""
        response = self.server.app.handle(
            method, self.path, dict(self.headers.items()), raw, peer=str(self.client_address[0])
        )
        if response.drop:
            # The effect is committed; the client never hears about it.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._write(response)

    def _write(self, response: Response) -> None:
        payload = b"" if response.body is None else json.dumps(response.body).encode()
        if response.shape is not None:
            self.close_connection = True
            try:
                if response.shape.kind == "dribble":
                    self._dribble(response, payload, response.shape)
                else:
                    self._huge(response, payload, response.shape)
            except OSError:
                pass  # the client gave up (its cap or deadline): nothing more to send
            return
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (e.g. its timeout during an injected latency): nothing to answer.
            self.close_connection = True

    def _head(self, response: Response, length: int | None) -> bytes:
        lines = [f"HTTP/1.1 {response.status} {self.responses.get(response.status, ('',))[0]}"]
        lines.append("Content-Type: application/json")
        if length is not None:
            lines.append(f"Content-Length: {length}")
        lines.append("Connection: close")
        lines.extend(f"{name}: {value}" for name, value in response.headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _dribble(self, response: Response, payload: bytes, fault: Fault) -> None:
        """The whole answer (status line and headers included), ``rate`` bytes a second, padded so it
        lasts ``seconds``: each read gets a few bytes, so only a total deadline stops the client."""
        body = payload + b" " * max(0, int(fault.rate * fault.seconds) - len(payload))
        data = self._head(response, len(body)) + body
        step = max(1, fault.rate // 4)
        for offset in range(0, len(data), step):
            if self.server.stopping.wait(step / fault.rate):
                return
            self.connection.sendall(data[offset : offset + step])

    def _huge(self, response: Response, payload: bytes, fault: Fault) -> None:
        """The real answer with a ``_padding`` string making it ``size`` bytes, streamed (never built)."""
        if payload.endswith(b"}") and len(payload) > 2:
            prefix, suffix = payload[:-1] + b',"_padding":"', b'"}'
        else:
            prefix, suffix = b'{"_padding":"', b'"}'
        filler = max(0, fault.size - len(prefix) - len(suffix))
        self.connection.sendall(self._head(response, len(prefix) + filler + len(suffix) if fault.length else None))
        self.connection.sendall(prefix)
        block = b"x" * _CHUNK
        while filler > 0 and not self.server.stopping.is_set():
            n = min(filler, _CHUNK)
            self.connection.sendall(block[:n])
            filler -= n
        self.connection.sendall(suffix)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        # The request line never carries the Authorization header, so nothing secret is logged.
        log.debug("sandbox %s - %s", self.address_string(), format % args)


class SandboxHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its open connections, so stop() can close idle keep-alives."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, address: tuple[str, int], app: SandboxApp, *, request_timeout: float = 30.0) -> None:
        super().__init__(address, _Handler)
        self.app = app
        self.request_timeout = request_timeout
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.stopping = threading.Event()  # slow answers (dribble, huge_body) end when set

    def track(self, connection: socket.socket, opened: bool) -> None:
        with self._connections_lock:
            if opened:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        self.stopping.set()
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
