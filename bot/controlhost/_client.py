"""The control host's HTTP client (httpx) and the Idempotency-Key rule.

GETs are safe to repeat: transport errors, 408/429 (Retry-After honoured) and 5xx are retried with
backoff. POSTs change things, so each logical request is first committed to the store (key + exact
body text) and only then sent; an uncertain outcome is retried with the same key and body, a
definite answer (2xx or 4xx) is recorded and ends the request. After a crash the store still holds
every request whose answer never arrived, and whoever finishes it calls :meth:`ControlHostClient.send`
with the stored record: its key and body, never new ones. :meth:`ControlHostClient.begin` and
:meth:`ControlHostClient.send` are the only way a POST is made.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from sqlite_utils import Database

from bot.clock import Clock, SystemClock
from bot.controlhost._deadline import deadline_in, deadline_transport, remaining
from bot.controlhost._errors import (
    RequestPendingError,
    answer_too_large,
    bad_response,
    check_id,
    deadline_passed,
    error_from_exception,
    error_from_response,
    is_uncertain_status,
)
from bot.controlhost._fields import FieldNames, canonical
from bot.controlhost._identity import HostIdentity
from bot.controlhost._listing import SessionListing
from bot.controlhost._models import EventPage, Receipt, Session, SessionPage, Turn
from bot.controlhost._permit import Permit
from bot.controlhost._retry import RetryPolicy, parse_retry_after
from bot.errors import ControlHostError
from bot.redact import register_secret
from bot.store import IdempotencyRecord, Store

log = logging.getLogger("bot.controlhost")

PURPOSE_DECISION = "recovery_decision"
PURPOSE_RESUME = "resume"
_MAX_PAGES = 1000
# The largest answer read (a page of 1,000 sessions is about 0.5 MB); a bigger one is refused while it
# streams, never held whole in memory.
DEFAULT_MAX_ANSWER_BYTES = 4 * 1024 * 1024
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class ReplayResult:
    """What re-sending one stored request gave: a receipt, or the error that ended (or kept) it."""

    record: IdempotencyRecord
    receipt: Receipt | None = None
    error: ControlHostError | None = None

    @property
    def still_pending(self) -> bool:
        return isinstance(self.error, RequestPendingError)


@dataclass(frozen=True)
class ApiPaths:
    """Where the API's resources live. The paths are [assumed] on docs/control-host-api.md, so they are data:
    the runbook's ``api:`` section overrides them without code changes. ``{session_id}`` and
    ``{turn_id}`` are filled with ids already checked against the id pattern."""

    session: str = "/v1/sessions/{session_id}"
    sessions: str = "/v1/sessions"
    turns: str = "/v1/sessions/{session_id}/turns"
    turn: str = "/v1/sessions/{session_id}/turns/{turn_id}"
    events: str = "/v1/sessions/{session_id}/events"
    resume: str = "/v1/sessions/{session_id}/resume"
    decisions: str = "/v1/sessions/{session_id}/recovery-decisions"


class ControlHostClient:
    """Typed client of the control host's API. Thread-safe (httpx.Client is; the store is)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        store: Store,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
        clock: Clock | None = None,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        paths: ApiPaths | None = None,
        fields: FieldNames | None = None,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        """``timeout`` is each request's total deadline (connect, headers and body together, not per
        read); a caller's own deadline (``deadline_in``/``deadline_at``, e.g. diagnose's budget) bounds
        a whole call, retries included. ``max_answer_bytes`` caps an answer's size."""
        self.paths = paths or ApiPaths()
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        self.fields: FieldNames = fields or {}
        register_secret(api_key)  # masked wherever text leaves the process
        self.base_url = base_url.rstrip("/")
        #: The host this client sends to (base URL, key fingerprint): the gate compares the store's binding with it.
        self.identity = HostIdentity.of(self.base_url, api_key)
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.retry = retry or RetryPolicy()
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not security
        # Per key: True while an attempt's answer is missing (on the wire, timed out, a 5xx); False after
        # a definite answer or a 503 BACKEND_UNAVAILABLE on a resume, which keeps nothing (R4.2).
        self._in_doubt: dict[str, bool] = {}
        self._http = httpx.Client(
            base_url=self.base_url,
            transport=transport if transport is not None else deadline_transport(self.base_url),
            timeout=httpx.Timeout(timeout),
            headers={
                "Authorization": f"Bearer {api_key}",
                "Accept": "application/json",
                # Compressed answers could expand past the size cap inside one read: ask for none.
                "Accept-Encoding": "identity",
            },
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"ControlHostClient({self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControlHostClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------------

    def get_session(self, session_id: str) -> Session:
        sid = check_id(session_id, "session id")
        data = self._get(self.paths.session.format(session_id=sid), what=f"reading session {sid}")
        return Session.parse(canonical("session", data, self.fields), fallback_id=sid)

    def list_sessions_needing_operator(self, cursor: str | None = None, *, limit: int | None = None) -> SessionPage:
        """One page of sessions with ``admission_state=recovery_required`` (follow ``next``);
        ``limit`` asks for a page size (an API may ignore it)."""
        params: dict[str, Any] = {"admission_state": "recovery_required"}
        if cursor:
            params["cursor"] = cursor
        if limit:
            params["limit"] = limit
        data = self._get(self.paths.sessions, params=params, what="listing sessions")
        if isinstance(data, dict) and isinstance(data.get("sessions"), list):
            data = {**data, "sessions": [canonical("session", s, self.fields) for s in data["sessions"]]}
        return SessionPage.parse(data)

    def listing(self, *, limit: int | None = None, max_pages: int = 10_000) -> SessionListing:
        """One walk over every page of sessions needing an operator, each session once (a repeated id is
        dropped, counted and logged): what triage, watch and batches read the listing through."""

        def fetch(cursor: str | None, size: int | None) -> SessionPage:
            return self.list_sessions_needing_operator(cursor, limit=size)

        return SessionListing(fetch, limit=limit, max_pages=max_pages)

    def iter_sessions_needing_operator(self) -> Iterator[Session]:
        """Every session needing an operator, across pages, each once."""
        for sessions in self.listing(max_pages=_MAX_PAGES):
            yield from sessions

    def list_turns(self, session_id: str, status: str | None = None) -> list[Turn]:
        """Turns of a session, newest first (all pages)."""
        sid = check_id(session_id, "session id")
        turns: list[Turn] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = {}
            if status:
                params["status"] = status
            if cursor:
                params["cursor"] = cursor
            data = self._get(self.paths.turns.format(session_id=sid), params=params, what=f"listing turns of {sid}")
            items = data.get("turns") if isinstance(data, dict) else None
            if isinstance(items, list):
                turns.extend(Turn.parse(canonical("turn", t, self.fields)) for t in items if isinstance(t, dict))
            nxt = data.get("next") if isinstance(data, dict) else None
            if not isinstance(nxt, str) or not nxt or nxt == cursor:
                break
            cursor = nxt
        return turns

    def get_turn(self, session_id: str, turn_id: str) -> Turn:
        sid = check_id(session_id, "session id")
        tid = check_id(turn_id, "turn id")
        data = self._get(self.paths.turn.format(session_id=sid, turn_id=tid), what=f"reading turn {tid} of {sid}")
        return Turn.parse(canonical("turn", data, self.fields), fallback_id=tid)

    def list_events(self, session_id: str, after: int | None = None) -> EventPage:
        sid = check_id(session_id, "session id")
        params: dict[str, Any] = {}
        if after is not None:
            if isinstance(after, bool) or not isinstance(after, int) or after < 0:
                raise ValueError("after must be a non-negative event seq")
            params["after"] = after
        data = self._get(self.paths.events.format(session_id=sid), params=params, what=f"reading events of {sid}")
        if isinstance(data, dict) and isinstance(data.get("events"), list):
            data = {**data, "events": [canonical("event", e, self.fields) for e in data["events"]]}
        return EventPage.parse(data)

    def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One HTTP exchange within ``timeout`` in total, its answer read streamed up to the size cap.

        Raises httpx errors for transport failures (a passed deadline is a timeout) and
        ``ANSWER_TOO_LARGE`` as soon as the answer is known to exceed the cap (declared or counted).
        """
        with deadline_in(self.timeout):
            if remaining() == 0.0:
                raise httpx.ReadTimeout("the call's deadline has passed before the request")
            request = self._http.build_request(
                method, path, params=dict(params or {}), content=content, headers=dict(headers or {})
            )
            response = self._http.send(request, stream=True)
            try:
                declared = response.headers.get("Content-Length")
                if declared is not None and declared.strip().isdigit() and int(declared) > self.max_answer_bytes:
                    raise answer_too_large(what, self.max_answer_bytes, int(declared))
                encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise bad_response(what, response.status_code)
                # Chunks kept apart until the end: a growing buffer would be copied on every resize,
                # briefly holding twice the cap.
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes(_READ_CHUNK):  # identity only (checked above)
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.max_answer_bytes:
                        chunks.clear()
                        raise answer_too_large(what, self.max_answer_bytes, None)
                    if remaining() == 0.0:
                        # A custom transport without the deadline backend still stops here.
                        raise httpx.ReadTimeout("the request's total deadline has passed")
            finally:
                response.close()
            return httpx.Response(
                response.status_code, headers=response.headers, content=b"".join(chunks), request=request
            )

    def _pause(self, attempt: int, retry_after: float | None) -> bool:
        """Wait before the next attempt, within the caller's deadline; False when no time is left."""
        delay = self.retry.delay(attempt, retry_after, self._rng)
        left = remaining()
        if left is not None and left <= delay:
            return False
        self.clock.sleep(delay)
        return True

    def _get(self, path: str, *, params: Mapping[str, Any] | None = None, what: str) -> object:
        last: ControlHostError | None = None
        for attempt in range(1, self.retry.attempts + 1):
            retry_after: float | None = None
            try:
                response = self._request("GET", path, what, params=params)
            except httpx.HTTPError as exc:
                last = error_from_exception(exc, what)
            else:
                if response.is_success:
                    try:
                        return response.json()
                    except ValueError:
                        last = bad_response(what, response.status_code)
                else:
                    last = error_from_response(response, what)
                    if not is_uncertain_status(response.status_code):
                        raise last
                    retry_after = parse_retry_after(response.headers.get("Retry-After"), self.clock.now())
            log.info("GET %s attempt %d/%d: %s", path, attempt, self.retry.attempts, last.code)
            if attempt < self.retry.attempts and not self._pause(attempt, retry_after):
                raise deadline_passed(what, last)
        assert last is not None
        raise last

    # -- writes (the Idempotency-Key rule) -----------------------------------------------------

    def begin(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any],
        purpose: str,
        *,
        session_id: str | None = None,
        db: Database | None = None,
    ) -> IdempotencyRecord:
        """Store a new logical request — a new Idempotency-Key and the exact body text — before any send.

        The one place a POST's body is serialised: every attempt (:meth:`send`, a retry, a resume
        after a crash, a replay at start) sends this stored text with this key. With ``db=`` the record
        joins the caller's write transaction, so a request's state change and its record commit
        together (a crash leaves both or neither).
        """
        sid = check_id(session_id, "session id") if session_id is not None else None
        return self.store.begin_request(method, path, _body_text(body), purpose, session_id=sid, db=db)

    def send(self, permit: Permit) -> Receipt:
        """Send (or re-send) the stored request the gate's ``permit`` names, exactly as stored: its key,
        its body text. Only the gate makes a Permit (``_permit.py``), so only the gate sends.

        A record that already has a definite answer is not sent again: its stored receipt is
        returned, or its stored refusal raised (a 4xx ended that logical request for good).
        """
        record = permit.record
        current = self.store.get_request(record.key) or record
        what = f"{current.purpose.replace('_', ' ')} on {current.session_id or current.path}"
        if not current.pending:
            return self._answered(current, what)
        last: ControlHostError | None = None
        for attempt in range(1, self.retry.attempts + 1):
            retry_after: float | None = None
            self.store.note_attempt(current.key)
            self._in_doubt[current.key] = True
            try:
                # The caller's record as given (the gate proved exactly it against the chain); the
                # stored row is read only for its state.
                response = self._request(
                    record.method,
                    record.path,
                    what,
                    content=record.body.encode("utf-8"),
                    headers={"Idempotency-Key": current.key, "Content-Type": "application/json"},
                )
            except httpx.HTTPError as exc:
                last = error_from_exception(exc, what)
            except ControlHostError as exc:
                # An answer too large to read: the decision may have been applied, so the outcome is
                # uncertain and the stored request stays pending (same key, same body).
                last = exc
            else:
                status = response.status_code
                if response.is_success:
                    try:
                        data = response.json()
                    except ValueError:
                        # Accepted, but the receipt was lost in transit: the same key fetches it again.
                        last = bad_response(what, status)
                    else:
                        self.store.finish_request(current.key, status, data, fence=permit.fence)
                        self._in_doubt[current.key] = False
                        return Receipt.parse(data, http_status=status, idempotency_key=current.key)
                elif is_uncertain_status(status):
                    last = error_from_response(response, what)
                    retry_after = parse_retry_after(response.headers.get("Retry-After"), self.clock.now())
                    if current.purpose == PURPOSE_RESUME and last.code == "BACKEND_UNAVAILABLE":
                        self._in_doubt[current.key] = False  # R4.2: no receipt, no record kept
                else:
                    # A definite refusal ends this logical request; a later attempt is a new one.
                    self.store.finish_request(current.key, status, _response_body(response), fence=permit.fence)
                    self._in_doubt[current.key] = False
                    raise error_from_response(response, what)
            log.info("POST %s attempt %d/%d: %s", current.path, attempt, self.retry.attempts, last.code)
            if attempt < self.retry.attempts and not self._pause(attempt, retry_after):
                raise RequestPendingError(last, idempotency_key=current.key, attempts=attempt)
        assert last is not None
        raise RequestPendingError(last, idempotency_key=current.key, attempts=self.retry.attempts)

    def in_doubt(self, key: str) -> bool:
        """Whether a stored request may have taken effect without its answer reaching us.

        False only when no attempt was made, or this process saw every attempt end in a definite
        answer (or a resume's 503 BACKEND_UNAVAILABLE); an attempt interrupted on the wire, a timeout,
        a 5xx — or attempts made by an earlier process — leave it in doubt.
        """
        record = self.store.get_request(key)
        if record is None or record.attempts == 0:
            return False
        return self._in_doubt.get(key, True)

    def _answered(self, record: IdempotencyRecord, what: str) -> Receipt:
        status = record.http_status or 0
        if 200 <= status < 300:
            return Receipt.parse(record.response, http_status=status, idempotency_key=record.key)
        stored = httpx.Response(status, json=record.response)
        raise error_from_response(stored, what)


def _body_text(body: Mapping[str, Any]) -> str:
    return json.dumps(dict(body), separators=(",", ":"), ensure_ascii=False)


def _response_body(response: httpx.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return {"text": response.text[:2000]}
