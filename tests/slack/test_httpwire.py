"""The request-head parser and the server under arbitrary bytes (hypothesis).

What must hold for anything a client can send: the parser answers with a head or a :class:`Refused`
(never another exception, which would be a 500 and a trace), a head it accepts is read one way only,
and the server keeps serving after any of it.
"""

from __future__ import annotations

import logging
import socket
import string
import time
import urllib.parse

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.slack.httpbody import BodyReader
from bot.slack.httpwire import Refused, connection, parse_head, request_head
from tests.fixtures.slack import SlackHarness
from tests.slack.fake_router import FakeRouter

TOKEN = st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=20)
VALUE = st.text(
    alphabet=string.printable.replace("\r", "").replace("\n", "").replace("\x0b", "").replace("\x0c", ""), max_size=40
)


@given(
    st.one_of(
        st.binary(max_size=600),
        st.builds(lambda rest: b"POST /slack/events HTTP/1.1\r\nHost: b\r\n" + rest, st.binary(max_size=300)),
        st.builds(
            lambda name, value: b"GET / HTTP/1.1\r\nHost: b\r\n" + name + b": " + value,
            st.binary(min_size=1, max_size=20),
            st.binary(max_size=20),
        ),
    )
)
@settings(max_examples=600)
def test_any_bytes_give_a_head_or_a_refusal(raw: bytes) -> None:
    try:
        head = parse_head(raw)
    except Refused as refused:
        assert 400 <= refused.status < 600 and refused.reason
        return
    assert head.path.startswith("/") and head.version in ("HTTP/1.0", "HTTP/1.1")
    assert head.length >= 0 and not (head.chunked and head.length)


@given(
    method=st.sampled_from(["GET", "POST", "HEAD", "PUT"]),
    path=st.text(alphabet=string.ascii_letters + string.digits + "/_-.", max_size=30),
    query=st.text(alphabet=string.ascii_letters + "=&", max_size=20),
    headers=st.lists(st.tuples(TOKEN, VALUE), max_size=8),
)
def test_a_well_formed_head_is_read_back_as_sent(method: str, path: str, query: str, headers: list) -> None:
    headers = [(k, v) for k, v in headers if k.lower() not in ("content-length", "transfer-encoding", "host")]
    lines = [f"{method} /{path}{'?' + query if query else ''} HTTP/1.1", "Host: bot"]
    lines += [f"{k}: {v}" for k, v in headers]
    head = parse_head("\r\n".join(lines).encode("latin-1"))
    assert (head.method, head.path, head.query) == (method, "/" + path, query)
    assert head.headers[1:] == tuple((k.lower(), v.strip(" \t")) for k, v in headers)
    assert head.length == 0 and not head.chunked


@given(
    lengths=st.lists(st.sampled_from(["0", "5", "12", "+5", "5 ", "0x5", "-1", "99999999999999999999"]), max_size=3),
    codings=st.lists(st.sampled_from(["chunked", "Chunked", "gzip", "chunked, gzip", "identity"]), max_size=2),
)
def test_framing_is_one_reading_or_a_refusal(lengths: list[str], codings: list[str]) -> None:
    """Request smuggling: whenever two readers could disagree on where the body ends, it is refused."""
    lines = ["POST /slack/events HTTP/1.1", "Host: bot"]
    lines += [f"Content-Length: {v}" for v in lengths] + [f"Transfer-Encoding: {v}" for v in codings]
    try:
        head = parse_head("\r\n".join(lines).encode())
    except Refused:
        return
    stripped = {v.strip() for v in lengths}
    if codings:
        assert not lengths and [c.lower() for c in codings] == ["chunked"] and head.chunked
    else:
        assert len(stripped) <= 1 and all(v.isdigit() and len(v) < 19 for v in stripped)
        assert head.length == (int(next(iter(stripped))) if stripped else 0)


@pytest.fixture
def live(slack_harness) -> SlackHarness:
    h: SlackHarness = slack_harness(FakeRouter())
    return h


