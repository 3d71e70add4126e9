"""A :class:`Session` built from a scenario's ``session:``/``turns:``/``events:``/``worker_logs:`` blocks.

Scenario files, the admin's ``POST /_sandbox/sessions`` and the mass incident all describe sessions in
the same YAML/JSON shape; one builder turns that shape into state, with relative times (``-10m``) read
against the sandbox clock's now.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bot.clock import isoformat
from bot.sandbox._scenarios import (
    render_log_entries,
    resolve_time,
    validate_events,
    validate_log_entries,
    validate_session_spec,
    validate_turns,
)
from bot.sandbox._wire import AdminError, Attention, Checkpoint, Execution, Session, Turn


def build_session(
    spec: Mapping[str, Any],
    turns: Any,
    events: Any,
    logs: Any,
    now: datetime,
    *,
    scenario_id: str | None = None,
) -> Session:
    """A session from a (validated) scenario ``session:`` block; relative times use ``now``."""

    def t(value: object) -> datetime | None:
        return resolve_time(value, now)

    attention = None
    if spec.get("attention"):
        a = spec["attention"]
        attention = Attention(a["code"], a.get("reason"), a.get("failures"), t(a.get("retry_at")))
    checkpoint = None
    if spec.get("checkpoint"):
        c = spec["checkpoint"]
        checkpoint = Checkpoint(str(c["id"]), t(c.get("committed_at", "now")), c.get("covers_turn_id"))
    execution = None
    if spec.get("execution"):
        e = spec["execution"]
        execution = Execution(
            state=e["state"],
            alive=bool(e.get("alive", e["state"] == "running")),
            phase=e.get("phase", "ready"),
            generation=int(e.get("generation", 1)),
            started_at=t(e.get("started_at", "-10m")),
            confirmed_gone_at=t(e.get("confirmed_gone_at", "now" if e["state"] == "gone" else None)),
            strays=int(e.get("stray_workers", 0)),
        )
    session = Session(
        id=spec["id"],
        status=spec.get("status", "running"),
        admission_state=spec.get("admission_state", "open"),
        revision=int(spec.get("revision", 1)),
        resumable=spec.get("resumable"),
        queued_inputs=int(spec.get("queued_inputs", 0)),
        attention=attention,
        checkpoint=checkpoint,
        execution=execution,
        reclamation_claim=bool(spec.get("reclamation_claim", False)),
        store_outage=bool(spec.get("store_outage", False)),
        scenario_id=scenario_id,
    )
    for turn in turns:
        session.turns.append(
            Turn(
                id=turn["id"],
                status=turn["status"],
                terminal_reason=turn.get("terminal_reason"),
                control_id=turn.get("control_id"),
                started_at=t(turn.get("started_at")),
                ended_at=t(turn.get("ended_at")),
            )
        )
    for event in events:
        extra = {k: v for k, v in event.items() if k not in {"seq", "type", "name", "at"}}
        for name in [k for k in extra if k.endswith("_at")]:
            extra[name] = isoformat(t(extra[name]))  # e.g. retry_at: scenario time → ISO
        at = t(event.get("at", "now"))
        assert at is not None
        session.add_event(str(event["name"]), at, type_=str(event.get("type", "system")), **extra)
    session.logs.extend(render_log_entries(logs, now))
    return session


def new_session_blocks(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], Any, Any, Any]:
    """The ``session``, ``turns``, ``events`` and ``worker_logs`` of a ``POST /_sandbox/sessions`` body
    (a bare ``session:`` block or a whole scenario body), checked by the scenario validators first:
    every problem in one 400."""
    session_spec = spec.get("session", spec)
    turns = spec.get("turns", []) if "session" in spec else []
    events = spec.get("events", []) if "session" in spec else []
    logs = spec.get("worker_logs", []) if "session" in spec else []
    problems = validate_session_spec(session_spec, "session")
    if not problems:
        problems = (
            validate_turns(turns, "session")
            + validate_events(events, "session")
            + validate_log_entries(logs, "session")
        )
    if problems:
        raise AdminError(400, "BAD_REQUEST", "; ".join(problems))
    return session_spec, turns, events, logs
