"""The ASGI layer in front of Bolt: nothing unsigned is read past a size cap, nothing unverified is parsed.

Order of the checks on ``POST /slack/events`` (each refusal is a 4xx and one log line, never a trace):

1. ``Content-Length`` over :data:`MAX_BODY` → 413 before a byte of the body is read.
2. ``X-Slack-Request-Timestamp`` not a number, or more than 5 minutes off → 401; ``X-Slack-Signature``
   missing or not shaped like ``v0=<hex>`` → 401. Still nothing read.
3. The body is read with a running count (chunked bodies have no length) and a total deadline: over
   the cap → 413, too slow → 408.
4. slack_sdk's ``SignatureVerifier`` over the raw bytes → 401 when it does not match.
   (A body that is not UTF-8 → 400: Slack never sends one, and the verifier needs text.)
5. Only now is the body parsed, by Bolt (on a thread pool: Bolt's dispatch polls for the
   listener's ack and would otherwise hold the event loop). A body Bolt cannot parse → 400.

Bolt verifies the signature again; that second check is kept on purpose (one check must not depend
on the other being wired).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from slack_bolt import App, BoltRequest, BoltResponse
from slack_sdk.signature import SignatureVerifier

log = logging.getLogger("recover_bot.slack.front")

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
MAX_BODY = 1024 * 1024  # Slack's payloads are a few KiB; 1 MiB is plenty.
BODY_DEADLINE = 10.0  # seconds to receive the whole body once the headers are in
DRAIN_LIMIT = 64 * 1024  # a refused request's declared body up to this is read off before answering
DRAIN_DEADLINE = 1.0  # … within this many seconds
MAX_SKEW = 5 * 60  # Slack's replay window for a signed request
MAX_IN_FLIGHT = 256  # requests being read, checked or dispatched at once; 503 beyond
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Health = Callable[[], tuple[bool, list[str]]]


class Refused(Exception):
    """A request answered with a 4xx; ``reason`` goes into one log line."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.body_unread = False  # refused on its headers alone: the body is still on the socket


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def check_headers(headers: list[tuple[bytes, bytes]], *, now: float, max_body: int = MAX_BODY) -> None:
    """Steps 1–2: what can be refused before the body is read."""
    length = _header(headers, b"content-length")
    if length is not None and (not length.isdigit() or int(length) > max_body):
        raise Refused(413, f"body of {length[:20]} bytes over the {max_body}-byte cap")
    timestamp = _header(headers, b"x-slack-request-timestamp")
    if timestamp is None or not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "missing or non-numeric X-Slack-Request-Timestamp")
    if abs(now - int(timestamp)) > MAX_SKEW:
        raise Refused(401, "X-Slack-Request-Timestamp more than 5 minutes off (a replay, or a wrong clock)")
    signature = _header(headers, b"x-slack-signature")
    if signature is None or not _SIGNATURE.fullmatch(signature):
        raise Refused(401, "missing or malformed X-Slack-Signature")


async def _drain_small_body(scope: dict[str, Any], receive: Receive) -> None:
    """Take a small declared body off the socket before a refusal is answered.

    Closing a connection with unread bytes in its receive buffer makes the kernel send a reset, which
    can reach the client before the refusal does: a forged request would see "connection reset"
    instead of its 401. Only a declared length up to :data:`DRAIN_LIMIT` is drained, within
    :data:`DRAIN_DEADLINE`; anything larger or chunked is left unread (the caps above still hold).
    """
    length = _header(scope.get("headers") or [], b"content-length")
    if length is None or not length.isdigit() or int(length) > DRAIN_LIMIT:
        return

    async def pull() -> None:
        taken = 0
        while taken <= DRAIN_LIMIT:
            message = await receive()
            if message["type"] != "http.request":
                return
            taken += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(Exception):  # a client that stalls or leaves is answered all the same
        await asyncio.wait_for(pull(), timeout=DRAIN_DEADLINE)


async def read_body(receive: Receive, *, max_body: int = MAX_BODY, deadline: float = BODY_DEADLINE) -> bytes:
    """Step 3: the body, counted as it arrives (never more than ``max_body`` bytes held)."""
    chunks: list[bytes] = []
    size = 0

    async def pull() -> None:
        nonlocal size
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Refused(400, "client went away before the body was complete")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_body:
                raise Refused(413, f"body over the {max_body}-byte cap")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return

    try:
        await asyncio.wait_for(pull(), timeout=deadline)
    except TimeoutError:
        raise Refused(408, f"body not received within {deadline:.0f} s") from None
    return b"".join(chunks)


