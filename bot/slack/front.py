"""The checks in front of Bolt: nothing unsigned is read past a size cap, nothing unverified is parsed.

Order of the checks on ``POST /slack/events``, on the thread that answers it (each refusal is a 4xx,
one log line and a closed connection, never a trace):

1. ``Content-Length`` over :data:`MAX_BODY` → 413 before a byte of the body is read.
2. ``X-Slack-Request-Timestamp`` not a number, or more than 5 minutes off → 401; ``X-Slack-Signature``
   missing or not shaped like ``v0=<hex>`` → 401. Still nothing read.
3. The body is read with a running count (chunked bodies have no length) and a total deadline: over
   the cap → 413, too slow → 408 (:mod:`bot.slack.httpbody`).
4. slack_sdk's ``SignatureVerifier`` over the raw bytes → 401 when it does not match.
   (A body that is not UTF-8 → 400: Slack never sends one, and the verifier needs text.)
5. Only now is the body parsed, by Bolt, on this same thread (no hop to another: see
   :mod:`bot.slack.httpd` for why). A body Bolt cannot parse → 400.

Bolt verifies the signature again; that second check is kept on purpose (one check must not depend
on the other being wired).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence

from slack_bolt import App, BoltRequest
from slack_sdk.signature import SignatureVerifier

from bot.slack.httpd import Request
from bot.slack.httpwire import Refused, RequestHead, Response, refusal

log = logging.getLogger("recover_bot.slack.front")

__all__ = ["EVENTS_PATH", "HEALTH_PATH", "MAX_BODY", "Refused", "SlackFront", "check_headers"]

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
MAX_BODY = 1024 * 1024  # Slack's payloads are a few KiB; 1 MiB is plenty.
BODY_DEADLINE = 10.0  # seconds to receive the whole body once the head is in
MAX_SKEW = 5 * 60  # Slack's replay window for a signed request
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")

Health = Callable[[], tuple[bool, list[str]]]


def check_headers(head: RequestHead, *, now: float, max_body: int = MAX_BODY) -> None:
    """Steps 1–2: what can be refused before the body is read."""
    if head.length > max_body:
        raise Refused(413, f"body of {head.length} bytes over the {max_body}-byte cap")
    timestamp = head.header("x-slack-request-timestamp")
    if timestamp is None or not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "missing or non-numeric X-Slack-Request-Timestamp")
    if abs(now - int(timestamp)) > MAX_SKEW:
        raise Refused(401, "X-Slack-Request-Timestamp more than 5 minutes off (a replay, or a wrong clock)")
    signature = head.header("x-slack-signature")
    if signature is None or not _SIGNATURE.fullmatch(signature):
        raise Refused(401, "missing or malformed X-Slack-Signature")


class SlackFront:
    """``POST /slack/events`` (checked as above, then Bolt) and ``GET /healthz``; 404 for the rest."""

    def __init__(
        self,
        app: App,
        *,
        signing_secret: str | None = None,
        path: str = EVENTS_PATH,
        max_body: int = MAX_BODY,
        body_deadline: float = BODY_DEADLINE,
        health: Health | None = None,
        events: bool = True,
    ) -> None:
        secret = signing_secret
        if events and not secret:
            raise ValueError("the HTTP front needs the signing secret (signing_secret=) to check requests")
        self.events = events  # False in Socket Mode: only /healthz is served
        self.app = app
        self.path = path
        self.verifier = SignatureVerifier(secret or "-")  # without a secret (events=False) never used
        self.max_body = max_body
        self.body_deadline = body_deadline
        self.health = health
        self.ready = threading.Event()  # set by the server while it accepts connections

    def handle(self, request: Request) -> Response:
        head = request.head
        if head.path == HEALTH_PATH and head.method in ("GET", "HEAD"):
            return self._healthz()
        if head.path != self.path or not self.events:
            return Response(404, b"not found\n")
        if head.method != "POST":
            return Response(405, b"method not allowed\n")
        try:
            text = self._checked_body(request)
            bolt_request = _bolt_request(head, text)
        except Refused as refused:
            log.warning("refused %s %s from %s: %s", head.method, head.path, request.client, refused.reason)
            return refusal(refused.status, refused.reason)
        answer = self.app.dispatch(bolt_request)
        headers = [
            (key, str(value))
            for key, values in answer.headers.items()
            for value in (values if isinstance(values, (list, tuple)) else [values])
        ]
        return Response(answer.status, answer.body.encode("utf-8"), headers)

    def _checked_body(self, request: Request) -> str:
        head = request.head
        check_headers(head, now=time.time(), max_body=self.max_body)
        raw = request.body.read(self.max_body, time.monotonic() + self.body_deadline)
        try:
            text = raw.decode("utf-8")  # Slack signs and sends UTF-8; the verifier would raise on the rest
        except UnicodeDecodeError:
            raise Refused(400, "body is not UTF-8") from None
        if not self.verifier.is_valid(text, head.header("x-slack-request-timestamp"), head.header("x-slack-signature")):
            raise Refused(401, "signature does not match the body")
        return text

    def _healthz(self) -> Response:
        ok = self.ready.is_set()
        lines = ["ok" if ok else "starting"]
        if self.health is not None:
            healthy, details = self.health()
            ok = ok and healthy
            lines = ["ok" if ok else ("starting" if not self.ready.is_set() else "degraded"), *details]
        return Response(200 if ok else 503, ("\n".join(lines) + "\n").encode())


def _bolt_request(head: RequestHead, text: str) -> BoltRequest:
    try:
        lists: dict[str, list[str]] = {}
        for key, value in head.headers:
            lists.setdefault(key, []).append(value)
        headers: dict[str, str | Sequence[str]] = dict(lists)
        return BoltRequest(body=text, query=head.query, headers=headers)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # A signed body that is not what Slack sends (bad JSON, bad payload=): say so, no trace.
        raise Refused(400, f"signed body Slack would not send ({type(exc).__name__})") from None
