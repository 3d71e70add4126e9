"""Typed client of the control host's API, with the Idempotency-Key rule (see docs/control-host-api.md)."""

from __future__ import annotations

from bot.controlhost._client import (
    PURPOSE_DECISION,
    PURPOSE_RESUME,
    ApiPaths,
    ControlHostClient,
    ReplayResult,
)
from bot.controlhost._deadline import current_deadline, deadline_at, deadline_in, remaining
from bot.controlhost._errors import (
    AUTH_MESSAGE,
    ID_PATTERN,
    SCOPE_MESSAGE,
    WRONG_KEY_MESSAGE,
    RequestPendingError,
    check_id,
)
from bot.controlhost._fields import KNOWN_FIELDS
from bot.controlhost._identity import HostIdentity
from bot.controlhost._listing import SessionListing
from bot.controlhost._models import (
    Attention,
    Checkpoint,
    Event,
    EventPage,
    Execution,
    Receipt,
    ReceiptSession,
    Session,
    SessionPage,
    Turn,
)
from bot.controlhost._permit import Permit
from bot.controlhost._retry import RetryPolicy, parse_retry_after
from bot.errors import ControlHostAuthError, ControlHostError

__all__ = [
    "KNOWN_FIELDS",
    "AUTH_MESSAGE",
    "SCOPE_MESSAGE",
    "WRONG_KEY_MESSAGE",
    "ID_PATTERN",
    "PURPOSE_DECISION",
    "PURPOSE_RESUME",
    "Attention",
    "Checkpoint",
    "ControlHostAuthError",
    "ApiPaths",
    "ControlHostClient",
    "ControlHostError",
    "Event",
    "EventPage",
    "Execution",
    "HostIdentity",
    "Receipt",
    "ReceiptSession",
    "Permit",
    "ReplayResult",
    "RequestPendingError",
    "RetryPolicy",
    "parse_retry_after",
    "Session",
    "SessionListing",
    "SessionPage",
    "Turn",
    "check_id",
    "current_deadline",
    "deadline_at",
    "deadline_in",
    "remaining",
]
