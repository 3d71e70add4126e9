"""The HTTP front before Bolt: size cap, signature before parsing, header timeout, connection cap.

The memory and half-open tests run `recover-bot serve` in a subprocess (the real start-up path) and
read its /proc/<pid>/status; the rest drive the in-process server with real sockets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.slack import HttpServer, SlackFront, build_bot
from bot.store import Store
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackHarness, SlackSender, slack_settings
from tests.fixtures.waiting import eventually
from tests.slack.fake_router import FakeRouter

GIB = 1024**3
PARTIAL = b"POST /slack/events HTTP/1.1\r\nHost: bot\r\nX-Slack-Signature: v0="


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert "Traceback" not in record.getMessage(), record.getMessage()


def _raw(url: str, request: bytes, timeout: float = 5.0) -> bytes:
    """One raw HTTP exchange (for requests httpx would refuse to build)."""
    parsed = urllib.parse.urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def _status(response: bytes) -> int:
    m = re.match(rb"HTTP/1\.1 (\d{3})", response)
    assert m, response[:200]
    return int(m.group(1))


# -- malformed requests: 4xx, one log line, no trace ---------------------------------------------------


def test_malformed_requests_get_4xx_without_a_traceback(slack_harness, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    router = FakeRouter()
    h: SlackHarness = slack_harness(router)
    url = h.server.url + "/slack/events"
    form = "application/x-www-form-urlencoded"
    sig = "v0=" + "0" * 64
    cases: list[tuple[dict[str, str], bytes, int]] = [
        ({"x-slack-request-timestamp": "soon", "x-slack-signature": sig}, b"a=1", 401),
        ({"x-slack-request-timestamp": "1e9", "x-slack-signature": sig}, b"a=1", 401),
        ({"x-slack-request-timestamp": "9" * 40, "x-slack-signature": sig}, b"a=1", 401),
        ({"x-slack-request-timestamp": str(int(time.time()))}, b"a=1", 401),
        ({"x-slack-request-timestamp": str(int(time.time())), "x-slack-signature": "v1=zz"}, b"a=1", 401),
        ({}, b"payload=%7Bnot-json", 401),
        ({"x-slack-request-timestamp": str(int(time.time())), "x-slack-signature": sig}, b"\xff\xfe", 400),
    ]
    for headers, body, status in cases:
        r = httpx.post(url, content=body, headers={"content-type": form, **headers})
        assert r.status_code == status, (headers, r.status_code, r.text)
    # Signed, but not what Slack would send: refused as 400 (the signature was right, the body is not).
    for body, ctype in [
        ("payload=%7Bnot-json", form),
        ("{not json", "application/json"),
        ("payload=%5B1%2C2%5D", form),
    ]:
        r = h.send.post(body, content_type=ctype)
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
    # Other paths and methods.
    assert httpx.get(url).status_code == 405
    assert httpx.post(h.server.url + "/other", content=b"x").status_code == 404
    h.settle()
    assert router.calls == [] and h.api.calls_to("chat.postMessage") == []
    _no_traceback(caplog)
    assert any("non-numeric X-Slack-Request-Timestamp" in r.getMessage() for r in caplog.records)
    # The server still works.
    assert h.send.command("cases").status_code == 200


def test_oversized_bodies_are_refused_unread(slack_harness) -> None:
    h: SlackHarness = slack_harness(FakeRouter())
    url = h.server.url + "/slack/events"
    ts = str(int(time.time()))
    sig = "v0=" + "1" * 64
    # A declared length over the cap: 413 at once, although not one byte of the body was sent.
    head = (
        f"POST /slack/events HTTP/1.1\r\nHost: bot\r\nContent-Type: application/json\r\n"
        f"X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {sig}\r\nContent-Length: {GIB}\r\n\r\n"
    ).encode()
    t0 = time.monotonic()
    assert _status(_raw(url, head)) == 413
    assert time.monotonic() - t0 < 2
    # A chunked body is counted as it arrives: 413 once it passes 1 MiB, the rest never read.
    sent = [0]

    def chunks() -> Iterator[bytes]:
        block = b"x" * (1024 * 1024)
        for _ in range(256):  # 256 MiB offered
            sent[0] += len(block)
            yield block

    try:
        r = httpx.post(url, content=chunks(), headers={"x-slack-request-timestamp": ts, "x-slack-signature": sig})
        assert r.status_code == 413
    except httpx.TransportError:
        pass  # the server closed while we were still sending: also a refusal
    assert sent[0] < 64 * 1024 * 1024  # the rest stayed with the client (socket buffers took a few MiB)
    assert h.send.command("cases").status_code == 200


def test_a_dribbled_body_and_headers_time_out(slack_api, tmp_path) -> None:
    settings = slack_settings(slack_api, tmp_path / "t.db")
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    server = HttpServer(
        SlackFront(bot.app, signing_secret=SIGNING_SECRET, body_deadline=1.0), "127.0.0.1", 0, header_timeout=1.0
    ).start()
    try:
        host, port = "127.0.0.1", server.port
        # Headers never finished: the server closes the socket after the header timeout.
        half = socket.create_connection((host, port), timeout=5)
        half.sendall(PARTIAL)
        t0 = time.monotonic()
        assert half.recv(100) == b""
        assert 0.8 < time.monotonic() - t0 < 3
        half.close()
        # A silent connection (not one byte) is closed too.
        silent = socket.create_connection((host, port), timeout=5)
        assert silent.recv(100) == b""
        silent.close()
        # Headers complete, body dribbled: 408 when the body deadline passes.
        ts = str(int(time.time()))
        slow = socket.create_connection((host, port), timeout=5)
        slow.sendall(
            f"POST /slack/events HTTP/1.1\r\nHost: b\r\nX-Slack-Request-Timestamp: {ts}\r\n"
            f"X-Slack-Signature: v0={'2' * 64}\r\nContent-Length: 100\r\n\r\nab".encode()
        )
        assert _status(slow.recv(1000)) == 408
        slow.close()
        # A keep-alive connection whose next request dribbles its headers is closed as well.
        ka = socket.create_connection((host, port), timeout=5)
        ka.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
        first = b""
        while not first.endswith(b"ok\n"):
            first += ka.recv(1000)
        assert _status(first) == 200
        ka.sendall(b"GET /healthz HTTP/1.1\r\n")
        t0 = time.monotonic()
        assert ka.recv(100) == b"" and time.monotonic() - t0 < 3
        ka.close()
    finally:
        server.stop()
        bot.close()


def test_half_open_connections_beyond_the_cap_evict_the_oldest(slack_api, tmp_path) -> None:
    settings = slack_settings(slack_api, tmp_path / "e.db")
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    server = HttpServer(
        SlackFront(bot.app, signing_secret=SIGNING_SECRET), "127.0.0.1", 0, header_timeout=60, max_connections=50
    ).start()
    socks: list[socket.socket] = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(PARTIAL)
            socks.append(s)
        sender = SlackSender(server.url + "/slack/events", stand_in=slack_api)
        t0 = time.monotonic()
        assert sender.command("cases").status_code == 200
        assert httpx.get(server.url + "/healthz").status_code == 200
        assert time.monotonic() - t0 < 3
        sender.close()
        assert server.evictions >= 150
        # The server's count of open connections is the kernel's (it decides when to evict), once the
        # reactor has read the end of the two clients that just closed.
        eventually(
            lambda: server.reactor.open == _established(server.port),
            5,
            "the server's count of open connections to be the kernel's",
        )
        assert server.reactor.open == _established(server.port) <= 50
    finally:
        for s in socks:
            s.close()
        server.stop()
        bot.close()


def _established(port: int) -> int:
    """Server-side sockets on ``port`` in ESTABLISHED (from /proc/net/tcp)."""
    lines = Path("/proc/net/tcp").read_text(encoding="ascii").splitlines()[1:]
    return sum(1 for line in lines if int(line.split()[1].split(":")[1], 16) == port and line.split()[3] == "01")


# -- the real `serve` in a subprocess --------------------------------------------------------------------


def _vm(pid: int, field: str) -> int:
    """A /proc/<pid>/status field in bytes (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


class _Served:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url


@pytest.fixture
def served(slack_api, sandbox, tmp_path) -> Iterator[Any]:
    """Factory: start `recover-bot serve` (HTTP, PORT=0) in a subprocess; stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(nofile: int | None = None) -> _Served:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack_api.base_url,
            "CONTROL_HOST_URL": sandbox.url,
            "CONTROL_HOST_API_KEY": sandbox.api_key,
            "RECOVER_DB": str(tmp_path / "serve.db"),
            "HOST": "127.0.0.1",
            "PORT": "0",
            "RECOVER_LOG_LEVEL": "WARNING",
        }
        env.pop("SLACK_APP_TOKEN", None)

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        code = (
            "import sys; from bot.settings import load_settings; from bot.slack import serve; "
            "sys.exit(serve(load_settings(dotenv=None)))"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(tmp_path),
            preexec_fn=limit,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, line + (proc.stderr.read() if proc.stderr else "")
        url = m.group(1)
        eventually(lambda: httpx.get(url + "/healthz").status_code == 200, 20, "a healthy /healthz")
        return _Served(proc, url)

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        err = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in err, err[-3000:]


@pytest.mark.subprocess
def test_four_unsigned_one_gib_bodies_leave_rss_growth_under_50_mb(served) -> None:
    s = served()
    pid = s.proc.pid
    sender = SlackSender(s.url + "/slack/events")
    sender.command("cases")  # warm up the request path
    base_hwm = _vm(pid, "VmHWM")
    ts = str(int(time.time()))
    headers = {
        "x-slack-request-timestamp": ts,
        "x-slack-signature": "v0=" + "3" * 64,
        "content-type": "application/json",
    }
    offered = [0]
    lock = threading.Lock()

    def gib() -> Iterator[bytes]:
        block = b"{" * (1024 * 1024)
        for _ in range(1024):
            with lock:
                offered[0] += len(block)
            yield block

    def one(declared: bool) -> int | None:
        try:
            with httpx.Client(timeout=60) as client:
                extra = {"content-length": str(GIB)} if declared else {}
                return client.post(s.url + "/slack/events", content=gib(), headers={**headers, **extra}).status_code
        except httpx.TransportError:
            return None  # the server closed the connection on us: refused

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, [True, False, True, False]))
    assert all(r in (413, None) for r in results), results
    growth = _vm(pid, "VmHWM") - base_hwm
    assert growth < 50 * 1024 * 1024, f"peak RSS grew by {growth / 1e6:.1f} MB"
    assert offered[0] < GIB  # far from 4 GiB was even taken off the client's hands
    # Still serving.
    assert sender.command("cases").status_code == 200
    assert httpx.get(s.url + "/healthz").status_code == 200
    sender.close()


def _raise_own_nofile(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= n, "cannot raise this test's file limit"


@pytest.mark.subprocess
@pytest.mark.parametrize("server_nofile", [None, 1024], ids=["fd-limit-raised", "fd-limit-1024"])
def test_5000_half_open_connections_leave_signed_commands_acked_within_3s(served, server_nofile) -> None:
    _raise_own_nofile(5000 + 512)
    s = served(nofile=server_nofile)
    port = int(s.url.rsplit(":", 1)[1])
    socks: list[socket.socket] = []
    try:
        for _ in range(5000):
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", port))
            socks.append(sock)
        for sock in socks:
            with contextlib.suppress(OSError):  # already evicted
                sock.send(PARTIAL)
        sender = SlackSender(s.url + "/slack/events")
        latencies = []
        for i in range(10):
            t0 = time.monotonic()
            r = sender.command(f"help {i}")
            latencies.append(time.monotonic() - t0)
            assert r.status_code == 200 and "received" in r.text
        t0 = time.monotonic()
        assert httpx.get(s.url + "/healthz", timeout=5).status_code == 200
        latencies.append(time.monotonic() - t0)
        assert max(latencies) < 3.0, latencies
        sender.close()
    finally:
        for sock in socks:
            sock.close()
