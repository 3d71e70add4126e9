"""A small typed client of the sandbox's admin API (``/_sandbox/``), for tests and the demo."""

from __future__ import annotations

import functools
import ssl
from datetime import datetime
from typing import Any

import httpx

from bot.clock import parse_time
from bot.errors import RecoverError


class SandboxAdminError(RecoverError):
    """The sandbox refused an admin request (e.g. no worker is restoring, unknown scenario)."""

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # The admin URL is plain http on loopback; one shared context spares each client the ~0.1 s of
    # loading the CA bundle (every test starts a sandbox).
    return ssl.create_default_context()


class SandboxAdmin:
    """Drive the sandbox: clock, scheduler, faults, state-machine events, effects, logs."""

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self._client = httpx.Client(base_url=base_url.rstrip("/") + "/_sandbox", timeout=timeout, verify=_tls_context())

    def close(self) -> None:
        self._client.close()

    def _call(
        self, method: str, path: str, json: dict[str, Any] | None = None, params: dict[str, Any] | None = None
    ) -> Any:
        response = self._client.request(method, path, json=json, params=params)
        data = response.json() if response.content else None
        if response.status_code >= 400:
            error = (data or {}).get("error", {}) if isinstance(data, dict) else {}
            raise SandboxAdminError(
                f"sandbox admin {method} {path}: {response.status_code} {error.get('message', '')}".strip(),
                status=response.status_code,
                code=str(error.get("code", "")),
            )
        return data

    # -- clock and scheduler
    def now(self) -> datetime:
        value = parse_time(self._call("GET", "/clock")["now"])
        assert value is not None
        return value

    def advance(self, seconds: float) -> datetime:
        """Move the sandbox clock forward (worker budgets are applied at once)."""
        value = parse_time(self._call("POST", "/clock/advance", {"seconds": seconds})["now"])
        assert value is not None
        return value

    def scheduler_pass(self) -> dict[str, Any]:
        """One scheduler pass: ``{"confirmed_gone": [...], "launched": [...]}``."""
        result: dict[str, Any] = self._call("POST", "/scheduler/pass")
        return result

    # -- effects, requests, idempotency records
    def effects(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Every state-changing effect of a decision or resume (optionally of one session)."""
        params = {"session_id": session_id} if session_id else None
        result: list[dict[str, Any]] = self._call("GET", "/effects", params=params)["effects"]
        return result

    def effect_count(self, session_id: str) -> int:
        return len(self.effects(session_id))

    def effect_counts(self) -> dict[str, int]:
        """Accepted decisions and resumes per session."""
        result: dict[str, int] = self._call("GET", "/effects")["counts"]
        return result

    def requests(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Public-API requests as received (method, path, Idempotency-Key, body, status, dropped)."""
        params = {"session_id": session_id} if session_id else None
        result: list[dict[str, Any]] = self._call("GET", "/requests", params=params)["requests"]
        return result

    def idempotency_records(self, session_id: str | None = None) -> list[dict[str, Any]]:
        params = {"session_id": session_id} if session_id else None
        result: list[dict[str, Any]] = self._call("GET", "/idempotency", params=params)["records"]
        return result

    # -- faults
    def fault(
        self,
        kind: str,
        path: str = "*",
        *,
        method: str | None = None,
        times: int | None = 1,
        seconds: float | None = None,
        retry_after: int | None = None,
        status: int | None = None,
        rate: int | None = None,
        size: int | None = None,
        length: bool | None = None,
        for_seconds: float | None = None,
        probability: float | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Inject a fault: ``latency`` (seconds), ``rate_limit`` (429 + Retry-After), ``server_error``
        (5xx before the commit), ``error_after_commit`` (commit, then a 5xx, default 500),
        ``drop_after_commit``, ``dribble`` (the answer at ``rate`` bytes/s for
        ``seconds``), ``huge_body`` (the answer padded to ``size`` bytes, streamed; ``length=False``
        sends no Content-Length) or ``repeat_sessions`` (a listing page names each session twice); ``path`` is an
        fnmatch pattern; ``for_seconds`` ends the fault after
        that many real seconds (with ``times=None``: an outage of that length); ``probability`` (with
        ``seed``) applies it to that share of the matching requests, repeatably."""
        body: dict[str, Any] = {"kind": kind, "path": path, "method": method, "times": times}
        for name, value in (
            ("rate", rate),
            ("size", size),
            ("length", length),
            ("for_seconds", for_seconds),
            ("probability", probability),
            ("seed", seed),
        ):
            if value is not None:
                body[name] = value
        if seconds is not None:
            body["seconds"] = seconds
        if retry_after is not None:
            body["retry_after"] = retry_after
        if status is not None:
            body["status"] = status
        result: dict[str, Any] = self._call("POST", "/faults", body)
        return result

    def outage(self, seconds: float, *, status: int = 503, retry_after: int = 1) -> dict[str, Any]:
        """Every public call answers ``status`` (429 with Retry-After ``retry_after``, or a 5xx before
        any commit) for ``seconds`` of real time; the fault it adds, as :meth:`faults` lists it."""
        body: dict[str, Any] = {"seconds": seconds, "status": status, "retry_after": retry_after}
        result: dict[str, Any] = self._call("POST", "/outage", body)
        return result

    def faults(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/faults")["faults"]
        return result

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    # -- the state machine
    def session(self, session_id: str) -> dict[str, Any]:
        """The session with internals the API hides (worker alive/phase/generation, claims, outage)."""
        result: dict[str, Any] = self._call("GET", f"/sessions/{session_id}")
        return result

    def sessions(self) -> list[dict[str, Any]]:
        """Every session's admin view, sorted by id."""
        result: list[dict[str, Any]] = self._call("GET", "/sessions")["sessions"]
        return result

    def create_session(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Create a session from a scenario-style spec: ``{"session": {...}, "turns": [...], ...}``."""
        result: dict[str, Any] = self._call("POST", "/sessions", spec)
        return result

    def fail_restore(self, session_id: str, reason: str = "restore_refused") -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/sessions/{session_id}/fail-restore", {"reason": reason})
        return result

    def fail_startup(self, session_id: str, reason: str = "startup_failed", error: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "POST", f"/sessions/{session_id}/fail-startup", {"reason": reason, "error": error}
        )
        return result

    def stop(
        self,
        session_id: str,
        code: str = "RESTORE_FAILED",
        reason: str | None = "restore_refused",
        failures: int | None = 3,
    ) -> dict[str, Any]:
        """Stop the session now (failed, recovery_required, retry_at null) with this attention."""
        result: dict[str, Any] = self._call(
            "POST", f"/sessions/{session_id}/stop", {"code": code, "reason": reason, "failures": failures}
        )
        return result

    def schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        """Plan stops: ``{"stops": [{"at", "session" | "scenario", "code", "reason", "failures"}]}``,
        ``{"burst": N, "at": …}`` and/or ``{"every": seconds, "sessions": [...]}`` (docs/sandbox.md)."""
        result: dict[str, Any] = self._call("POST", "/schedule", body)
        return result

    def scheduled(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/schedule")
        return result

    def clear_schedule(self) -> None:
        self._call("DELETE", "/schedule")

    def settle(self, session_id: str) -> dict[str, Any]:
        """The session needs no operator any more: it leaves the recovery_required listing."""
        result: dict[str, Any] = self._call("POST", f"/sessions/{session_id}/settle")
        return result

    def worker_ready(self, session_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/sessions/{session_id}/worker-ready")
        return result

    def store_outage(self, session_id: str, on: bool) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/sessions/{session_id}/store-outage", {"on": on})
        return result

    def start_turn(self, session_id: str, turn_id: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/sessions/{session_id}/turns", {"turn_id": turn_id})
        return result

    def interrupt(
        self,
        session_id: str,
        terminal_reason: str | None = "interrupt_unanswered",
        *,
        checkpoint_committed: bool = False,
        turn_id: str | None = None,
    ) -> dict[str, Any]:
        """Interrupt the running turn; ``terminal_reason`` None is a clean interrupt (needs a checkpoint)."""
        result: dict[str, Any] = self._call(
            "POST",
            f"/sessions/{session_id}/interrupt",
            {
                "terminal_reason": terminal_reason,
                "checkpoint_committed": checkpoint_committed,
                "turn_id": turn_id,
            },
        )
        return result

    def reclamation(self, session_id: str, held: bool) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/sessions/{session_id}/reclamation", {"held": held})
        return result

    def stray_workers(self, session_id: str, count: int = 1) -> dict[str, Any]:
        """Leave ``count`` containers of the session that only later scheduler passes remove: a decision
        submitted right after the pass that showed the worker gone still gets RECOVERY_REQUIRED (R3.9)."""
        result: dict[str, Any] = self._call("POST", f"/sessions/{session_id}/stray-workers", {"count": count})
        return result

    def worker_stop(self, session_id: str, kind: str = "drain", *, old_api: bool = False) -> dict[str, Any]:
        """The worker ends by pause/terminate/close/revoked rights/drain: never a counted failure (R2.15),
        except a drain released to an old API that refuses ``stop_kind`` on a restore claim (R2.16)."""
        result: dict[str, Any] = self._call(
            "POST", f"/sessions/{session_id}/worker-stop", {"kind": kind, "old_api": old_api}
        )
        return result

    # -- scenarios and logs
    def scenarios(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/scenarios")["scenarios"]
        return result

    def load_scenario(self, scenario_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/scenarios/{scenario_id}/load")
        return result

    def incident(
        self,
        count: int = 1000,
        *,
        outage_seconds: float = 600,
        seed: int = 1,
        prefix: str = "ses_inc",
        started_seconds: float = 900,
        causes: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Create a mass incident (replacing a previous one): ``{"sessions", "by_cause", "outage_until", …}``.
        ``causes`` narrows the mix (``("transient",)``: a checkpoint store's outage alone)."""
        body = {
            "count": count,
            "outage_seconds": outage_seconds,
            "seed": seed,
            "prefix": prefix,
            "started_seconds": started_seconds,
            "causes": list(causes),
        }
        result: dict[str, Any] = self._call("POST", "/incident", body)["incident"]
        return result

    def end_outage(self) -> dict[str, Any]:
        """The incident's outage ends now: its sessions' next workers come up."""
        result: dict[str, Any] = self._call("POST", "/incident/end-outage")["incident"]
        return result

    def incident_info(self) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call("GET", "/incident")["incident"]
        return result

    def traffic(
        self, *, latency_ms: float = 0, rate_limit: float | None = None, burst: float | None = None
    ) -> dict[str, Any]:
        """Latency on every public call and a per-client rate limit (429 + Retry-After past it)."""
        result: dict[str, Any] = self._call(
            "POST", "/traffic", {"latency_ms": latency_ms, "rate_limit": rate_limit, "burst": burst}
        )
        return result

    def traffic_info(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/traffic")
        return result

    def reset(self) -> None:
        self._call("POST", "/reset")

    def worker_logs(self, session_id: str) -> list[dict[str, Any]]:
        """The worker's log lines: ``[{"ts": ISO, "text": line}, ...]`` oldest first."""
        result: list[dict[str, Any]] = self._call("GET", f"/sessions/{session_id}/worker-logs")["lines"]
        return result
