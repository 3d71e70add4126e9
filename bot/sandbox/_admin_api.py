"""The admin API (``/_sandbox/``): the sandbox's own controls, for tests, the demo and an operator.

The clock, the scheduler, faults and outages, the request log, the idempotency records and effects,
scenarios, the mass incident, scheduled stops, traffic, and the hands on each session's worker. Each
handler reads its body and calls the state (or the fault table, or the traffic options); the state's
rules live there, not here. Never faulted, never authenticated: it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from bot.clock import isoformat
from bot.sandbox._faults import DEFAULT_HUGE_BYTES, Fault, FaultTable, check_kind
from bot.sandbox._http import SID, Response, Route, body_bool, err, match
from bot.sandbox._schedule import ScheduleError
from bot.sandbox._state import SandboxState
from bot.sandbox._traffic import Traffic
from bot.sandbox._wire import AdminError, ApiError

ADMIN_ROUTES: list[Route] = [
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
    ("POST", re.compile(r"^/_sandbox/incident/end-outage$"), "end_outage"),
    ("GET", re.compile(r"^/_sandbox/schedule$"), "get_schedule"),
    ("POST", re.compile(r"^/_sandbox/schedule$"), "schedule"),
    ("DELETE", re.compile(r"^/_sandbox/schedule$"), "clear_schedule"),
    ("GET", re.compile(r"^/_sandbox/traffic$"), "get_traffic"),
    ("POST", re.compile(r"^/_sandbox/traffic$"), "traffic"),
    ("GET", re.compile(r"^/_sandbox/sessions$"), "admin_sessions"),
    ("POST", re.compile(r"^/_sandbox/sessions$"), "create_session"),
    ("GET", re.compile(rf"^/_sandbox/sessions/{SID}$"), "admin_session"),
    ("GET", re.compile(rf"^/_sandbox/sessions/{SID}/worker-logs$"), "worker_logs"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/fail-restore$"), "fail_restore"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/fail-startup$"), "fail_startup"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/worker-ready$"), "worker_ready"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/stop$"), "stop"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/settle$"), "settle"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/store-outage$"), "store_outage"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/reclamation$"), "reclamation"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/stray-workers$"), "stray_workers"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/worker-stop$"), "worker_stop"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/turns$"), "start_turn"),
    ("POST", re.compile(rf"^/_sandbox/sessions/{SID}/interrupt$"), "interrupt"),
]


class AdminApi:
    """Turns one ``/_sandbox/`` request into a :class:`Response`, under the state's lock."""

    def __init__(
        self,
        state: SandboxState,
        faults: FaultTable,
        requests: deque[dict[str, Any]],
        traffic: Traffic,
        advance: Callable[[float], None],
    ) -> None:
        self.state = state
        self.faults = faults
        self.requests = requests
        self.traffic = traffic
        self._advance = advance

    def handle(self, method: str, path: str, query: dict[str, str], raw: bytes) -> Response:
        route = match(ADMIN_ROUTES, method, path)
        if isinstance(route, Response):
            return route
        name, params = route
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError):
            return err(400, "BAD_REQUEST", "The body is not valid JSON.")
        if not isinstance(body, dict):
            return err(400, "BAD_REQUEST", "The body must be a JSON object.")
        try:
            with self.state.lock:
                if name != "advance":
                    self.state.tick()
                return Response(200, getattr(self, f"_admin_{name}")(params, query, body))
        except ApiError as exc:
            return Response(exc.status, exc.body())
        except (KeyError, TypeError, ValueError) as exc:
            return err(400, "BAD_REQUEST", f"Bad admin request: {exc}")

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
        return self.faults.to_json()

    def _admin_add_fault(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        kind = body.get("kind")
        check_kind(kind)
        times = body.get("times", 1)
        method = body.get("method")
        for_seconds = body.get("for_seconds")
        fault = Fault(
            id=self.faults.next_id(),
            kind=str(kind),
            path=str(body.get("path") or "*"),
            method=str(method).upper() if method else None,
            times=None if times is None else int(times),
            seconds=float(body.get("seconds") or (600.0 if kind == "dribble" else 0.0)),
            retry_after=int(body.get("retry_after", 1)),
            status=int(body.get("status", 500 if kind == "error_after_commit" else 503)),
            rate=int(body.get("rate", 4)),
            size=int(body.get("size", DEFAULT_HUGE_BYTES)),
            length=body_bool(body, "length") if "length" in body else True,
            probability=float(body.get("probability", 1.0)),
            seed=int(body.get("seed", 1)),
            for_seconds=None if for_seconds is None else float(for_seconds),
        )
        return self.faults.add(fault).to_json()

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
            causes=tuple(str(c) for c in body.get("causes") or ()),
        )
        return {"incident": incident.to_json(self.state.now())}

    def _admin_end_outage(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        return {"incident": self.state.end_incident_outage().to_json(self.state.now())}

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
        self.state.store_outage(params["sid"], body_bool(body, "on"))
        return self.state.debug_session(params["sid"])

    def _admin_reclamation(self, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Any:
        self.state.reclamation(params["sid"], body_bool(body, "held"))
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
        self.state.worker_stop(
            params["sid"], kind, old_api=body_bool({"old_api": body.get("old_api", False)}, "old_api")
        )
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
