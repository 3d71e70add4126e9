"""HTTP/1.1 on the wire: a request head parsed strictly, a response written in one piece.

Why strict: this server stands in front of signed requests, so anything a proxy and this server could
read two ways (two different lengths, a length beside ``chunked``, a folded header, a control byte in
a value) is a 400, never a guess (request smuggling). Slack sends plain HTTP/1.1 with a
``Content-Length``; everything here is what that needs, and no more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http import HTTPStatus

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"/[\x21-\x7e]*")
_VERSION = re.compile(rb"HTTP/1\.[01]")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_DIGITS = re.compile(r"[0-9]{1,18}")


class Refused(Exception):
    """A request answered with a 4xx/5xx and closed; ``reason`` goes into one log line and the body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class RequestHead:
    """The request line and headers (names lower-cased, values latin-1, surrounding spaces stripped)."""

    method: str
    path: str
    query: str
    version: str
    headers: tuple[tuple[str, str], ...]
    #: The body's framing, checked at parse time: a length (0 when there is no body) or chunked.
    length: int = 0
    chunked: bool = False

    def header(self, name: str) -> str | None:
        """The first value of ``name`` (lower-case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def keep_alive(self) -> bool:
        """HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 is closed after one answer."""
        tokens = {t.strip().lower() for t in (self.header("connection") or "").split(",")}
        return self.version == "HTTP/1.1" and "close" not in tokens

    @property
    def expects_continue(self) -> bool:
        return (self.header("expect") or "").lower() == "100-continue"


@dataclass
class Response:
    """What a handler answers; ``close`` ends the connection after it (every refusal does)."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False


def parse_head(raw: bytes) -> RequestHead:
    """Parse the bytes before the blank line; :class:`Refused` (400, 501, 505) for anything unclear."""
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise Refused(400, "malformed request line")
    method, target, version = parts
    if not _VERSION.fullmatch(version):
        raise Refused(505 if version.startswith(b"HTTP/") else 400, "only HTTP/1.0 and HTTP/1.1 are served")
    if not _TARGET.fullmatch(target):
        raise Refused(400, "request target is not a path")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise Refused(400, "malformed header line (or a folded one)")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise Refused(400, "control character in a header value")
        headers.append((name.decode("ascii").lower(), value.decode("latin-1")))
    if version == b"HTTP/1.1" and sum(1 for k, _ in headers if k == "host") != 1:
        raise Refused(400, "an HTTP/1.1 request needs exactly one Host header")
    path, _, query = target.decode("ascii").partition("?")
    length, chunked = _framing(headers)
    return RequestHead(
        method=method.decode("ascii"), path=path, query=query, version=version.decode("ascii"),
        headers=tuple(headers), length=length, chunked=chunked,
    )


def _framing(headers: list[tuple[str, str]]) -> tuple[int, bool]:
    lengths = {v for k, v in headers if k == "content-length"}
    codings = [v for k, v in headers if k == "transfer-encoding"]
    if codings:
        if lengths:
            raise Refused(400, "both Content-Length and Transfer-Encoding")
        if [c.strip().lower() for c in codings] != ["chunked"]:
            raise Refused(501, "only the chunked transfer coding is served")
        return 0, True
    if not lengths:
        return 0, False
    if len(lengths) > 1:
        raise Refused(400, "conflicting Content-Length headers")
    (length,) = lengths
    if not _DIGITS.fullmatch(length):
        raise Refused(400, "Content-Length is not a number")
    return int(length), False


def response_bytes(response: Response, *, head_only: bool = False) -> bytes:
    """The whole answer in one buffer (one ``sendall``): status line, headers, length, body."""
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    names = set()
    for key, value in response.headers:
        if key.lower() in ("content-length", "connection", "transfer-encoding"):
            continue
        if "\r" in key or "\n" in key or "\r" in value or "\n" in value:
            continue  # never let a value split the answer
        names.add(key.lower())
        lines.append(f"{key}: {value}")
    if "content-type" not in names:
        lines.append("content-type: text/plain; charset=utf-8")
    lines.append(f"content-length: {len(response.body)}")
    if response.close:
        lines.append("connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


def refusal(status: int, reason: str) -> Response:
    """A refusal: the reason as a one-line body, the connection closed after it."""
    return Response(status, f"{reason}\n".encode(), close=True)
