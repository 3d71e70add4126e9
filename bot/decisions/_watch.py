"""What a re-read of a session shows after an accepted decision: recovered, failed again, or not yet.

Why its own module: acceptance is not the worker being gone nor a successful resume (R5.1, R5.2), so a
case stays open, *verifying*, after an accepted ``retry_restore``, ``start_fresh`` or resume, and
closes only on an observed recovery. The judgement is pure (facts in, observation out) so every path
that re-reads a session — the verification right after the receipt, the periodic sweep, a diagnosis —
judges it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.clock import isoformat, parse_time

VERIFYING = "verifying"
RECOVERED = "recovered"
FAILED_AGAIN = "failed_again"
GAVE_UP = "unconfirmed"
_COUNTED = ("RESTORE_FAILED", "STARTUP_FAILED")


@dataclass(frozen=True)
class Watch:
    """An open verification: which decision, since when, how often to look, the start-up window."""

    decision: str
    since: str
    every: float
    window: float
    last_turn_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "since": self.since,
            "every": self.every,
            "window": self.window,
            "last_turn_id": self.last_turn_id,
        }

    @classmethod
    def parse(cls, data: object) -> Watch | None:
        if not isinstance(data, Mapping):
            return None
        try:
            return cls(
                decision=str(data["decision"]),
                since=str(data["since"]),
                every=float(data["every"]),
                window=float(data["window"]),
                last_turn_id=data.get("last_turn_id") if isinstance(data.get("last_turn_id"), str) else None,
            )
        except (KeyError, TypeError, ValueError):
            return None

    def window_ends(self) -> datetime | None:
        since = parse_time(self.since)
        return since + timedelta(seconds=self.window) if since is not None else None


@dataclass(frozen=True)
class Observation:
    """One re-read's verdict and the sentence people read in the case thread."""

    state: str
    why: str


def observe(watch: Watch, facts: Mapping[str, Any], newest_turn_id: str | None, now: datetime) -> Observation:
    """Judge a re-read (R5.1, R5.2, R2.2): the facts decide, never the receipt."""
    status = facts.get("session.status")
    admission = facts.get("session.admission_state")
    code = facts.get("attention.code")
    failures = facts.get("attention.failures")
    if status == "closed" or admission == "closed":
        return Observation(RECOVERED, "the session is closed")
    if facts.get("unknown_turn.present") is True:
        turn = facts.get("unknown_turn.id") or "a turn"
        return Observation(FAILED_AGAIN, f"turn {turn} ended outcome_unknown ({facts.get('unknown_turn.terminal_reason') or 'no terminal_reason'})")
    if code in _COUNTED and isinstance(failures, int) and failures > 0:
        reason = facts.get("attention.reason") or "no reason given"
        retry_at = facts.get("attention.retry_at")
        when = f", next attempt at {retry_at}" if retry_at else ", stopped (retry_at null)"
        return Observation(FAILED_AGAIN, f"{code} again ({reason}), failures {failures}{when}")
    if admission == "recovery_required" or status == "failed":
        return Observation(FAILED_AGAIN, f"the session is {status}, admission {admission}" + (f", attention {code}" if code else ""))
    running = status in ("running", "idle") and admission == "open"
    if watch.decision == "resume":
        if newest_turn_id is not None and newest_turn_id != watch.last_turn_id and running:
            return Observation(
                RECOVERED,
                f"a new turn ({newest_turn_id}) ran after the resume; check that it picked up the "
                "checkpoint's context (R5.2)",
            )
    elif running and facts.get("attention.present") is False:
        return Observation(RECOVERED, "the next worker reported ready (the attention cleared)")
    ends = watch.window_ends()
    if running and ends is not None and now >= ends and (failures in (0, None)):
        return Observation(
            RECOVERED,
            f"running past the start-up window ({isoformat(ends)}) with no failure counted",
        )
    return Observation(VERIFYING, _waiting(watch, facts, ends))


def _waiting(watch: Watch, facts: Mapping[str, Any], ends: datetime | None) -> str:
    until = isoformat(ends) if ends is not None else "unknown"
    if watch.decision == "resume":
        return f"waiting for a new turn after the resume, or for the start-up window to pass ({until})"
    return (
        f"waiting for the next worker to report ready, or for the start-up window to pass ({until}); "
        f"now status {facts.get('session.status')}, failures {_none(facts.get('attention.failures'))}"
    )


def _none(value: object) -> str:
    """None for none (no attention block), as everywhere in the bot's words."""
    return "none" if value is None else str(value)
