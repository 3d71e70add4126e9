"""Turning the control host's answers (or silence) into typed errors with actionable wording.

All wording lives here so it stays consistent. Text quoted from the control host goes through
:func:`bot.redact.redact`; the API key never appears (it is a registered secret).
"""

from __future__ import annotations

from typing import Any

import httpx

from bot.errors import CommandError, ControlHostAuthError, ControlHostError
from bot.ids import HOST_ID
from bot.redact import redact, register_wording

# R0.1 and the API's error table: 401 is a wrong or expired key, 403 a key without the scope.
WRONG_KEY_MESSAGE = "CONTROL_HOST_API_KEY is wrong or expired"
SCOPE_MESSAGE = "the API key lacks the sessions:recover scope"
AUTH_MESSAGES = {401: WRONG_KEY_MESSAGE, 403: SCOPE_MESSAGE}
AUTH_MESSAGE = SCOPE_MESSAGE
register_wording(WRONG_KEY_MESSAGE, SCOPE_MESSAGE)  # said whole even when the key is one of its words

ID_PATTERN = HOST_ID

_HINTS = {
    "NOT_FOUND": "Check the id: the control host has no such session or turn.",
    "REQUEST_STALE": (
        "The session changed, or this decision is not valid in its current state (R2.10). "
        "Re-read the session, check the facts again and decide anew."
    ),
    "RECOVERY_REQUIRED": (
        "The previous execution has not been confirmed gone (R3.9): wait for the next scheduler pass, "
        "re-read the session, then send a new decision."
    ),
    "CHECKPOINT_UNAVAILABLE": (
        "No committed checkpoint covers that turn (R3.11): confirm_completed cannot be used; consider abandon or close."
    ),
    "BACKEND_UNAVAILABLE": (
        "A workspace reclamation is in progress (R4.2): the same request can be retried once it ends."
    ),
    "BAD_REQUEST": "The control host rejected the request's shape (R2.16): check the API version.",
    "IDEMPOTENCY_KEY_REUSED": "An Idempotency-Key was reused with a different body: a bug, please report it.",
    "RATE_LIMITED": "The control host is rate limiting: wait a moment and try again.",
    "TIMEOUT": "The control host did not answer in time: check that it is up, then try again.",
    "UNREACHABLE": "Check CONTROL_HOST_URL and that the control host is reachable from the bot.",
    "SERVER_ERROR": "The control host failed: try again shortly, and check its api logs if it persists.",
    "ANSWER_TOO_LARGE": (
        "The control host's answer was far larger than any API answer should be: check that "
        "CONTROL_HOST_URL points at the API and not at something in front of it."
    ),
}

_STATUS_CODES = {400: "BAD_REQUEST", 404: "NOT_FOUND", 422: "IDEMPOTENCY_KEY_REUSED", 429: "RATE_LIMITED"}

# Answers that mean "not processed, ask again later" rather than a definite refusal.
RETRYABLE_STATUSES = frozenset({408, 429})


def is_uncertain_status(status: int) -> bool:
    """True for answers after which the same request must be retried (same key, same body)."""
    return status in RETRYABLE_STATUSES or status >= 500


def check_id(value: object, what: str = "id") -> str:
    """Refuse an id the API could not have issued, before it is put into a URL."""
    if isinstance(value, str) and ID_PATTERN.fullmatch(value):
        return value
    shown = redact(str(value))[:40]
    raise CommandError(
        f"{what} {shown!r} is not a valid id",
        usage="Ids are 1–128 letters, digits, '_', '.', ':' or '-', starting with a letter or digit.",
    )


def error_from_response(response: httpx.Response, what: str) -> ControlHostError:
    """The typed error for a non-2xx answer."""
    status = response.status_code
    if status in (401, 403):
        # R0.1: our own words (never the server's, which could echo the key); never retried.
        return ControlHostAuthError(
            f"The control host refused {what} (HTTP {status}): {AUTH_MESSAGES[status]}.",
            code="UNAUTHORIZED" if status == 401 else "FORBIDDEN",
            status=status,
            retryable=False,
            hint="Set CONTROL_HOST_API_KEY to a current key of this control host."
            if status == 401
            else "Ask for a key with the sessions:recover scope (R0.1) and set CONTROL_HOST_API_KEY to it.",
        )
    error: dict[str, Any] = {}
    try:
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            error = body["error"]
    except ValueError:
        pass
    code = error.get("code") if isinstance(error.get("code"), str) else None
    if code is None:
        code = _STATUS_CODES.get(status, "SERVER_ERROR" if status >= 500 else f"HTTP_{status}")
    retryable = error.get("retryable")
    if not isinstance(retryable, bool):
        retryable = is_uncertain_status(status)
    detail = error.get("message")
    text = f"The control host refused {what}: {code} (HTTP {status})"
    if isinstance(detail, str) and detail:
        text += f": {redact(detail)[:300]}"
    return ControlHostError(text, code=code, status=status, retryable=retryable, hint=_HINTS.get(code))


def error_from_exception(exc: httpx.HTTPError, what: str) -> ControlHostError:
    """The typed error for no answer at all (timeout, refused connection, dropped reply)."""
    if isinstance(exc, httpx.TimeoutException):
        code, text = "TIMEOUT", f"No answer from the control host to {what} in time"
    else:
        code, text = "UNREACHABLE", f"No answer from the control host to {what} ({type(exc).__name__})"
    return ControlHostError(text, code=code, status=None, retryable=True, hint=_HINTS[code])


def answer_too_large(what: str, cap: int, declared: int | None) -> ControlHostError:
    """An answer past the size cap, refused while it streams (never read whole)."""
    size = f"{declared:,} bytes declared" if declared is not None else "more than that"
    return ControlHostError(
        f"The control host's answer to {what} exceeded the {cap:,}-byte cap ({size}); it was not read",
        code="ANSWER_TOO_LARGE",
        status=None,
        retryable=False,
        hint=_HINTS["ANSWER_TOO_LARGE"],
    )


def deadline_passed(what: str, last: ControlHostError) -> ControlHostError:
    """No time left to retry a read within the caller's deadline (e.g. diagnose's budget)."""
    return ControlHostError(
        f"{last.message} — no time left within the deadline to try again",
        code=last.code,
        status=last.status,
        retryable=True,
        hint=last.hint,
    )


def bad_response(what: str, status: int) -> ControlHostError:
    return ControlHostError(
        f"The control host's answer to {what} was not the JSON expected (HTTP {status})",
        code="BAD_RESPONSE",
        status=status,
        retryable=True,
        hint="Check that CONTROL_HOST_URL points at the control host's API.",
    )


class RequestPendingError(ControlHostError):
    """A POST got no definite answer after the client's own retries; its record stays pending.

    Re-send it later with ``client.send(store.get_request(error.idempotency_key))``: same key,
    same body, so the control host applies it at most once. A restart's recovery does so.
    """

    def __init__(self, last: ControlHostError, *, idempotency_key: str, attempts: int) -> None:
        super().__init__(
            f"{last.message} — still no definite answer after {attempts} attempt(s); the request is kept "
            "and will be re-sent with the same Idempotency-Key",
            code=last.code,
            status=last.status,
            retryable=True,
            hint=last.hint,
        )
        self.idempotency_key = idempotency_key
        self.attempts = attempts