class RecoverAsgi:
    """``POST /slack/events`` (checked as above, then Bolt) and ``GET /healthz``; 404 for the rest."""

    def __init__(
        self,
        app: App,
        *,
        signing_secret: str | None = None,
        path: str = EVENTS_PATH,
        dispatch_threads: int = 64,
        max_body: int = MAX_BODY,
        body_deadline: float = BODY_DEADLINE,
        health: Health | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        events: bool = True,
    ) -> None:
        secret = signing_secret if signing_secret is not None else getattr(app, "_signing_secret", None)
        if events and not secret:
            raise ValueError("the HTTP front needs the app's signing secret to check requests")
        self.events = events  # False in Socket Mode: only /healthz is served
        self.app = app
        self.path = path
        self.verifier = SignatureVerifier(secret or "-")  # without a secret (events=False) never used
        self.max_body = max_body
        self.body_deadline = body_deadline
        self.health = health
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # touched on the event loop only
        self._pool = ThreadPoolExecutor(max_workers=dispatch_threads, thread_name_prefix="recover-dispatch")
        self.ready = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are not served here
        path, method = scope.get("path"), scope.get("method")
        if path == HEALTH_PATH and method in ("GET", "HEAD"):
            await self._healthz(send)
            return
        if path != self.path or not self.events:
            await _respond(send, 404, b"not found\n")
            return
        if method != "POST":
            await _respond(send, 405, b"method not allowed\n")
            return
        if self.in_flight >= self.max_in_flight:
            log.warning("refused a request: %d already in flight", self.in_flight)
            await _respond(send, 503, b"busy\n", close=True)
            return
        self.in_flight += 1
        try:
            raw = await self._checked_body(scope, receive)
            response = await self._dispatch(scope, raw)
        except Refused as refused:
            log.warning(
                "refused %s %s from %s: %s", method, path, _client(scope), refused.reason
            )
            if refused.body_unread:
                await _drain_small_body(scope, receive)
            await _respond(send, refused.status, f"{refused.reason}\n".encode(), close=True)
            return
        finally:
            self.in_flight -= 1
        await _respond(
            send, response.status, response.body.encode("utf-8"), headers=response.headers
        )

    async def _checked_body(self, scope: dict[str, Any], receive: Receive) -> str:
        headers = scope.get("headers") or []
        try:
            check_headers(headers, now=time.time(), max_body=self.max_body)
        except Refused as refused:
            refused.body_unread = True
            raise
        raw = await read_body(receive, max_body=self.max_body, deadline=self.body_deadline)
        try:
            text = raw.decode("utf-8")  # Slack signs and sends UTF-8; the verifier would raise on the rest
        except UnicodeDecodeError:
            raise Refused(400, "body is not UTF-8") from None
        if not self.verifier.is_valid(
            text,
            _header(headers, b"x-slack-request-timestamp"),
            _header(headers, b"x-slack-signature"),
        ):
            raise Refused(401, "signature does not match the body")
        return text

    async def _dispatch(self, scope: dict[str, Any], text: str) -> BoltResponse:
        try:
            query = (scope.get("query_string") or b"").decode("latin-1")
            lists: dict[str, list[str]] = {}
            for key, value in scope.get("headers") or []:
                lists.setdefault(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
            headers: dict[str, str | Sequence[str]] = dict(lists)
            request = BoltRequest(body=text, query=query, headers=headers)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # A signed body that is not what Slack sends (bad JSON, bad payload=): say so, no trace.
            raise Refused(400, f"signed body Slack would not send ({type(exc).__name__})") from None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.app.dispatch, request)

    async def _healthz(self, send: Send) -> None:
        ok = self.ready.is_set()
        lines = ["ok" if ok else "starting"]
        if self.health is not None:
            healthy, details = self.health()
            ok = ok and healthy
            lines = ["ok" if ok else ("starting" if not self.ready.is_set() else "degraded"), *details]
        await _respond(send, 200 if ok else 503, ("\n".join(lines) + "\n").encode())

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] == "lifespan.startup":
            self.ready.set()
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
        if message["type"] == "lifespan.shutdown":
            self.ready.clear()
            self._pool.shutdown(wait=False, cancel_futures=True)
            await send({"type": "lifespan.shutdown.complete"})


def _client(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    headers: Mapping[str, Any] | None = None,
    close: bool = False,
) -> None:
    raw: list[tuple[bytes, bytes]] = []
    for key, values in (headers or {}).items():
        for value in values if isinstance(values, (list, tuple)) else [values]:
            if key.lower() not in ("content-length", "connection"):
                raw.append((key.encode("latin-1"), str(value).encode("latin-1")))
    if not any(k.lower() == b"content-type" for k, _ in raw):
        raw.append((b"content-type", b"text/plain; charset=utf-8"))
    raw.append((b"content-length", str(len(body)).encode()))
    if close:
        # A refused request's unread body must not be taken for the next request on this connection.
        raw.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
