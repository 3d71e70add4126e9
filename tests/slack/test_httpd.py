"""The threaded HTTP server under `serve` (bot.slack.httpd), attacked over real sockets.

What it must hold besides the front's checks (tests/slack/test_front.py): framing read one way only
(request smuggling), keep-alive and pipelining answered in order, ``Expect: 100-continue``, the cap on
requests in flight, and a chunked signed command served like any other.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.slack import HttpServer, SlackFront, build_bot
from bot.slack.httpd import Request
from bot.slack.httpwire import Response
from bot.store import Store
from tests.fixtures.slack import SIGNING_SECRET, SlackHarness, SlackSender, slack_settings
from tests.fixtures.waiting import eventually
from tests.slack.fake_router import FakeRouter


def _connect(url: str) -> socket.socket:
    parsed = urllib.parse.urlparse(url)
    return socket.create_connection((parsed.hostname, parsed.port), timeout=5)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _responses(raw: bytes) -> list[tuple[int, bytes]]:
    """Split a byte stream of answers (each with a content-length) into (status, body) pairs."""
    out: list[tuple[int, bytes]] = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        out.append((status, rest[:length]))
        raw = rest[length:]
    return out


def _server_side_sockets(port: int) -> list[str]:
    """States of the sockets whose local port is ``port`` that a server must have closed (from
    /proc/net/tcp): LISTEN, ESTABLISHED, or CLOSE_WAIT (the client left, the server never closed)."""
    states = {"0A": "LISTEN", "01": "ESTABLISHED", "08": "CLOSE_WAIT"}
    found = []
    for line in Path("/proc/net/tcp").read_text(encoding="ascii").splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] in states:
            found.append(states[fields[3]])
    return found


def _signed(sender: SlackSender, text: str, *, extra: str = "", user: str = "UALICE") -> bytes:
    body = sender.command_body(text, user=user)
    ts = int(time.time())
    sig = sender.verifier.generate_signature(timestamp=str(ts), body=body)
    return (
        f"POST /slack/events HTTP/1.1\r\nHost: bot\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {sig}\r\n{extra}"
        f"Content-Length: {len(body.encode())}\r\n\r\n{body}"
    ).encode()


@pytest.fixture
def harness(slack_harness) -> Iterator[SlackHarness]:
    h: SlackHarness = slack_harness(FakeRouter())
    yield h


def test_ambiguous_framing_is_refused_and_nothing_reaches_the_app(harness: SlackHarness) -> None:
    """Request smuggling: a head a proxy could read another way is a 400/501, never a guess."""
    ts = str(int(time.time()))
    signed = f"X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: v0={'a' * 64}\r\n"
    smuggled = "GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n"
    cases = {
        # A length beside chunked: the smuggled request after the empty chunk must never be answered.
        f"POST /slack/events HTTP/1.1\r\nHost: b\r\n{signed}Content-Length: 5\r\n"
        f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}": 400,
        f"POST /slack/events HTTP/1.1\r\nHost: b\r\n{signed}Content-Length: 3\r\nContent-Length: 40\r\n\r\nabc": 400,
        f"POST /slack/events HTTP/1.1\r\nHost: b\r\n{signed}Content-Length: +3\r\n\r\nabc": 400,
        f"POST /slack/events HTTP/1.1\r\nHost: b\r\n{signed}Transfer-Encoding: gzip, chunked\r\n\r\n": 501,
        f"POST /slack/events HTTP/1.1\r\nHost: b\r\n folded: on\r\n{signed}Content-Length: 0\r\n\r\n": 400,
        "POST /slack/events HTTP/1.1\r\nHost: b\r\nX-Bad: a\x01b\r\n\r\n": 400,
        "POST /slack/events HTTP/2.0\r\nHost: b\r\n\r\n": 505,
        "GET /healthz HTTP/1.1\r\n\r\n": 400,
        "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n": 400,
        "POST  /slack/events HTTP/1.1\r\nHost: b\r\n\r\n": 400,
        "POST http://evil/slack/events HTTP/1.1\r\nHost: b\r\n\r\n": 400,
        "POST /slack/events HTTP/1.1\r\nHost: b\r\nX-Pad: " + "p" * 17_000 + "\r\n\r\n": 431,
    }
    for request, status in cases.items():
        with _connect(harness.server.url) as sock:
            sock.sendall(request.encode("latin-1"))
            answers = _responses(_read_all(sock))
        assert [s for s, _ in answers] == [status], (request[:80], answers)
    # A chunked body whose size line is not hex, and one that lies about its chunk's end.
    for chunked in ("zz\r\nabc\r\n0\r\n\r\n", "3\r\nabcXY0\r\n\r\n"):
        with _connect(harness.server.url) as sock:
            sock.sendall(
                (
                    f"POST /slack/events HTTP/1.1\r\nHost: b\r\n{signed}Transfer-Encoding: chunked\r\n\r\n{chunked}"
                ).encode()
            )
            assert [s for s, _ in _responses(_read_all(sock))] == [400]
    harness.settle()
    assert harness.bot.router.calls == [] and harness.api.calls_to("chat.postMessage") == []
    assert harness.send.command("cases").status_code == 200  # still serving


def test_keep_alive_pipelining_and_connection_close(harness: SlackHarness) -> None:
    """Two signed commands sent back to back on one connection are answered, in order, on it."""
    with _connect(harness.server.url) as sock:
        sock.sendall(
            _signed(harness.send, "diagnose ses_one", user="UONE")
            + _signed(harness.send, "diagnose ses_two", user="UTWO", extra="Connection: close\r\n")
        )
        answers = _responses(_read_all(sock))  # the second asked to close: the server ends the stream
    assert [s for s, _ in answers] == [200, 200]
    assert b"ses_one" in answers[0][1] and b"ses_two" in answers[1][1]
    # HTTP/1.0: one answer, then the connection is closed by the server.
    with _connect(harness.server.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert _responses(_read_all(sock)) == [(200, b"ok\n")]
    # HEAD: the length of what GET would send, and no body.
    with _connect(harness.server.url) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        raw = _read_all(sock)
    assert raw.startswith(b"HTTP/1.1 200 ") and raw.endswith(b"\r\n\r\n") and b"content-length: 3" in raw
    harness.settle()
    assert sorted(c[1] for c in harness.bot.router.calls) == ["diagnose ses_one", "diagnose ses_two"]


def test_expect_100_continue_and_a_chunked_signed_command(harness: SlackHarness) -> None:
    """curl sends ``Expect: 100-continue`` for larger bodies; a proxy may forward a body chunked."""
    request = _signed(harness.send, "diagnose ses_expect", extra="Expect: 100-continue\r\n")
    head, _, body = request.partition(b"\r\n\r\n")
    with _connect(harness.server.url) as sock:
        sock.sendall(head + b"\r\n\r\n")
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"  # nothing of the body was sent yet
        sock.sendall(body)
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200 ") and b"ses_expect" in reply
    # The same kind of command, its body in three chunks.
    request = _signed(harness.send, "diagnose ses_chunked")
    head, _, body = request.partition(b"\r\n\r\n")
    head = b"\r\n".join(line for line in head.split(b"\r\n") if not line.lower().startswith(b"content-length"))
    pieces = [body[:10], body[10:50], body[50:]]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\nX-Trailer: t\r\n\r\n"
    with _connect(harness.server.url) as sock:
        sock.sendall(head + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked)
        answers = _responses(_read_all(sock))
    assert [s for s, _ in answers] == [200] and b"ses_chunked" in answers[0][1]
    harness.settle()
    assert sorted(c[1] for c in harness.bot.router.calls) == ["diagnose ses_chunked", "diagnose ses_expect"]


@pytest.mark.subprocess
def test_requests_in_flight_beyond_the_cap_get_503_and_the_rest_is_served(slack_api, tmp_path) -> None:
    """Two clients dribbling their bodies hold the two request threads: a third request gets 503 at
    once (not a wait), and once their deadline has passed the server answers again."""
    settings = slack_settings(slack_api, tmp_path / "f.db")
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    server = HttpServer(
        SlackFront(bot.app, signing_secret=SIGNING_SECRET, body_deadline=1.5), "127.0.0.1", 0, max_in_flight=2
    ).start()
    sender = SlackSender(server.url + "/slack/events", stand_in=slack_api)
    holders = []
    try:
        for i in range(2):
            sock = _connect(server.url)
            request = _signed(sender, f"diagnose ses_slow{i}")
            sock.sendall(request[:-5])  # the head and all but the last bytes of the body
            holders.append(sock)
        time.sleep(0.3)
        t0 = time.monotonic()
        with _connect(server.url) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
            assert _responses(_read_all(sock)) == [(503, b"busy\n")]
        assert time.monotonic() - t0 < 1.0
        for sock in holders:  # each is answered 408 at its body deadline, and its thread is free again
            assert [s for s, _ in _responses(_read_all(sock))] == [408]
        assert sender.command("cases").status_code == 200
    finally:
        for sock in holders:
            sock.close()
        sender.close()
        server.stop()
        bot.close()
    assert [c[1] for c in bot.router.calls] in ([], ["cases"])  # the held commands never ran


def test_stop_closes_idle_connections_and_answers_the_request_in_flight(slack_api, tmp_path) -> None:
    """Stopping the server: an idle keep-alive client sees the end of its stream, a request whose
    body is still arriving is answered once it is complete (then closed), and no socket is left open."""
    settings = slack_settings(slack_api, tmp_path / "s.db")
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    server = HttpServer(SlackFront(bot.app, signing_secret=SIGNING_SECRET), "127.0.0.1", 0).start()
    sender = SlackSender(server.url + "/slack/events", stand_in=slack_api)
    idle = _connect(server.url)
    idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
    assert idle.recv(1000).startswith(b"HTTP/1.1 200 ")
    busy = _connect(server.url)
    request = _signed(sender, "diagnose ses_during_stop")
    busy.sendall(request[:-5])
    time.sleep(0.3)
    server.stop()
    assert idle.recv(100) == b""  # closed by the server, not left hanging
    busy.sendall(request[-5:])
    answers = _responses(_read_all(busy))
    assert [s for s, _ in answers] == [200] and b"ses_during_stop" in answers[0][1]
    for sock in (idle, busy):
        sock.close()
    sender.close()
    bot.close()
    # The kernel's view: no socket on the server's port is still listening, open or half-closed.
    eventually(lambda: not _server_side_sockets(server.port), 5, "no server-side socket left on the port")
    assert _server_side_sockets(server.port) == []


def test_a_failure_while_answering_costs_one_connection_not_the_server(caplog) -> None:
    """A handler whose answer cannot even be written (a header that is not Latin-1) must not leave the
    connection open or the server stuck: the client sees the end of its stream, the next one is served."""

    class Broken:
        ready = threading.Event()

        def handle(self, request: Request) -> Response:
            if request.head.path == "/broken":
                return Response(200, b"x", [("x-note", "\u20ac")])
            return Response(200, b"fine\n")

    server = HttpServer(Broken(), "127.0.0.1", 0).start()  # type: ignore[arg-type]
    try:
        with _connect(server.url) as sock:
            sock.sendall(b"GET /broken HTTP/1.1\r\nHost: b\r\n\r\n")
            assert _read_all(sock) == b""  # closed at once, not left hanging until the client gives up
        with _connect(server.url) as sock:
            sock.sendall(b"GET /fine HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
            assert _responses(_read_all(sock)) == [(200, b"fine\n")]
        assert server.reactor.open == 0
    finally:
        server.stop()
    assert any("GET /broken failed" in r.getMessage() for r in caplog.records)


def _chunked_signed(sender: SlackSender, text: str, framing: str) -> bytes:
    """A signed command whose body is sent chunked, its one chunk framed as ``framing`` says."""
    request = _signed(sender, text)
    head, _, body = request.partition(b"\r\n\r\n")
    head = b"\r\n".join(line for line in head.split(b"\r\n") if not line.lower().startswith(b"content-length"))
    size = b"%x" % len(body)
    chunked = {
        "a bare LF inside a chunk extension": size + b";a\nxx\r\n" + body + b"\r\n0\r\n\r\n",
        "a chunk size with a leading space": b" " + size + b"\r\n" + body + b"\r\n0\r\n\r\n",
        "a trailer line with no colon": size + b"\r\n" + body + b"\r\n0\r\nno-colon-here\r\n\r\n",
        "a trailer whose name is not a token": size + b"\r\n" + body + b"\r\n0\r\nX Trailer: t\r\n\r\n",
    }[framing]
    return head + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked


FRAMINGS = [
    "a bare LF inside a chunk extension",
    "a chunk size with a leading space",
    "a trailer line with no colon",
    "a trailer whose name is not a token",
]


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_signed_chunked_body_framed_loosely_is_refused_and_what_follows_is_never_answered(
    harness: SlackHarness, framing: str
) -> None:
    """Request smuggling through the chunked coding: each of these lines a lenient reader takes (and
    a proxy may read another way) is a 400 and the end of the connection, although the command is
    signed; the request pipelined after it is never answered, and the command never runs."""
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n"
    with _connect(harness.server.url) as sock:
        sock.sendall(_chunked_signed(harness.send, "diagnose ses_smuggled", framing) + smuggled)
        answers = _responses(_read_all(sock))
    assert [s for s, _ in answers] == [400], answers
    harness.settle()
    assert harness.bot.router.calls == []
    # The same command framed plainly is served (the refusal was the framing, not the command).
    assert harness.send.command("diagnose ses_plain").status_code == 200


def test_what_h11_holds_unfinished_is_capped_and_a_refusal_never_echoes_much(harness: SlackHarness) -> None:
    """A head arriving in pieces past 16 KiB, and a chunk-size line that never ends, are refused with
    431 as soon as they pass the cap (not read on); a refusal's reason quotes at most 200 characters
    of what the client sent."""
    ts = str(int(time.time()))
    signed = f"X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: v0={'a' * 64}\r\n"
    with _connect(harness.server.url) as sock:
        sock.sendall(b"POST /slack/events HTTP/1.1\r\nHost: b\r\nX-Pad: " + b"p" * 10_000)
        time.sleep(0.2)  # a second read: h11 holds the unfinished head
        sock.sendall(b"p" * 10_000)
        assert _responses(_read_all(sock)) == [(431, b"request head over 16384 bytes\n")]
    with _connect(harness.server.url) as sock:
        sock.sendall(f"POST /slack/events HTTP/1.1\r\nHost: b\r\n{signed}Transfer-Encoding: chunked\r\n\r\n".encode())
        sock.sendall(b"5;" + b"e" * 20_000)
        answers = _responses(_read_all(sock))
    assert answers == [(431, b"a chunk-size line or the trailer section too long\n")]
    with _connect(harness.server.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n" + b"x" * 5_000 + b"\r\n\r\n")
        ((status, body),) = _responses(_read_all(sock))
    assert status == 400 and len(body) <= 201
    harness.settle()
    assert harness.bot.router.calls == []
