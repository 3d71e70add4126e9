"""A small socket proxy for tests: 127.0.0.1 TCP → the engine's unix socket, recording every call.

It sees the real HTTP requests the docker SDK sends (method and path, as on the wire), and can
enforce an allowlist like wollomatic/socket-proxy does (403 for anything else), so a test can run
the bot *behind* the allowlist against the real engine. Hijacked connections (exec start upgrades to
a raw stream) are piped through untouched after their request line was checked.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RecordedCall:
    method: str
    path: str
    allowed: bool


@dataclass
class RecordingProxy:
    upstream_socket: str
    allow: Callable[[str, str], bool] | None = None
    calls: list[RecordedCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self.port = self._server.getsockname()[1]
        self.url = f"tcp://127.0.0.1:{self.port}"
        t = threading.Thread(target=self._accept, name="recording-proxy", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):  # wakes the accept() of the listening thread (close alone does not)
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        for s in list(self._sockets):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def recorded(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(c.method, c.path) for c in self.calls]

    # -- internals -----------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self._sockets.append(client)
            t = threading.Thread(target=self._serve, args=(client,), daemon=True)
            t.start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.upstream_socket)
        except OSError:
            client.close()
            return
        self._sockets.append(upstream)
        back = threading.Thread(target=self._pipe, args=(upstream, client), daemon=True)
        back.start()
        reader = client.makefile("rb")
        try:
            while True:
                head = _read_head(reader)
                if head is None:
                    break
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                method, target, _ = request_line.split(" ", 2)
                path = target.split("?", 1)[0]
                headers = _headers(head)
                allowed = self.allow(method, path) if self.allow else True
                with self._lock:
                    self.calls.append(RecordedCall(method, path, allowed))
                if not allowed:
                    body = json.dumps({"message": f"socket proxy: {method} {path} is not allowed"}).encode()
                    client.sendall(
                        b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                        + body
                    )
                    break
                upstream.sendall(head)
                length = int(headers.get("content-length", "0") or 0)
                while length > 0:
                    chunk = reader.read(min(length, 65536))
                    if not chunk:
                        return
                    upstream.sendall(chunk)
                    length -= len(chunk)
                if headers.get("transfer-encoding", "").lower() == "chunked" or "upgrade" in headers:
                    # Hijacked (exec start) or streamed body: pipe the rest as is.
                    while True:
                        data = reader.read1(65536)
                        if not data:
                            break
                        upstream.sendall(data)
                    break
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)
            back.join(timeout=120)
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


def _read_head(reader) -> bytes | None:  # type: ignore[no-untyped-def]
    lines = []
    while True:
        line = reader.readline(65537)
        if not line:
            return None
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _headers(head: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in head.split(b"\r\n")[1:]:
        if b":" in raw:
            k, _, v = raw.decode("latin-1").partition(":")
            out[k.strip().lower()] = v.strip()
    return out