PREFIXES = [
    b"",
    b"GET /healthz HTTP/1.1\r\nHost: b\r\n",
    b"POST /slack/events HTTP/1.1\r\nHost: b\r\nContent-Length: 40\r\n",
    b"POST /slack/events HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n"
    b"X-Slack-Request-Timestamp: 0\r\nX-Slack-Signature: v0=" + b"0" * 64 + b"\r\n",
]
PAYLOADS = st.builds(
    lambda prefix, middle, end, rest: prefix + middle + end + rest,
    st.sampled_from(PREFIXES),
    st.binary(max_size=1000),
    st.sampled_from([b"", b"\r\n\r\n", b"\r\n"]),
    st.binary(max_size=1000),
).filter(bool)


@given(PAYLOADS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_server_survives_any_bytes(live: SlackHarness, caplog: pytest.LogCaptureFixture, payload: bytes) -> None:
    caplog.set_level(logging.WARNING)
    parsed = urllib.parse.urlparse(live.server.url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=5) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)  # the client is done: whatever was incomplete ends here
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass  # the server refused and closed with bytes unread
    if answer:
        assert answer.startswith(b"HTTP/1.1 ") and int(answer[9:12]) < 600
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert httpx.get(live.server.url + "/healthz", timeout=5).status_code == 200
    assert live.bot.router.calls == []  # nothing unsigned reached the app


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /healthz HTTP/1.1\nHost: b",  # a bare LF ends the request line (h11 reads it)
        b"GET /healthz HTTP/1.1\r\nHost: b\nX-A: 1",  # ... or a header line
        b"GET /healthz HTTP/1.1\r\nHost: b\r\nX-A: 1\r\n\tfolded",  # a folded line (h11 joins it)
        b"GET /healthz HTTP/1.1\r\nHost: b\r\nX-A: a\x7fb",  # a control byte in a value (h11 takes it)
        b"GET http://evil/healthz HTTP/1.1\r\nHost: b",  # absolute-form (h11 takes any target)
        b"POST /slack/events HTTP/1.1\r\nHost: b\r\nContent-Length: 3\r\nTransfer-Encoding: chunked",
        b"POST /slack/events HTTP/1.1\r\nHost: b\r\nContent-Length: 1234567890123456789",  # 19 digits
    ],
)
def test_what_h11_allows_and_this_server_does_not_is_a_400(raw: bytes) -> None:
    with pytest.raises(Refused) as info:
        parse_head(raw)
    assert info.value.status == 400, info.value.reason


@pytest.mark.subprocess
def test_only_http_1_0_and_1_1_are_served() -> None:
    with pytest.raises(Refused) as info:
        parse_head(b"GET /healthz HTTP/2.0\r\nHost: b")
    assert info.value.status == 505
    assert parse_head(b"GET /healthz HTTP/1.0").version == "HTTP/1.0"


CHUNKED_HEAD = b"POST /slack/events HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n"
PIECES = st.sampled_from(
    [
        b"\r\n",
        b"\r",
        b"\n",
        b" ",
        b"\t",
        b":",
        b";",
        b"=",
        b"a",
        b"0",
        b"5",
        b"f",
        b"10",
        b"\x00",
        b"\xff",
        b"xxxxx",
        b"X-T: v",
    ]
)


@given(st.lists(PIECES, max_size=40).map(b"".join))
@settings(max_examples=300, deadline=None)
def test_any_bytes_after_a_chunked_head_give_a_body_or_a_refusal(body: bytes) -> None:
    """The body as h11 reads it (within the cap) or a :class:`Refused`, never another exception."""
    ours, theirs = socket.socketpair()
    try:
        wire = connection(16 * 1024)
        wire.receive_data(CHUNKED_HEAD)
        head = request_head(wire.next_event(), CHUNKED_HEAD)
        theirs.sendall(body)
        theirs.shutdown(socket.SHUT_WR)
        try:
            assert len(BodyReader(ours, wire, head).read(1000, time.monotonic() + 5)) <= 1000
        except Refused as refused:
            assert 400 <= refused.status < 600 and refused.reason
    finally:
        ours.close()
        theirs.close()
