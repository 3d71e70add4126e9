"""A mass incident: many sessions stuck at once, with the mix of causes a real outage leaves behind.

When a checkpoint store or a repository host goes down, hundreds of sessions hit the restore or
start-up limit together (R2.1, R2.7, R2.12), interrupts lose their answers (R3.1) and the rest wait in
backoff. This module only *builds* such sessions (scenario-shaped specs, deterministic for a seed) and
says how each cause's next workers behave; ``_incident_run`` applies it as the sandbox clock moves.

Causes, and what a new worker of that session does (``worker_plan``):

- ``transient`` (RESTORE_FAILED ``restore_unavailable``, stopped at the limit): the store was out. A
  new worker retries inside (R2.6) until the outage ends, then restores and stays up.
- ``execution_gone`` (RESTORE_FAILED ``execution_gone``): workers were killed on overloaded nodes;
  during the outage a new worker dies again after 20 s, afterwards it stays up.
- ``permanent`` (RESTORE_FAILED ``restore_refused``, 404 NoSuchKey): the checkpoint is gone for good;
  a restoring worker fails again at once (R2.8); without the checkpoint (start_fresh) it stays up
  once the outage is over.
- ``incompatible`` (RESTORE_FAILED ``incompatible_checkpoint``, one failure, R2.3): a restoring worker
  fails at once and stops again; start_fresh works once the outage is over.
- ``startup`` (STARTUP_FAILED ``store_unavailable``, no checkpoint): like ``transient`` (R2.12).
- ``unknown`` (an ``outcome_unknown`` turn, R3.1): most workers confirmed gone, some not yet (R3.9).
- ``backoff`` (RESTORE_FAILED / STARTUP_FAILED, 1–2 failures, ``retry_at`` ahead, admission open):
  the scheduler relaunches them after ``retry_at``; the new worker behaves like ``transient``.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.clock import isoformat

# Shares of the mix, in this order (sum 100): the API's recovery_required list holds all but backoff.
MIX: tuple[tuple[str, int], ...] = (
    ("transient", 30),
    ("execution_gone", 8),
    ("permanent", 8),
    ("incompatible", 6),
    ("startup", 16),
    ("unknown", 14),
    ("backoff", 18),
)
CAUSES = tuple(name for name, _ in MIX)
RESTORING_FAILS_AT_ONCE = {"permanent": "restore_refused", "incompatible": "incompatible_checkpoint"}
KILLED_AFTER_SECONDS = 20.0
READY_AFTER_SECONDS = 1.0
MAX_SESSIONS = 20_000


@dataclass(frozen=True)
class Incident:
    """The incident in force: when its outage ends, and how many sessions of each cause it made."""

    started_at: datetime
    outage_until: datetime
    prefix: str
    counts: dict[str, int]

    def active(self, now: datetime) -> bool:
        return now < self.outage_until

    def ended(self, now: datetime) -> Incident:
        """The same incident, its outage over at ``now`` (the store answers again)."""
        return dataclasses.replace(self, outage_until=min(self.outage_until, now))

    def to_json(self, now: datetime) -> dict[str, Any]:
        return {
            "started_at": isoformat(self.started_at),
            "outage_until": isoformat(self.outage_until),
            "outage_active": self.active(now),
            "prefix": self.prefix,
            "sessions": sum(self.counts.values()),
            "by_cause": dict(self.counts),
        }


def assign_causes(count: int, seed: int, only: tuple[str, ...] = ()) -> list[str]:
    """``count`` causes in the :data:`MIX` proportions (rounded, every cause present when count >= 7),
    shuffled deterministically by ``seed``. ``only``: the mix narrowed to these causes (their shares
    kept in proportion), e.g. ``("transient",)`` for a checkpoint store's outage and nothing else."""
    if not 1 <= count <= MAX_SESSIONS:
        raise ValueError(f"an incident has 1 to {MAX_SESSIONS} sessions")
    unknown = [c for c in only if c not in CAUSES]
    if unknown:
        raise ValueError(f"unknown cause {unknown[0]!r}: one of {', '.join(CAUSES)}")
    mix = [(name, share) for name, share in MIX if not only or name in only]
    total = sum(share for _, share in mix)
    causes: list[str] = []
    for name, share in mix:
        causes.extend([name] * max(1 if count >= len(mix) else 0, round(count * share / total)))
    causes = causes[:count]
    while len(causes) < count:
        causes.append(mix[len(causes) % len(mix)][0])
    random.Random(seed).shuffle(causes)
    return causes


