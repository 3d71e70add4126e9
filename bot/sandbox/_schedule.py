"""Sessions that stop on a schedule, one by one, in a burst or every so often (``POST /_sandbox/schedule``).

A planned stop fires on the sandbox clock: at the first request at or after its time (every request
ticks the state first), so a listing read after the time already shows it, on the real clock of
``recover-bot sandbox`` as on a test's manual clock. A stop is the admin ``stop`` (failed,
``recovery_required``, this attention); nothing here knows how the bot reads it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.clock import isoformat
from bot.sandbox._scenarios import Scenario, builtin_scenarios_dir, load_scenarios, resolve_time

#: At most this many sessions in one burst (the sandbox's mass incident allows as many).
MAX_BURST = 20_000
#: The session a burst copies (idle and open: it needs no operator until it stops).
BURST_TEMPLATE = "healthy"


class ScheduleError(ValueError):
    """A schedule the sandbox cannot follow; said as a 400 with this text."""


class _State(Protocol):
    sessions: dict[str, Any]
    scenarios: dict[str, Scenario]

    def stop(self, session_id: str, code: str, reason: str | None, failures: int | None) -> Any: ...

    def settle(self, session_id: str) -> Any: ...

    def load_scenario(self, scenario_id: str) -> Any: ...

    def create_session(self, spec: dict[str, Any]) -> Any: ...


@dataclass
class PlannedStop:
    at: datetime
    session_id: str
    scenario: str | None = None  # (re)loaded just before it stops
    code: str = "RESTORE_FAILED"
    reason: str | None = "restore_refused"
    failures: int | None = 3

    def to_json(self) -> dict[str, Any]:
        return {
            "at": isoformat(self.at),
            "session": self.session_id,
            "scenario": self.scenario,
            "code": self.code,
            "reason": self.reason,
            "failures": self.failures,
        }


@dataclass
class Recurring:
    """Every ``seconds``, the next of ``sessions`` in turn: stopped, or settled when it still is (so it
    stops again on its next turn, a flapping session)."""

    seconds: float
    sessions: list[str]
    next_at: datetime
    code: str
    reason: str | None
    failures: int | None
    turn: int = 0


@dataclass
class StopSchedule:
    planned: list[PlannedStop] = field(default_factory=list)
    recurring: Recurring | None = None
    fired: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        every = self.recurring
        return {
            "planned": [p.to_json() for p in sorted(self.planned, key=lambda p: (p.at, p.session_id))],
            "every": None
            if every is None
            else {"seconds": every.seconds, "sessions": every.sessions, "next_at": isoformat(every.next_at)},
            "fired": len(self.fired),
        }

    def clear(self) -> None:
        self.planned.clear()
        self.recurring = None

    # -- reading a request ---------------------------------------------------------------------

    def add(self, state: _State, body: dict[str, Any], now: datetime) -> list[PlannedStop]:
        """Plan what ``body`` asks: ``stops`` (a list), a ``burst`` (a count) and/or ``every`` (seconds)."""
        added: list[PlannedStop] = []
        for i, item in enumerate(_list(body.get("stops"), "stops")):
            if not isinstance(item, dict):
                raise ScheduleError(f"stops[{i}] must be an object")
            added.append(self._one(state, item, now, f"stops[{i}]"))
        if body.get("burst") is not None:
            added.extend(self._burst(state, body, now))
        if body.get("every") is not None:
            self._every(state, body, now)
        if not added and body.get("every") is None:
            raise ScheduleError('nothing to plan: give "stops", "burst" or "every" (docs/sandbox.md)')
        self.planned.extend(added)
        return added

    def _one(self, state: _State, item: dict[str, Any], now: datetime, where: str) -> PlannedStop:
        scenario = item.get("scenario")
        if scenario is not None and scenario not in state.scenarios:
            raise ScheduleError(f"{where}: no scenario {scenario!r}; known: {sorted(state.scenarios)}")
        sid = item.get("session") or (state.scenarios[scenario].session.get("id") if scenario else None)
        if not isinstance(sid, str) or (scenario is None and sid not in state.sessions):
            raise ScheduleError(f'{where}: give an existing "session" or a "scenario" to load')
        return PlannedStop(_at(item.get("at", 0), now, where), sid, scenario, *_attention(item, where))

    def _burst(self, state: _State, body: dict[str, Any], now: datetime) -> list[PlannedStop]:
        count = body["burst"]
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_BURST:
            raise ScheduleError(f"burst must be a whole number from 1 to {MAX_BURST}")
        prefix = str(body.get("prefix") or "ses_burst")
        at = _at(body.get("at", 0), now, "burst")
        attention = _attention(body, "burst")
        template = _template()
        out: list[PlannedStop] = []
        for i in range(count):
            sid = f"{prefix}_{i:05d}"
            if sid not in state.sessions:
                spec = copy.deepcopy(template)
                spec["session"]["id"] = sid
                state.create_session(spec)
            out.append(PlannedStop(at, sid, None, *attention))
        return out

    def _every(self, state: _State, body: dict[str, Any], now: datetime) -> None:
        seconds = body["every"]
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
            raise ScheduleError("every must be a number of seconds above 0")
        sessions = _list(body.get("sessions"), "sessions") or sorted(state.sessions)
        unknown = [s for s in sessions if s not in state.sessions]
        if unknown or not sessions:
            raise ScheduleError(f"every: no sessions to stop (unknown: {unknown[:3]})")
        code, reason, failures = _attention(body, "every")
        self.recurring = Recurring(
            float(seconds), [str(s) for s in sessions], now + timedelta(seconds=float(seconds)), code, reason, failures
        )

    # -- firing --------------------------------------------------------------------------------

    def fire(self, state: _State, now: datetime) -> None:
        """Everything due by ``now`` happens, oldest first (the caller holds the state's lock)."""
        if self.planned:
            due = sorted((p for p in self.planned if p.at <= now), key=lambda p: (p.at, p.session_id))
            if due:
                self.planned = [p for p in self.planned if p.at > now]
                for p in due:
                    if p.scenario is not None:
                        state.load_scenario(p.scenario)
                    if p.session_id in state.sessions:
                        state.stop(p.session_id, p.code, p.reason, p.failures)
                        self.fired.append({"at": isoformat(p.at), "session": p.session_id})
        every = self.recurring
        while every is not None and every.next_at <= now:
            sid = every.sessions[every.turn % len(every.sessions)]
            every.turn += 1
            session = state.sessions.get(sid)
            if session is not None and getattr(session, "admission_state", None) == "recovery_required":
                state.settle(sid)
            elif session is not None:
                state.stop(sid, every.code, every.reason, every.failures)
                self.fired.append({"at": isoformat(every.next_at), "session": sid})
            every.next_at += timedelta(seconds=every.seconds)


def _list(value: object, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScheduleError(f"{name} must be a list")
    return value


def _at(value: object, now: datetime, where: str) -> datetime:
    """Seconds from now, ``+30s`` / ``2m`` style, or an ISO 8601 time (the scenarios' time rule)."""
    try:
        at = resolve_time(value, now)
    except ValueError as exc:
        raise ScheduleError(f"{where}: at: {exc}") from None
    if at is None:
        raise ScheduleError(f"{where}: at must be a time")
    return at


def _attention(item: dict[str, Any], where: str) -> tuple[str, str | None, int | None]:
    failures = item.get("failures", 3)
    if failures is not None and (not isinstance(failures, int) or isinstance(failures, bool) or failures < 0):
        raise ScheduleError(f"{where}: failures must be a whole number of 0 or more")
    code = str(item.get("code") or "RESTORE_FAILED")
    reason = item.get("reason", "restore_refused" if code == "RESTORE_FAILED" else None)
    return code, str(reason) if reason else None, failures


_TEMPLATE: dict[str, Any] | None = None


def _template() -> dict[str, Any]:
    """The builtin healthy scenario as a create-session body (loaded once)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        (s,) = [s for s in load_scenarios(builtin_scenarios_dir()) if s.id == BURST_TEMPLATE]
        _TEMPLATE = {"session": dict(s.session), "turns": [], "events": [], "worker_logs": []}
    return copy.deepcopy(_TEMPLATE)
