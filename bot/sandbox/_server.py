"""The sandbox's HTTP layer: routing, bearer auth with scopes, the Idempotency-Key rule, faults, admin API.

A real concurrent server (``ThreadingHTTPServer``, HTTP/1.1 keep-alive) with a socket timeout per
connection and a clean shutdown that closes idle keep-alive connections too. Requests are decided in
:class:`SandboxApp` (no sockets), so the rules can be read in one place; all state changes happen
under the state's single lock. Injected latency sleeps *outside* the lock so a slow request never
stalls the others.
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import json
import logging
import random
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from bot.clock import isoformat
from bot.sandbox._schedule import ScheduleError
from bot.sandbox._state import SandboxState
from bot.sandbox._traffic import Traffic, retry_after_headers
from bot.sandbox._wire import AdminError, ApiError

log = logging.getLogger("bot.sandbox")

RECOVER_SCOPE = "sessions:recover"
MAX_BODY = 1 << 20
FAULT_KINDS = (
    "latency",
    "rate_limit",
    "server_error",
    "error_after_commit",
    "drop_after_commit",
    "dribble",
    "huge_body",
    "repeat_sessions",
)
# How an answer can be sent badly (hostile-host tests): slowly, or far too big.
SHAPE_KINDS = ("dribble", "huge_body")
DEFAULT_HUGE_BYTES = 300_000_000
_CHUNK = 64 * 1024


@dataclass
class Response:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # commit, then close the connection without answering
    shape: Fault | None = None  # dribble / huge_body: how the answer goes out


def _repeat_sessions(response: Response) -> None:
    """A listing page with every session listed twice, as a proxy or cache that repeats entries might."""
    body = response.body
    if response.status == 200 and isinstance(body, dict) and isinstance(body.get("sessions"), list):
        response.body = {**body, "sessions": [s for s in body["sessions"] for _ in range(2)]}


@dataclass
class Fault:
    """One injected fault on the public API (never on ``/_sandbox/``)."""

    id: str
    kind: str
    path: str = "*"  # fnmatch pattern on the path, e.g. /v1/sessions/*/recovery-decisions
    method: str | None = None
    times: int | None = 1  # None: until cleared
    seconds: float = 0.0  # latency
    retry_after: int = 1  # rate_limit
    status: int = 503  # server_error; error_after_commit defaults to 500
    rate: int = 4  # dribble: bytes per second
    size: int = DEFAULT_HUGE_BYTES  # huge_body: bytes of the answer
    length: bool = True  # huge_body: declare Content-Length (else the body ends when the connection closes)
    #: Real seconds the fault lasts from now (an outage of N seconds); None: until ``times`` runs out.
    for_seconds: float | None = None
    until: float | None = None  # time.monotonic() past which the fault no longer matches
    probability: float = 1.0  # of applying to each matching request (drawn from ``seed``: repeatable)
    seed: int = 1
    hits: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.until is not None and time.monotonic() >= self.until:
            return False
        if not ((self.method is None or self.method == method) and fnmatchcase(path, self.path)):
            return False
        return self.probability >= 1.0 or self._rng.random() < self.probability

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "path": self.path,
            "method": self.method,
            "times": self.times,
            "seconds": self.seconds,
            "retry_after": self.retry_after,
            "status": self.status,
            "rate": self.rate,
            "size": self.size,
            "length": self.length,
            "for_seconds": self.for_seconds,
            "remaining_seconds": None if self.until is None else round(max(0.0, self.until - time.monotonic()), 3),
            "probability": self.probability,
            "seed": self.seed,
            "hits": self.hits,
        }


def _err(
    status: int, code: str, message: str, *, retryable: bool = False, headers: dict[str, str] | None = None
) -> Response:
    return Response(status, ApiError(status, code, message, retryable=retryable).body(), headers or {})


_SID = r"(?P<sid>[^/]+)"
_PUBLIC_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("GET", re.compile(r"^/v1/sessions$"), "list_sessions"),
    ("GET", re.compile(rf"^/v1/sessions/{_SID}$"), "get_session"),
    ("GET", re.compile(rf"^/v1/sessions/{_SID}/turns$"), "list_turns"),
    ("GET", re.compile(rf"^/v1/sessions/{_SID}/turns/(?P<tid>[^/]+)$"), "get_turn"),
    ("GET", re.compile(rf"^/v1/sessions/{_SID}/events$"), "list_events"),
    ("POST", re.compile(rf"^/v1/sessions/{_SID}/recovery-decisions$"), "decide"),
    ("POST", re.compile(rf"^/v1/sessions/{_SID}/resume$"), "resume"),
]
_ADMIN_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("GET", re.compile(r"^/_sandbox/clock$"), "clock"),
    ("POST", re.compile(r"^/_sandbox/clock/advance$"), "advance"),
    ("POST", re.compile(r"^/_sandbox/scheduler/pass$"), "scheduler_pass"),
    ("GET", re.compile(r"^/_sandbox/effects$"), "effects"),
    ("GET", re.compile(r"^/_sandbox/faults$"), "list_faults"),
    ("POST", re.compile(r"^/_sandbox/faults$"), "add_fault"),
    ("DELETE", re.compile(r"^/_sandbox/faults$"), "clear_faults"),
    ("POST", re.compile(r"^/_sandbox/outage$"), "outage"),
    ("GET", re.compile(r"^/_sandbox/requests$"), "requests"),
    ("DELETE", re.compile(r"^/_sandbox/requests$"), "clear_requests"),
    ("GET", re.compile(r"^/_sandbox/idempotency$"), "idempotency"),
    ("GET", re.compile(r"^/_sandbox/scenarios$"), "scenarios"),
    ("POST", re.compile(r"^/_sandbox/scenarios/(?P<scenario>[^/]+)/load$"), "load_scenario"),
    ("POST", re.compile(r"^/_sandbox/reset$"), "reset"),
    ("GET", re.compile(r"^/_sandbox/incident$"), "get_incident"),
    ("POST", re.compile(r"^/_sandbox/incident$"), "incident"),
    ("GET", re.compile(r"^/_sandbox/schedule$"), "get_schedule"),
    ("POST", re.compile(r"^/_sandbox/schedule$"), "schedule"),
    ("DELETE", re.compile(r"^/_sandbox/schedule$"), "clear_schedule"),
    ("GET", re.compile(r"^/_sandbox/traffic$"), "get_traffic"),
    ("POST", re.compile(r"^/_sandbox/traffic$"), "traffic"),
    ("GET", re.compile(r"^/_sandbox/sessions$"), "admin_sessions"),
    ("POST", re.compile(r"^/_sandbox/sessions$"), "create_session"),
    ("GET", re.compile(rf"^/_sandbox/sessions/{_SID}$"), "admin_session"),
    ("GET", re.compile(rf"^/_sandbox/sessions/{_SID}/worker-logs$"), "worker_logs"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/fail-restore$"), "fail_restore"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/fail-startup$"), "fail_startup"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/worker-ready$"), "worker_ready"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/stop$"), "stop"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/settle$"), "settle"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/store-outage$"), "store_outage"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/reclamation$"), "reclamation"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/stray-workers$"), "stray_workers"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/worker-stop$"), "worker_stop"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/turns$"), "start_turn"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{_SID}/interrupt$"), "interrupt"),
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
        self._advance = advance
        self.faults: list[Fault] = []
        self._fault_ids = itertools.count(1)
        self.requests: deque[dict[str, Any]] = deque(maxlen=5000)

    # ------------------------------------------------------------------ entry point

    def handle(
        self, method: str, target: str, headers: Mapping[str, str], raw: bytes, peer: str | None = None
    ) -> Response:
        parts = urlsplit(target)
        path = parts.path
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if path.startswith("/_sandbox/") or path == "/_sandbox":
            try:
                return self._admin(method, path, query, raw)
            except Exception:  # a bug must answer 500, not leave the client without an answer
                log.exception("sandbox: unexpected error on admin %s %s", method, path)
                return _err(500, "INTERNAL", "Unexpected sandbox error.")
        if path.startswith("/v1/"):
            return self._shaped(method, path, query, headers, raw, peer)
        return _err(404, "NOT_FOUND", f"No route {path}.")

    # ------------------------------------------------------------------ public API

    def _take_faults(self, method: str, path: str) -> list[Fault]:
        with self.state.lock:
            taken = [f for f in self.faults if f.matches(method, path)]
            for fault in taken:
                fault.hits += 1
            return taken

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
            response = _err(
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
            "body": _json_or_text(raw),
            "status": None,
            "dropped": False,
            "faults": [],
        }
        try:
            response = self._public_inner(method, path, query, headers, raw, key, entry)
        except Exception:  # a bug must answer 500, not kill the connection thread silently
            log.exception("sandbox: unexpected error on %s %s", method, path)
            response = _err(500, "INTERNAL", "Unexpected sandbox error.", retryable=True)
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
            return _err(
                429,
                "RATE_LIMITED",
                "Too many requests.",
                retryable=True,
                headers={"Retry-After": str(limited.retry_after)},
            )
        scopes = self._auth(headers)
        if scopes is None:
            return _err(401, "UNAUTHORIZED", "Missing or wrong API key.")
        route = _match(_PUBLIC_ROUTES, method, path)
        if isinstance(route, Response):
            return route
        name, params = route
        if method == "POST" and RECOVER_SCOPE not in scopes:
            return _err(403, "FORBIDDEN", f"The API key lacks the {RECOVER_SCOPE} scope.")
        failing = next((f for f in faults if f.kind == "server_error"), None)
        if failing:
            # Before the commit: nothing changes, nothing is stored under the key.
            return _err(failing.status, "SERVER_ERROR", "Injected server error (before commit).", retryable=True)
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
            response = _err(after.status, "SERVER_ERROR", "Injected server error (after commit).", retryable=True)
        response.drop = drop
        response.shape = next((f for f in faults if f.kind in SHAPE_KINDS), None)
        return response

    def _get(self, name: str, params: dict[str, str], query: dict[str, str]) -> Response:
        limit = _int_param(query, "limit", 100 if name == "list_events" else 50, 1, 1000)
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
            after = _int_param(query, "after", 0, 0, 1 << 62)
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

    # ------------------------------------------------------------------ admin API

    def _admin(self, method: str, path: str, query: dict[str, str], raw: bytes) -> Response:
        route = _match(_ADMIN_ROUTES, method, path)
        if isinstance(route, Response):
            return route
        name, params = route
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError):
            return _err(400, "BAD_REQUEST", "The body is not valid JSON.")
        if not isinstance(body, dict):
            return _err(400, "BAD_REQUEST", "The body must be a JSON object.")
        try:
            with self.state.lock:
                if name != "advance":
                    self.state.tick()
                return Response(200, getattr(self, f"_admin_{name}")(params, query, body))
        except ApiError as exc:
            return Response(exc.status, exc.body())
        except (KeyError, TypeError, ValueError) as exc:
            return _err(400, "BAD_REQUEST", f"Bad admin request: {exc}")

    def _admin_clock(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return {"now": isoformat(self.state.now())}

    def _admin_advance(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        seconds = float(body["seconds"])
        if seconds < 0:
            raise AdminError(400, "BAD_REQUEST", "the clock only moves forward")
        self._advance(seconds)
        self.state.tick()
        return {"now": isoformat(self.state.now())}

    def _admin_scheduler_pass(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return self.state.scheduler_pass()

    def _admin_effects(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return self.state.effects.to_json(query.get("session_id"))

    def _admin_list_faults(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return {"faults": [f.to_json() for f in self.faults]}

    def _admin_add_fault(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        kind = body.get("kind")
        if kind not in FAULT_KINDS:
            raise AdminError(400, "BAD_REQUEST", f"kind must be one of {', '.join(FAULT_KINDS)}")
        times = body.get("times", 1)
        method = body.get("method")
        fault = Fault(
            id=f"fault_{next(self._fault_ids)}",
            kind=kind,
            path=str(body.get("path") or "*"),
            method=str(method).upper() if method else None,
            times=None if times is None else int(times),
            seconds=float(body.get("seconds") or (600.0 if kind == "dribble" else 0.0)),
            retry_after=int(body.get("retry_after", 1)),
            status=int(body.get("status", 500 if kind == "error_after_commit" else 503)),
            rate=int(body.get("rate", 4)),
            size=int(body.get("size", DEFAULT_HUGE_BYTES)),
            length=_bool(body, "length") if "length" in body else True,
            probability=float(body.get("probability", 1.0)),
            seed=int(body.get("seed", 1)),
        )
        if body.get("for_seconds") is not None:
            fault.for_seconds = float(body["for_seconds"])
            if fault.for_seconds <= 0:
                raise AdminError(400, "BAD_REQUEST", "for_seconds must be above 0 (real seconds the fault lasts)")
            fault.until = time.monotonic() + fault.for_seconds
        if not 0.0 < fault.probability <= 1.0:
            raise AdminError(400, "BAD_REQUEST", "probability must be above 0 and at most 1")
        if fault.kind == "dribble" and fault.rate < 1:
            raise AdminError(400, "BAD_REQUEST", "dribble needs rate >= 1 (bytes per second)")
        if fault.kind == "huge_body" and fault.size < 1:
            raise AdminError(400, "BAD_REQUEST", "huge_body needs size >= 1 (bytes)")
        if fault.kind in ("server_error", "error_after_commit") and not 500 <= fault.status <= 599:
            raise AdminError(400, "BAD_REQUEST", f"{fault.kind} status must be 5xx")
        if fault.kind == "latency" and fault.seconds <= 0:
            raise AdminError(400, "BAD_REQUEST", "latency needs seconds > 0")
        self.faults.append(fault)
        return fault.to_json()

    def _admin_outage(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        """This control host answers every public call with 429 (+ Retry-After) or a 5xx for ``seconds``
        of real time: one installation's outage, while the others answer as usual."""
        status = int(body.get("status", 503))
        seconds = body.get("seconds")
        if status != 429 and not 500 <= status <= 599:
            raise AdminError(400, "BAD_REQUEST", "status must be 429 or a 5xx")
        if not isinstance(seconds, int | float) or seconds <= 0:
            raise AdminError(400, "BAD_REQUEST", "seconds must be a number above 0 (real seconds the outage lasts)")
        fault: dict[str, Any] = {"path": "/v1/*", "times": None, "for_seconds": seconds}
        if status == 429:
            fault.update(kind="rate_limit", retry_after=int(body.get("retry_after", 1)))
        else:
            fault.update(kind="server_error", status=status)
        return self._admin_add_fault(params, query, fault)

    def _admin_clear_faults(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.faults.clear()
        return {"faults": []}

    def _admin_requests(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        sid = query.get("session_id")
        items = [r for r in self.requests if sid is None or f"/sessions/{sid}" in r["path"]]
        return {"requests": items}

    def _admin_clear_requests(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.requests.clear()
        return {"requests": []}

    def _admin_idempotency(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return self.state.idempotency.to_json(query.get("session_id"))

    def _admin_scenarios(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return {
            "scenarios": [
                {
                    "id": s.id,
                    "title": s.title,
                    "description": s.description,
                    "branch": s.branch,
                    "session_id": s.session_id,
                    "loaded": s.session_id in self.state.sessions,
                }
                for s in sorted(self.state.scenarios.values(), key=lambda s: s.id)
            ]
        }

    def _admin_load_scenario(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        session = self.state.load_scenario(unquote(params["scenario"]))
        return self.state.debug_session(session.id)

    def _admin_reset(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.reset()
        self.faults.clear()
        self.requests.clear()
        return {"sessions": sorted(self.state.sessions)}

    def _admin_get_incident(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        incident = self.state.incident
        return {"incident": incident.to_json(self.state.now()) if incident else None}

    def _admin_incident(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        count = body.get("count", 1000)
        if not isinstance(count, int) or isinstance(count, bool):
            raise AdminError(400, "BAD_REQUEST", "count must be an integer")
        incident = self.state.create_incident(
            count,
            outage_seconds=float(body.get("outage_seconds", 600)),
            seed=int(body.get("seed", 1)),
            prefix=str(body.get("prefix") or "ses_inc"),
            started_seconds=float(body.get("started_seconds", 900)),
        )
        return {"incident": incident.to_json(self.state.now())}

    def _admin_get_schedule(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return self.state.schedule.to_json()

    def _admin_schedule(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        try:
            added = self.state.schedule.add(self.state, body, self.state.now())
        except ScheduleError as exc:
            raise AdminError(400, "BAD_SCHEDULE", str(exc)) from None
        self.state.tick()  # what is due now happens now
        return {"planned": [p.to_json() for p in added], **self.state.schedule.to_json()}

    def _admin_clear_schedule(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.schedule.clear()
        return self.state.schedule.to_json()

    def _admin_get_traffic(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return self.traffic.to_json()

    def _admin_traffic(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        rate = body.get("rate_limit")
        burst = body.get("burst")
        try:
            self.traffic.configure(
                latency=float(body.get("latency_ms") or 0) / 1000,
                rate=None if rate is None else float(rate),
                burst=None if burst is None else float(burst),
            )
        except ValueError as exc:
            raise AdminError(400, "BAD_REQUEST", str(exc)) from None
        return self.traffic.to_json()

    def _admin_admin_sessions(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return {"sessions": [self.state.debug_session(sid) for sid in sorted(self.state.sessions)]}

    def _admin_create_session(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        session = self.state.create_session(body)
        return self.state.debug_session(session.id)

    def _admin_admin_session(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return self.state.debug_session(params["sid"])

    def _admin_worker_logs(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        session = self.state.get(params["sid"])
        return {
            "session_id": session.id,
            "lines": [line.to_json() for line in sorted(session.logs, key=lambda x: x.at)],
        }

    def _admin_fail_restore(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.fail_restore(params["sid"], str(body.get("reason") or "restore_refused"))
        return self.state.debug_session(params["sid"])

    def _admin_fail_startup(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        error = body.get("error")
        self.state.fail_startup(
            params["sid"], str(body.get("reason") or "startup_failed"), str(error) if error else None
        )
        return self.state.debug_session(params["sid"])

    def _admin_stop(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        failures = body.get("failures")
        if failures is not None and (not isinstance(failures, int) or isinstance(failures, bool) or failures < 0):
            raise AdminError(400, "BAD_FAILURES", "failures must be a whole number of 0 or more")
        reason = body.get("reason")
        self.state.stop(
            params["sid"], str(body.get("code") or "RESTORE_FAILED"), str(reason) if reason else None, failures
        )
        return self.state.debug_session(params["sid"])

    def _admin_settle(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.settle(params["sid"])
        return self.state.debug_session(params["sid"])

    def _admin_worker_ready(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.worker_ready(params["sid"])
        return self.state.debug_session(params["sid"])

    def _admin_store_outage(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.store_outage(params["sid"], _bool(body, "on"))
        return self.state.debug_session(params["sid"])

    def _admin_reclamation(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.reclamation(params["sid"], _bool(body, "held"))
        return self.state.debug_session(params["sid"])

    def _admin_stray_workers(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        count = body.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool):
            raise AdminError(400, "BAD_REQUEST", "count must be an integer")
        self.state.stray_workers(params["sid"], count)
        return self.state.debug_session(params["sid"])

    def _admin_worker_stop(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        kind = body.get("kind", "drain")
        if not isinstance(kind, str):
            raise AdminError(400, "BAD_REQUEST", "kind must be a string")
        self.state.worker_stop(params["sid"], kind, old_api=_bool({"old_api": body.get("old_api", False)}, "old_api"))
        return self.state.debug_session(params["sid"])

    def _admin_start_turn(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return self.state.start_turn(params["sid"], body.get("turn_id")).to_json()

    def _admin_interrupt(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        committed = body.get("checkpoint_committed", False)
        if not isinstance(committed, bool):
            raise AdminError(400, "BAD_REQUEST", "checkpoint_committed must be true or false")
        reason = body.get("terminal_reason", "interrupt_unanswered")
        turn = self.state.interrupt(params["sid"], reason, committed, body.get("turn_id"))
        return {"turn": turn.to_json(), "session": self.state.debug_session(params["sid"])}


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise AdminError(400, "BAD_REQUEST", f"{name} must be true or false")
    return value


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, "BAD_REQUEST", f"{name} must be an integer.") from None
    if not low <= value <= high:
        raise ApiError(400, "BAD_REQUEST", f"{name} must be between {low} and {high}.")
    return value


def _match(
    routes: list[tuple[str, re.Pattern[str], str]], method: str, path: str
) -> tuple[str, dict[str, str]] | Response:
    allowed: list[str] = []
    for route_method, pattern, name in routes:
        found = pattern.match(path)
        if not found:
            continue
        if route_method == method:
            return name, {k: unquote(v) for k, v in found.groupdict().items()}
        allowed.append(route_method)
    if allowed:
        return _err(
            405,
            "METHOD_NOT_ALLOWED",
            f"{method} is not allowed on {path}.",
            headers={"Allow": ", ".join(sorted(set(allowed)))},
        )
    return _err(404, "NOT_FOUND", f"No route {path}.")


def _json_or_text(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")[:2000]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "recover-bot-sandbox/1"
    # Headers and body go out in separate sends; without TCP_NODELAY the client's delayed ACK adds
    # ~40 ms to every answer (measured by the diagnose benchmark).
    disable_nagle_algorithm = True
    server: SandboxHTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def _serve(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._write(_err(413 if length > MAX_BODY else 400, "BAD_REQUEST", "Bad or too large Content-Length."))
            return
        raw = self.rfile.read(length) if length else b""
        response = self.server.app.handle(
            method, self.path, dict(self.headers.items()), raw, peer=str(self.client_address[0])
        )
        if response.drop:
            # The effect is committed; the client never hears about it.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._write(response)

    def _write(self, response: Response) -> None:
        payload = b"" if response.body is None else json.dumps(response.body).encode()
        if response.shape is not None:
            self.close_connection = True
            try:
                if response.shape.kind == "dribble":
                    self._dribble(response, payload, response.shape)
                else:
                    self._huge(response, payload, response.shape)
            except OSError:
                pass  # the client gave up (its cap or deadline): nothing more to send
            return
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (e.g. its timeout during an injected latency): nothing to answer.
            self.close_connection = True

    def _head(self, response: Response, length: int | None) -> bytes:
        lines = [f"HTTP/1.1 {response.status} {self.responses.get(response.status, ('',))[0]}"]
        lines.append("Content-Type: application/json")
        if length is not None:
            lines.append(f"Content-Length: {length}")
        lines.append("Connection: close")
        lines.extend(f"{name}: {value}" for name, value in response.headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _dribble(self, response: Response, payload: bytes, fault: Fault) -> None:
        """The whole answer (status line and headers included), ``rate`` bytes a second, padded so it
        lasts ``seconds``: each read gets a few bytes, so only a total deadline stops the client."""
        body = payload + b" " * max(0, int(fault.rate * fault.seconds) - len(payload))
        data = self._head(response, len(body)) + body
        step = max(1, fault.rate // 4)
        for offset in range(0, len(data), step):
            if self.server.stopping.wait(step / fault.rate):
                return
            self.connection.sendall(data[offset : offset + step])

    def _huge(self, response: Response, payload: bytes, fault: Fault) -> None:
        """The real answer with a ``_padding`` string making it ``size`` bytes, streamed (never built)."""
        if payload.endswith(b"}") and len(payload) > 2:
            prefix, suffix = payload[:-1] + b',"_padding":"', b'"}'
        else:
            prefix, suffix = b'{"_padding":"', b'"}'
        filler = max(0, fault.size - len(prefix) - len(suffix))
        self.connection.sendall(self._head(response, len(prefix) + filler + len(suffix) if fault.length else None))
        self.connection.sendall(prefix)
        block = b"x" * _CHUNK
        while filler > 0 and not self.server.stopping.is_set():
            n = min(filler, _CHUNK)
            self.connection.sendall(block[:n])
            filler -= n
        self.connection.sendall(suffix)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        # The request line never carries the Authorization header, so nothing secret is logged.
        log.debug("sandbox %s - %s", self.address_string(), format % args)


class SandboxHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its open connections, so stop() can close idle keep-alives."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, address: tuple[str, int], app: SandboxApp, *, request_timeout: float = 30.0) -> None:
        super().__init__(address, _Handler)
        self.app = app
        self.request_timeout = request_timeout
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.stopping = threading.Event()  # slow answers (dribble, huge_body) end when set

    def track(self, connection: socket.socket, opened: bool) -> None:
        with self._connections_lock:
            if opened:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        self.stopping.set()
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
