"""A control host in trouble, for isolation tests and the bench: every call answered 503 (or 429 with
Retry-After), or held open without an answer. Plain http.server on 127.0.0.1:0, nothing of ours.
Also the installations file naming such hosts, for a real `recover-bot serve`."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal

Mode = Literal["503", "429", "hang"]


def installations_file(folder: Path, hosts: dict[str, tuple[str, str, str]]) -> Path:
    """The installations file as an operator writes it (name → control host URL, API key, its channels as
    YAML list text, e.g. ``[C0EU1]`` or ``[]``), each key in a file beside it."""
    lines = ["installations:"]
    for name, (url, key, channels) in hosts.items():
        (folder / f"{name}.key").write_text(key + "\n")
        lines += [
            f"  - name: {name}",
            f"    control_host_url: {url}",
            f"    api_key_file: {name}.key",
            f"    channels: {channels}",
        ]
    path = folder / "installations.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def installations_env(path: Path) -> dict[str, str | None]:
    """What `recover-bot serve` is started with to serve the file (no single control host beside it)."""
    return {"RECOVER_INSTALLATIONS_FILE": str(path), "CONTROL_HOST_URL": None, "CONTROL_HOST_API_KEY": None}


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
