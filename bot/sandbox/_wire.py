"""The sandbox's sessions, turns and events as the public API shows them, and the API's error answer.

One place for the wire shapes (``to_json``) so every job module of the state machine builds and reads
the same objects; a session also keeps its own event list and worker log, appended only through
:meth:`Session.add_event` and :meth:`Session.log_json` / :meth:`Session.log_text`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.clock import isoformat
from bot.sandbox._scenarios import WorkerLogLine


class ApiError(Exception):
    """An error answer of the public API: status, code, message, retryable."""

    def __init__(self, status: int, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "retryable": self.retryable}}


class AdminError(ApiError):
    """An admin request that the state machine cannot honour (e.g. no worker is restoring)."""


@dataclass
class Attention:
    code: str
    reason: str | None = None
    failures: int | None = None
    retry_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "reason": self.reason,
            "failures": self.failures,
            "retry_at": isoformat(self.retry_at),
        }


@dataclass
class Checkpoint:
    id: str
    committed_at: datetime | None
    covers_turn_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "committed_at": isoformat(self.committed_at),
            "covers_turn_id": self.covers_turn_id,
        }


@dataclass
class Execution:
    """The session's current worker. ``state`` is what the API shows; ``alive`` is the truth.

    A worker that ended stays ``running``/``draining`` in the API until a scheduler pass confirms it
    gone (R1.5, R3.9).
    """

    state: str
    alive: bool
    phase: str = "ready"  # starting (restoring / preparing the workspace) | ready
    generation: int = 1
    started_at: datetime | None = None
    confirmed_gone_at: datetime | None = None
    # Other containers of the session that no scheduler pass has removed yet (hidden from the API):
    # while any is left, abandon / confirm_completed still get RECOVERY_REQUIRED, even though the API
    # shows the execution gone; each pass removes one and moves ``confirmed_gone_at`` (R3.9).
    strays: int = 0
    restore: bool = False  # the claim carried a restore plan (a checkpoint at launch): R2.16

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "confirmed_gone_at": isoformat(self.confirmed_gone_at),
            "generation": self.generation,
        }


@dataclass
class Turn:
    id: str
    status: str
    terminal_reason: str | None = None
    control_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "terminal_reason": self.terminal_reason,
            "control_id": self.control_id,
            "started_at": isoformat(self.started_at),
            "ended_at": isoformat(self.ended_at),
        }


@dataclass
class Event:
    seq: int
    type: str
    name: str
    at: datetime
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "name": self.name,
            **self.fields,
            "at": isoformat(self.at),
        }


@dataclass
class Session:
    id: str
    status: str
    admission_state: str
    revision: int
    resumable: bool | None
    queued_inputs: int
    attention: Attention | None
    checkpoint: Checkpoint | None
    execution: Execution | None
    turns: list[Turn] = field(default_factory=list)  # oldest first
    events: list[Event] = field(default_factory=list)
    logs: list[WorkerLogLine] = field(default_factory=list)
    reclamation_claim: bool = False
    store_outage: bool = False
    scenario_id: str | None = None
    incident_cause: str | None = None  # sandbox only: how this incident session's next workers behave
    relaunch: bool = False  # sandbox only: a drained worker's session continues at the next pass (R1.9)
    stopped_at: datetime | None = None  # sandbox only: when it last became stopped (R4.1's TTL runs from it)
    workspace_expired: bool = False  # sandbox only: the stopped-TTL ended; the volume is gone (R4.1)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "admission_state": self.admission_state,
            "revision": self.revision,
            "resumable": self.resumable,
            "attention": self.attention.to_json() if self.attention else None,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "execution": self.execution.to_json() if self.execution else None,
            "queued_inputs": self.queued_inputs,
        }

    def summary(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "status": self.status,
            "admission_state": self.admission_state,
            "resumable": self.resumable,
        }

    def turn(self, turn_id: str) -> Turn | None:
        return next((t for t in self.turns if t.id == turn_id), None)

    def unknown_turn(self) -> Turn | None:
        """The ``outcome_unknown`` turn heading the queue, if any (R3.8: nothing runs past it)."""
        return next((t for t in self.turns if t.status == "outcome_unknown"), None)

    def add_event(self, name: str, at: datetime, *, type_: str = "system", **fields: Any) -> Event:
        """Append an event with the next sequence number (the events feed is ordered by ``seq``)."""
        seq = self.events[-1].seq + 1 if self.events else 1
        event = Event(seq=seq, type=type_, name=name, at=at, fields=fields)
        self.events.append(event)
        return event

    def log_json(self, at: datetime, event: str, **fields: Any) -> None:
        """A JSON worker-log line, as the real worker writes them (``level`` defaults to info)."""
        payload = {
            "ts": isoformat(at),
            "level": fields.pop("level", "info"),
            "event": event,
            "session_id": self.id,
        }
        payload.update(fields)
        self.logs.append(WorkerLogLine(at=at, text=json.dumps(payload, separators=(",", ":"))))

    def log_text(self, at: datetime, text: str) -> None:
        """A plain-text worker-log line (stop lines, a kernel's ``Killed``)."""
        self.logs.append(WorkerLogLine(at=at, text=text))
