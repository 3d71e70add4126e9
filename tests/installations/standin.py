"""A control host in trouble, for isolation tests and the bench: every call answered 503 (or 429 with
Retry-After), or held open without an answer. Plain http.server on 127.0.0.1:0, nothing of ours."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

Mode = Literal["503", "429", "hang"]


class TroubledHost:
    def __init__(self, mode: Mode = "503", *, hang_seconds: float = 30.0) -> None:
        self.mode, self.hang_seconds = mode, hang_seconds
        self.calls = 0
        self.posts = 0
        self._closing = threading.Event()
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return None

            def _answer(self) -> None:
                host.calls += 1
                if self.command == "POST":
                    host.posts += 1
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                if host.mode == "hang":
                    host._closing.wait(host.hang_seconds)
                    self.close_connection = True  # then drop it, unanswered
                    return
                status = 429 if host.mode == "429" else 503
                body = b'{"error": {"code": "BACKEND_UNAVAILABLE", "message": "down"}}'
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                if status == 429:
                    self.send_header("retry-after", "1")
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
        time.sleep(0.05)
