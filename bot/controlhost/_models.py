"""Typed views of the control host's answers, parsed tolerantly.

docs/control-host-api.md marks many fields as assumed, so parsing never trusts a shape: unknown fields are
ignored, a missing, empty or mistyped optional field becomes ``None`` (shown to people as "unknown"), and
the original object is kept in ``raw`` for anything a later version needs. This is the only place that
reads the API's JSON leniently: everything past the client reads these models' typed fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.clock import parse_time
from bot.format import as_int, as_str


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(data: dict[str, Any], key: str) -> str | None:
    return as_str(data.get(key))


def _int(data: dict[str, Any], key: str) -> int | None:
    return as_int(data.get(key))


def _bool(data: dict[str, Any], key: str) -> bool | None:
    """A JSON boolean, or the text "true"/"false" (any case); anything else is unknown."""
    value = data.get(key)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value if isinstance(value, bool) else None


@dataclass(frozen=True)
class Attention:
    """Why a session needs an operator (RESTORE_FAILED, STARTUP_FAILED, CONTEXT_GAP, OUTCOME_UNKNOWN)."""

    code: str | None
    reason: str | None
    failures: int | None
    retry_at: datetime | None
    retry_at_text: str | None
    #: ``retry_at`` present and null: no retry is scheduled (R2.2); a missing field stays unknown.
    retry_at_null: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object) -> Attention | None:
        if not isinstance(data, dict):
            return None
        return cls(
            code=_str(data, "code"),
            reason=_str(data, "reason"),
            failures=_int(data, "failures"),
            retry_at=parse_time(data.get("retry_at")),
            retry_at_text=_str(data, "retry_at"),
            retry_at_null="retry_at" in data and data["retry_at"] is None,
            raw=data,
        )


@dataclass(frozen=True)
class Checkpoint:
    id: str | None
    committed_at: datetime | None
    covers_turn_id: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object) -> Checkpoint | None:
        if not isinstance(data, dict):
            return None
        return cls(
            id=_str(data, "id"),
            committed_at=parse_time(data.get("committed_at")),
            covers_turn_id=_str(data, "covers_turn_id"),
            raw=data,
        )


@dataclass(frozen=True)
class Execution:
    """The worker's execution; ``state == "gone"`` once a scheduler pass confirmed it (R3.9)."""

    state: str | None
    confirmed_gone_at: datetime | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object) -> Execution | None:
        if not isinstance(data, dict):
            return None
        return cls(state=_str(data, "state"), confirmed_gone_at=parse_time(data.get("confirmed_gone_at")), raw=data)


@dataclass(frozen=True)
class Session:
    id: str
    status: str | None
    admission_state: str | None
    revision: int | None
    resumable: bool | None
    attention: Attention | None
    checkpoint: Checkpoint | None
    execution: Execution | None
    queued_inputs: int | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object, fallback_id: str = "") -> Session:
        d = _obj(data)
        return cls(
            id=_str(d, "id") or fallback_id,
            status=_str(d, "status"),
            admission_state=_str(d, "admission_state"),
            revision=_int(d, "revision"),
            resumable=_bool(d, "resumable"),
            attention=Attention.parse(d.get("attention")),
            checkpoint=Checkpoint.parse(d.get("checkpoint")),
            execution=Execution.parse(d.get("execution")),
            queued_inputs=_int(d, "queued_inputs"),
            raw=d,
        )


@dataclass(frozen=True)
class SessionPage:
    sessions: list[Session]
    next: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object) -> SessionPage:
        d = _obj(data)
        items = d.get("sessions")
        sessions = [Session.parse(s) for s in items if isinstance(s, dict)] if isinstance(items, list) else []
        return cls(sessions=sessions, next=_str(d, "next"), raw=d)


@dataclass(frozen=True)
class Turn:
    id: str
    status: str | None
    terminal_reason: str | None
    control_id: str | None
    started_at: datetime | None
    ended_at: datetime | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object, fallback_id: str = "") -> Turn:
        d = _obj(data)
        return cls(
            id=_str(d, "id") or fallback_id,
            status=_str(d, "status"),
            terminal_reason=_str(d, "terminal_reason"),
            control_id=_str(d, "control_id"),
            started_at=parse_time(d.get("started_at")),
            ended_at=parse_time(d.get("ended_at")),
            raw=d,
        )


@dataclass(frozen=True)
class Event:
    seq: int | None
    type: str | None
    name: str | None
    reason: str | None
    failures: int | None
    at: datetime | None
    #: ``worker_ready``: the worker generation that reported ready, and the checkpoint it restored
    #: (``names_checkpoint``: the field is there, null meaning none; absent: the host does not say).
    generation: int | None = None
    checkpoint_id: str | None = None
    names_checkpoint: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object) -> Event:
        d = _obj(data)
        return cls(
            seq=_int(d, "seq"),
            type=_str(d, "type"),
            name=_str(d, "name"),
            reason=_str(d, "reason"),
            failures=_int(d, "failures"),
            at=parse_time(d.get("at")),
            generation=_int(d, "generation"),
            checkpoint_id=_str(d, "checkpoint_id"),
            names_checkpoint="checkpoint_id" in d
            and (d["checkpoint_id"] is None or _str(d, "checkpoint_id") is not None),
            raw=d,
        )


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    next: int | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object) -> EventPage:
        d = _obj(data)
        items = d.get("events")
        events = [Event.parse(e) for e in items if isinstance(e, dict)] if isinstance(items, list) else []
        return cls(events=events, next=_int(d, "next"), raw=d)


@dataclass(frozen=True)
class ReceiptSession:
    """The session as the receipt describes it (R5.1: check it together with the receipt's status)."""

    revision: int | None
    status: str | None
    admission_state: str | None

    @classmethod
    def parse(cls, data: object) -> ReceiptSession | None:
        if not isinstance(data, dict):
            return None
        return cls(
            revision=_int(data, "revision"),
            status=_str(data, "status"),
            admission_state=_str(data, "admission_state"),
        )


@dataclass(frozen=True)
class Receipt:
    """A decision or resume receipt, with the key and HTTP status of the request that got it."""

    id: str | None
    decision: str | None
    status: str | None
    session: ReceiptSession | None
    resumable: bool | None
    http_status: int | None = None
    idempotency_key: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, data: object, *, http_status: int | None = None, idempotency_key: str | None = None) -> Receipt:
        d = _obj(data)
        return cls(
            id=_str(d, "id"),
            decision=_str(d, "decision"),
            status=_str(d, "status"),
            session=ReceiptSession.parse(d.get("session")),
            resumable=_bool(_obj(d.get("result")), "resumable"),
            http_status=http_status,
            idempotency_key=idempotency_key,
            raw=d,
        )
