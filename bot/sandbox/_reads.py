"""The public API's reads (sessions, turns, events; paginated) and the admin's full view of a session.

Reads change nothing; they are kept apart from the state machine so the paging rules of
docs/control-host-api.md (sessions by id after a cursor, turns newest first, events after a seq) can
be read in one place.
"""

from __future__ import annotations

import bisect
from typing import Any

from bot.clock import isoformat
from bot.sandbox._wire import ApiError, Session


def session_page(
    sessions: dict[str, Session],
    sorted_ids: list[str],
    admission_state: str | None,
    status: str | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    """A page sorted by id after ``cursor`` (the last id of the previous page): O(page), not O(all)."""
    start = bisect.bisect_right(sorted_ids, cursor) if cursor else 0
    page: list[Session] = []
    more = False
    for i in range(start, len(sorted_ids)):
        session = sessions[sorted_ids[i]]
        if admission_state and session.admission_state != admission_state:
            continue
        if status and session.status != status:
            continue
        if len(page) == limit:
            more = True
            break
        page.append(session)
    return {"sessions": [s.to_json() for s in page], "next": page[-1].id if more else None}


def turn_page(session: Session, status: str | None, cursor: str | None, limit: int) -> dict[str, Any]:
    """Turns newest first, after the ``cursor`` turn id."""
    turns = list(reversed(session.turns))  # newest first
    if status:
        turns = [t for t in turns if t.status == status]
    if cursor:
        ids = [t.id for t in turns]
        turns = turns[ids.index(cursor) + 1 :] if cursor in ids else []
    page = turns[:limit]
    return {"turns": [t.to_json() for t in page], "next": page[-1].id if len(turns) > limit else None}


def turn_json(session: Session, turn_id: str) -> dict[str, Any]:
    turn = session.turn(turn_id)
    if turn is None:
        raise ApiError(404, "NOT_FOUND", f"No turn {turn_id!r} in session {session.id!r}.")
    return turn.to_json()


def event_page(session: Session, after: int, limit: int) -> dict[str, Any]:
    events = [e for e in session.events if e.seq > after]
    page = events[:limit]
    # ``next`` is what to pass as ``after`` for the following page: the last seq returned.
    return {"events": [e.to_json() for e in page], "next": page[-1].seq if page else after}


def debug_json(session: Session) -> dict[str, Any]:
    """Everything about one session, including what the API does not show (admin only)."""
    data = session.to_json()
    data["execution_internal"] = (
        {
            "alive": session.execution.alive,
            "phase": session.execution.phase,
            "generation": session.execution.generation,
            "started_at": isoformat(session.execution.started_at),
            "stray_workers": session.execution.strays,
        }
        if session.execution
        else None
    )
    data["reclamation_claim"] = session.reclamation_claim
    data["stopped_at"] = isoformat(session.stopped_at)
    data["workspace_expired"] = session.workspace_expired
    data["store_outage"] = session.store_outage
    data["scenario_id"] = session.scenario_id
    data["incident_cause"] = session.incident_cause
    data["turns"] = [t.to_json() for t in session.turns]
    return data