def session_spec(index: int, cause: str, prefix: str, rng: random.Random, started: float) -> dict[str, Any]:
    """A scenario-shaped spec (session, turns, events, worker_logs) for one incident session.

    Times are seconds relative to now; ``started`` is how long ago the outage began (> 300).
    """
    sid = f"{prefix}_{index:05d}"
    first = -started + rng.uniform(0, 120)  # the first failure, early in the outage
    last = min(-5.0, first + rng.uniform(90, started - 60))  # when the session stopped (or last failed)
    checkpoint = {"id": f"ckpt_{sid}", "committed_at": first - 3600, "covers_turn_id": f"turn_{sid}_1"}
    turns: list[dict[str, Any]] = [
        {"id": f"turn_{sid}_1", "status": "completed", "started_at": first - 3700, "ended_at": first - 3600}
    ]
    session: dict[str, Any] = {
        "id": sid,
        "status": "failed",
        "admission_state": "recovery_required",
        "revision": 10 + rng.randrange(40),
        "resumable": False,
        "queued_inputs": rng.randrange(4),
        "checkpoint": checkpoint,
        "execution": {"state": "gone", "confirmed_gone_at": last + 5, "started_at": last - 30, "generation": 3},
    }
    events: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []

    def claim(at: float, generation: int, restore: bool) -> None:
        logs.append(
            {
                "at": at,
                "json": {
                    "level": "info",
                    "event": "worker.claimed",
                    "session_id": sid,
                    "generation": generation,
                    "restore": restore,
                },
            }
        )

    def failures(code: str, reason: str, times: list[float], stopped: bool, error: str) -> None:
        """One failure event (and its log lines) per time; 30 s then 60 s of backoff after each (R2.1)."""
        name = "checkpoint_restore_failed" if code == "RESTORE_FAILED" else "startup_failed"
        for i, at in enumerate(times, start=1):
            final = i == len(times)
            retry_at = None if (final and stopped) else at + (30 if i == 1 else 60)
            events.append({"name": name, "reason": reason, "failures": i, "retry_at": retry_at, "at": at})
            claim(at - 20, i, code == "RESTORE_FAILED")
            if code == "RESTORE_FAILED" and reason == "restore_unavailable":
                logs.append(
                    {
                        "at": at - 1,
                        "json": {
                            "level": "warn",
                            "event": "worker.checkpoint.restore_unavailable",
                            "session_id": sid,
                            "attempt": 130,
                            "error": "connect ECONNREFUSED object-store:9000",
                        },
                    }
                )
            elif code == "RESTORE_FAILED" and reason == "execution_gone":
                logs.append({"at": at - 1, "text": "Killed"})
            elif code == "RESTORE_FAILED":
                logs.append(
                    {
                        "at": at - 1,
                        "json": {
                            "level": "error",
                            "event": "worker.checkpoint.restore_refused",
                            "session_id": sid,
                            "code": error,
                            "checkpoint_id": checkpoint["id"],
                        },
                    }
                )
            else:
                logs.append({"at": at - 1, "text": f'worker.stopping kind=failed session_id={sid} error="{error}"'})
            logs.append(
                {"at": at, "json": {"level": "error", "event": "worker.failed", "session_id": sid, "error": reason}}
            )
        session["attention"] = {
            "code": code,
            "reason": reason,
            "failures": len(times),
            "retry_at": events[-1]["retry_at"],
        }

    three = [first, first + 35, max(first + 100, last)]  # each after the previous backoff ended
    if cause == "transient":
        failures("RESTORE_FAILED", "restore_unavailable", three, True, "store unavailable")
    elif cause == "execution_gone":
        failures("RESTORE_FAILED", "execution_gone", three, True, "Killed")
    elif cause == "permanent":
        failures("RESTORE_FAILED", "restore_refused", three, True, "CHECKPOINT_UNAVAILABLE: 404 NoSuchKey")
    elif cause == "incompatible":
        failures("RESTORE_FAILED", "incompatible_checkpoint", [last], True, "INCOMPATIBLE_CHECKPOINT")
    elif cause == "startup":
        session["checkpoint"] = None
        turns = []
        failures("STARTUP_FAILED", "store_unavailable", three, True, "transcript store unavailable")
    elif cause == "unknown":
        reason = rng.choice(["interrupt_unanswered", "interrupt_checkpoint_unavailable"])
        tid = f"turn_{sid}_2"
        turns.append(
            {
                "id": tid,
                "status": "outcome_unknown",
                "terminal_reason": reason,
                "control_id": f"ctl_{sid}",
                "started_at": last - 300,
                "ended_at": last,
            }
        )
        session["attention"] = {"code": "OUTCOME_UNKNOWN", "reason": reason, "failures": None, "retry_at": None}
        if rng.random() < 0.25:  # not yet confirmed gone: abandon gets RECOVERY_REQUIRED until a pass (R3.9)
            session["execution"] = {
                "state": "running" if reason == "interrupt_unanswered" else "draining",
                "alive": False,
                "started_at": last - 600,
                "generation": 2,
            }
        events.append({"name": "turn_outcome_unknown", "turn_id": tid, "terminal_reason": reason, "at": last})
        logs.append(
            {"at": last - 1, "text": f"turn {tid} gave no terminal within 5000ms of its interrupt session_id={sid}"}
        )
        logs.append(
            {
                "at": last,
                "json": {
                    "level": "warn",
                    "event": "control.result",
                    "session_id": sid,
                    "turn_id": tid,
                    "operation": "interrupt",
                    "outcome": "unknown",
                    "reason_code": "deadline_exceeded",
                    "effect_ms": 6000,
                    "duration_ms": 6000,
                },
            }
        )
    else:  # backoff: failing, not stopped; the scheduler relaunches it after retry_at
        restore = rng.random() < 0.6
        n = rng.choice([1, 2])
        t = -rng.uniform(1, 20)
        session.update({"status": "idle", "admission_state": "open"})
        session["execution"] = {
            "state": "draining",
            "alive": False,
            "phase": "starting",
            "started_at": t - 10,
            "generation": n,
        }
        if not restore:
            session["checkpoint"] = None
            turns = []
        code, reason = ("RESTORE_FAILED", "restore_unavailable") if restore else ("STARTUP_FAILED", "store_unavailable")
        # The 2nd failure came after the 1st one's 30 s backoff; the last backoff is still ahead.
        failures(code, reason, [t] if n == 1 else [t - 40, t], False, "store unavailable")
    return {"session": session, "turns": turns, "events": events, "worker_logs": logs}


def worker_plan(cause: str, restoring: bool, launched: datetime, incident: Incident) -> tuple[str, datetime, str]:
    """What a newly launched worker of an incident session does: ``("fail", at, reason)`` or
    ``("ready", at, "")``. During the outage a worker that will be ready waits inside (R2.6)."""
    if restoring and cause in RESTORING_FAILS_AT_ONCE:
        return "fail", launched + timedelta(seconds=2), RESTORING_FAILS_AT_ONCE[cause]
    if cause == "execution_gone" and incident.active(launched):
        return "fail", launched + timedelta(seconds=KILLED_AFTER_SECONDS), "execution_gone"
    return "ready", max(launched + timedelta(seconds=READY_AFTER_SECONDS), incident.outage_until), ""
