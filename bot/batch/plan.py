"""Which sessions a batch binds, which it leaves out and why (pure: no I/O).

Each candidate is judged by the runbook's own evaluation (bot.runbook.evaluate.check_decision)
against the facts it was read with. ``retry_restore`` also leaves out what a retry cannot cure — an
incompatible checkpoint (R2.3, R5.3) or permanent damage (R2.8) — unless ``--cause-fixed`` says what
changed, and a session where the same decision already ran the threshold's number of times without
curing the same attention (R5.4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.decisions import incurable_cause
from bot.runbook import RunbookSet
from bot.runbook.evaluate import check_decision
from bot.vocab import Decision


@dataclass
class Candidate:
    session_id: str
    revision: int | None
    facts: dict[str, Any]
    branch: str | None = None
    damage: bool = False  # the group's examples showed permanent damage in the worker logs


@dataclass
class Plan:
    members: list[Candidate] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)

    def leave_out(self, c: Candidate, why: str, rule: str | None = None) -> None:
        self.excluded.append({"session_id": c.session_id, "why": why, "rule": rule})


def incurable(c: Candidate) -> tuple[str, str] | None:
    """(why, rule) when retry_restore cannot cure this session's cause (the one check, shared with decide)."""
    return incurable_cause(c.facts, branch=c.branch, damage=c.damage)


def plan(
    runbooks: RunbookSet,
    decision: str,
    candidates: list[Candidate],
    *,
    reason: str,
    cause_fixed: str | None,
    repeated: Callable[[Candidate], int],
) -> Plan:
    """Split candidates into members and the ones left out, with the reason for each. ``repeated``:
    the decisions' R5.4 count to flag (0 below the runbook's threshold), as a single decide reads it."""
    out = Plan()
    flags: Mapping[str, Any] = {"reason": reason, "yes": True}
    for c in candidates:
        verdict = check_decision(runbooks, decision, c.facts, flags)
        if not verdict.ok:
            code = f"{verdict.status} {verdict.code}: " if verdict.code else ""
            out.leave_out(c, f"{code}{verdict.reason}", verdict.rules[0] if verdict.rules else None)
            continue
        if decision == Decision.RETRY_RESTORE and not cause_fixed:
            bad = incurable(c)
            if bad is not None:
                out.leave_out(c, bad[0] + ' (say what changed with --cause-fixed "…")', bad[1])
                continue
        if decision == Decision.RETRY_RESTORE and not cause_fixed:
            done = repeated(c)
            if done > 0:
                out.leave_out(
                    c,
                    f"retry_restore already applied {done} time(s) with the same attention: the cause is not "
                    'fixed; do not paper over it with repeats (say what changed with --cause-fixed "…")',
                    "R5.4",
                )
                continue
        out.members.append(c)
    return out
