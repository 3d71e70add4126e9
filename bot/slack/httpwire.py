"""HTTP/1.1 on the wire: h11 frames every request; here only what h11 leaves to its user.

Why strict: this server stands in front of signed requests, so anything a proxy and this server could
read two ways (two different lengths, a length beside ``chunked``, a folded header, a control byte in
a value, a chunk line with stray bytes) is a 4xx, never a guess (request smuggling). h11 reads the
request line, the headers, the body (by length or chunked, with its trailers), ``Expect:
100-continue``, keep-alive and what is left for the next request, and refuses what the RFC forbids.
It is lenient, on purpose, where this server is not; those checks are here (:func:`request_head`):

- a line ended by a bare LF, and a folded header line (h11 reads them; a proxy may not) → 400;
- a control byte in a header value (h11 takes any but NUL and white space) → 400;
- a request target that is not a path (absolute-form, ``*``) → 400;
- any version but HTTP/1.0 and HTTP/1.1 → 505;
- ``Content-Length`` beside ``Transfer-Encoding`` (h11 lets the coding win) → 400;
- a ``Content-Length`` of more than 18 digits → 400.

An empty line before a request line is a 400 too (h11's reading; the former parser skipped it, and
neither Slack nor a reverse proxy sends one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http import HTTPStatus

import h11

_TARGET = re.compile(rb"/[\x21-\x7e]*")
_BARE_LF = re.compile(rb"(?<!\r)\n")
_FOLD = re.compile(rb"\n[ \t]")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
MAX_LENGTH_DIGITS = 18
MAX_REASON = 200  # characters of a refusal's reason (a log line and the answer's body)
_DROPPED = frozenset({"content-length", "connection", "transfer-encoding"})


class Refused(Exception):
    """A request answered with a 4xx/5xx and closed; ``reason`` goes into one log line and the body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    @classmethod
    def of(cls, error: h11.ProtocolError, *, too_long: str) -> Refused:
        """What h11 refused, with the status it suggests (400, 431, 501). ``too_long`` says what was
        over the size limit (h11's words name its buffer); other reasons are h11's, cut short, since
        they quote the client's bytes."""
        status = error.error_status_hint
        reason = too_long if status == 431 else (str(error) or "malformed request")[:MAX_REASON]
        return cls(status, reason)


@dataclass(frozen=True)
class RequestHead:
    """The request line and headers (names lower-cased, values latin-1, surrounding spaces stripped)."""

    method: str
    path: str
    query: str
    version: str
    headers: tuple[tuple[str, str], ...]
    #: The body's framing as h11 reads it: a length (0 when there is no body) or chunked.
    length: int = 0
    chunked: bool = False

    def header(self, name: str) -> str | None:
        """The first value of ``name`` (lower-case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass
class Response:
    """What a handler answers; ``close`` ends the connection after it (every refusal does)."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False


def connection(max_header_bytes: int) -> h11.Connection:
    """One connection's framing state; an unfinished head (or chunk line) over the limit is a 431."""
    return h11.Connection(h11.SERVER, max_incomplete_event_size=max_header_bytes)


def request_head(event: h11.Request, raw: bytes) -> RequestHead:
    """A head h11 accepted, checked for what h11 allows and this server does not (see above).

    ``raw`` is the head as it came off the wire, up to and including its blank line.
    """
    if _BARE_LF.search(raw):
        raise Refused(400, "a line of the request head ends in a bare LF")
    if _FOLD.search(raw):
        raise Refused(400, "malformed header line (or a folded one)")
    if event.http_version not in (b"1.0", b"1.1"):
        raise Refused(505, "only HTTP/1.0 and HTTP/1.1 are served")
    if not _TARGET.fullmatch(event.target):
        raise Refused(400, "request target is not a path")
    headers = tuple((name.decode("ascii"), value.decode("latin-1")) for name, value in event.headers)
    if any(_CONTROL.search(value) for _, value in headers):
        raise Refused(400, "control character in a header value")
    names = {name for name, _ in headers}
    if "content-length" in names and "transfer-encoding" in names:
        raise Refused(400, "both Content-Length and Transfer-Encoding")
    length = next((value for name, value in headers if name == "content-length"), "0")
    if len(length) > MAX_LENGTH_DIGITS:
        raise Refused(400, "Content-Length is not a number this server reads")
    path, _, query = event.target.decode("ascii").partition("?")
    return RequestHead(
        method=event.method.decode("ascii"),
        path=path,
        query=query,
        version="HTTP/" + event.http_version.decode("ascii"),
        headers=headers,
        length=int(length),
        chunked="transfer-encoding" in names,
    )


def parse_head(raw: bytes) -> RequestHead:
    """The bytes before the blank line read as a head (h11, then :func:`request_head`), or :class:`Refused`."""
    wire = connection(len(raw) + 4)
    wire.receive_data(raw + b"\r\n\r\n")
    try:
        event = wire.next_event()
    except h11.RemoteProtocolError as error:
        raise Refused.of(error, too_long="request head too long") from None
    if not isinstance(event, h11.Request) or wire.trailing_data[0]:
        raise Refused(400, "malformed header line (or a blank one inside the head)")
    return request_head(event, raw + b"\r\n\r\n")


def response_bytes(wire: h11.Connection, response: Response, *, head_only: bool = False) -> bytes:
    """The whole answer, framed by h11, in one buffer (one ``sendall``).

    What h11 does not do: a header that would split the answer is dropped (h11 would raise), the
    handler's own framing headers give way to the length of the body, and a plain-text type is the
    default. ``head_only`` (a HEAD request): the length of the body, not the body.
    """
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    headers: list[tuple[str, str]] = []
    for key, value in response.headers:
        if key.lower() in _DROPPED or "\r" in key or "\n" in key or "\r" in value or "\n" in value:
            continue  # never let a value split the answer
        headers.append((key, value))
    if not any(key.lower() == "content-type" for key, _ in headers):
        headers.append(("content-type", "text/plain; charset=utf-8"))
    headers.append(("content-length", str(len(response.body))))
    if response.close:
        headers.append(("connection", "close"))
    out = wire.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b""
    if not head_only and response.body:
        out += wire.send(h11.Data(data=response.body)) or b""
    return out + (wire.send(h11.EndOfMessage()) or b"")


def refusal(status: int, reason: str) -> Response:
    """A refusal: the reason as a one-line body, the connection closed after it."""
    return Response(status, f"{reason}\n".encode(), close=True)
