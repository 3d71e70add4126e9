"""The sandbox's request path: one HTTP request in, one :class:`Response` out, no sockets.

The public API's rules in their order: the traffic options (a per-client rate limit, latency), the
injected faults, bearer auth with scopes, routing, then the Idempotency-Key rule around every POST
(same key and body: the stored answer, no second effect). ``/_sandbox/`` goes to the admin API. All
state changes happen under the state's single lock; injected latency sleeps *outside* the lock so a
slow request never stalls the others.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bot.clock import isoformat
from bot.sandbox._admin_api import AdminApi
from bot.sandbox._faults import SHAPE_KINDS, Fault, FaultTable
from bot.sandbox._http import SID, Response, Route, err, int_param, json_or_text, match
from bot.sandbox._state import SandboxState
from bot.sandbox._traffic import Traffic, retry_after_headers
from bot.sandbox._wire import ApiError

log = logging.getLogger("bot.sandbox")

RECOVER_SCOPE = "sessions:recover"


def _repeat_sessions(response: Response) -> None:
    """A listing page with every session listed twice, as a proxy or cache that repeats entries might."""
    body = response.body
    if response.status == 200 and isinstance(body, dict) and isinstance(body.get("sessions"), list):
        response.body = {**body, "sessions": [s for s in body["sessions"] for _ in range(2)]}


PUBLIC_ROUTES: list[Route] = [
    ("GET", re.compile(r"^/v1/sessions$"), "list_sessions"),
    ("GET", re.compile(rf"^/v1/sessions/{SID}$"), "get_session"),
    ("GET", re.compile(rf"^/v1/sessions/{SID}/turns$"), "list_turns"),
    ("GET", re.compile(rf"^/v1/sessions/{SID}/turns/(?P<tid>[^/]+)$"), "get_turn"),
    ("GET", re.compile(rf"^/v1/sessions/{SID}/events$"), "list_events"),
    ("POST", re.compile(rf"^/v1/sessions/{SID}/recovery-decisions$"), "decide"),
    ("POST", re.compile(rf"^/v1/sessions/{SID}/resume$"), "resume"),
]


class SandboxApp:
    """Turns one HTTP request into a :class:`Response`. No sockets here; the handler does I/O."""

    def __init__(
        self,
        state: SandboxState,
        api_keys: Mapping[str, set[str]],
        advance: Callable[[float], None],
        traffic: Traffic | None = None,
    ) -> None:
        self.state = state
        self.traffic = traffic or Traffic()
        self.api_keys = {k: set(v) for k, v in api_keys.items()}
        self.faults = FaultTable()
        self.requests: deque[dict[str, Any]] = deque(maxlen=5000)  # GET /_sandbox/requests
        self.admin = AdminApi(state, self.faults, self.requests, self.traffic, advance)

    # ------------------------------------------------------------------ entry point

    def handle(
        self, method: str, target: str, headers: Mapping[str, str], raw: bytes, peer: str | None = None
    ) -> Response:
        parts = urlsplit(target)
        path = parts.path
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if path.startswith("/_sandbox/") or path == "/_sandbox":
            try:
                return self.admin.handle(method, path, query, raw)
            except Exception:  # a bug must answer 500, not leave the client without an answer
                log.exception("sandbox: unexpected error on admin %s %s", method, path)
                return err(500, "INTERNAL", "Unexpected sandbox error.")
        if path.startswith("/v1/"):
            return self._shaped(method, path, query, headers, raw, peer)
        return err(404, "NOT_FOUND", f"No route {path}.")

    # ------------------------------------------------------------------ public API

    def _take_faults(self, method: str, path: str) -> list[Fault]:
        with self.state.lock:
            return self.faults.take(method, path)

    def _auth(self, headers: Mapping[str, str]) -> set[str] | None:
        value = headers.get("Authorization") or headers.get("authorization") or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        found: set[str] | None = None
        for key, scopes in self.api_keys.items():
            # Compare against every key in constant time: no early exit on the first match.
            if hmac.compare_digest(key.encode(), token.strip().encode()):
                found = scopes
        return found

    def _shaped(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: Mapping[str, str],
        raw: bytes,
        peer: str | None,
    ) -> Response:
        """The traffic options: a per-client rate limit counted on arrival, then the latency, real time."""
        client = Traffic.client_of(headers.get("Authorization") or headers.get("authorization"), peer)
        wait = self.traffic.admit(client)
        if self.traffic.latency > 0:
            time.sleep(self.traffic.latency)  # outside the lock: other requests go on meanwhile
        if wait is not None:
            response = err(
                429,
                "RATE_LIMITED",
                "Too many requests from this client.",
                retryable=True,
                headers=retry_after_headers(wait),
            )
            with self.state.lock:
                self.requests.append(
                    {
                        "at": isoformat(datetime.now(UTC)),
                        "clock": isoformat(self.state.now()),
                        "method": method,
                        "path": path,
                        "query": query,
                        "idempotency_key": headers.get("Idempotency-Key") or headers.get("idempotency-key"),
                        "body": None,
                        "status": 429,
                        "dropped": False,
                        "faults": ["traffic_rate_limit"],
                    }
                )
            return response
        return self._public(method, path, query, headers, raw)

    def _public(
        self, method: str, path: str, query: dict[str, str], headers: Mapping[str, str], raw: bytes
    ) -> Response:
        key = headers.get("Idempotency-Key") or headers.get("idempotency-key")
        entry: dict[str, Any] = {
            "at": isoformat(datetime.now(UTC)),
            "clock": isoformat(self.state.now()),
            "method": method,
            "path": path,
            "query": query,
            "idempotency_key": key,
            "body": json_or_text(raw),
            "status": None,
            "dropped": False,
            "faults": [],
        }
        try:
            response = self._public_inner(method, path, query, headers, raw, key, entry)
        except Exception:  # a bug must answer 500, not kill the connection thread silently
            log.exception("sandbox: unexpected error on %s %s", method, path)
            response = err(500, "INTERNAL", "Unexpected sandbox error.", retryable=True)
        entry["status"] = None if response.drop else response.status
        entry["dropped"] = response.drop
        with self.state.lock:
            self.requests.append(entry)
        return response

    def _public_inner(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: Mapping[str, str],
        raw: bytes,
        key: str | None,
        entry: dict[str, Any],
    ) -> Response:
        faults = self._take_faults(method, path)
        entry["faults"] = [f.kind for f in faults]
        delay = sum(f.seconds for f in faults if f.kind == "latency")
        if delay > 0:
            time.sleep(delay)  # real time, outside the lock: clients' timeouts must trip
        limited = next((f for f in faults if f.kind == "rate_limit"), None)
        if limited:
            return err(
                429,
                "RATE_LIMITED",
                "Too many requests.",
                retryable=True,
                headers={"Retry-After": str(limited.retry_after)},
            )
        scopes = self._auth(headers)
        if scopes is None:
            return err(401, "UNAUTHORIZED", "Missing or wrong API key.")
        route = match(PUBLIC_ROUTES, method, path)
        if isinstance(route, Response):
            return route
        name, params = route
        if method == "POST" and RECOVER_SCOPE not in scopes:
            return err(403, "FORBIDDEN", f"The API key lacks the {RECOVER_SCOPE} scope.")
        failing = next((f for f in faults if f.kind == "server_error"), None)
        if failing:
            # Before the commit: nothing changes, nothing is stored under the key.
            return err(failing.status, "SERVER_ERROR", "Injected server error (before commit).", retryable=True)
        drop = any(f.kind == "drop_after_commit" for f in faults)
        after = next((f for f in faults if f.kind == "error_after_commit"), None)
        try:
            if method == "GET":
                response = self._get(name, params, query)
            else:
                response = self._post(name, params, path, headers, raw, key)
        except ApiError as exc:
            response = Response(exc.status, exc.body())
        if any(f.kind == "repeat_sessions" for f in faults):
            _repeat_sessions(response)
        if after:
            # After the commit: the effect and the stored receipt stay; only this answer is lost.
            response = err(after.status, "SERVER_ERROR", "Injected server error (after commit).", retryable=True)
        response.drop = drop
        response.shape = next((f for f in faults if f.kind in SHAPE_KINDS), None)
        return response

    def _get(self, name: str, params: dict[str, str], query: dict[str, str]) -> Response:
        limit = int_param(query, "limit", 100 if name == "list_events" else 50, 1, 1000)
        with self.state.lock:
            self.state.tick()
            if name == "list_sessions":
                return Response(
                    200,
                    self.state.list_sessions(
                        query.get("admission_state") or None,
                        query.get("status") or None,
                        query.get("cursor") or None,
                        limit,
                    ),
                )
            if name == "get_session":
                return Response(200, self.state.get(params["sid"]).to_json())
            if name == "list_turns":
                return Response(
                    200,
                    self.state.list_turns(
                        params["sid"], query.get("status") or None, query.get("cursor") or None, limit
                    ),
                )
            if name == "get_turn":
                return Response(200, self.state.get_turn(params["sid"], params["tid"]))
            after = int_param(query, "after", 0, 0, 1 << 62)
            return Response(200, self.state.list_events(params["sid"], after, limit))

    def _post(
        self,
        name: str,
        params: dict[str, str],
        path: str,
        headers: Mapping[str, str],
        raw: bytes,
        key: str | None,
    ) -> Response:
        if not key or len(key) > 255:
            raise ApiError(400, "BAD_REQUEST", "Every POST needs an Idempotency-Key header (1-255 characters).")
        content_type = (headers.get("Content-Type") or headers.get("content-type") or "").split(";")[0].strip()
        if raw.strip() and content_type != "application/json":
            raise ApiError(400, "BAD_REQUEST", "Content-Type must be application/json.")
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, "BAD_REQUEST", "The body is not valid JSON.") from exc
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        with self.state.lock:
            self.state.tick()
            record = self.state.replay(key, "POST", path, canonical)
            if record is not None:
                # Same key, same body: the original answer, no second effect.
                return Response(record.status, record.response, {"Idempotent-Replayed": "true"})
            sid = params["sid"]
            if name == "decide":
                status, result = 201, self.state.decide(sid, body, key)
            else:
                status, result = 200, self.state.resume(sid, body, key)
            # Only successful answers are stored under a key; errors raised above store nothing.
            self.state.remember(key, "POST", path, canonical, status, result, sid)
            return Response(status, result)
