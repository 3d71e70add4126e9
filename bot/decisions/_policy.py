"""What the decisions core reads from the runbook YAML, in one small typed shape.

Policies, expiry, thresholds and durations come only from the YAML (``bot.runbook``); this module
only adapts the runbook model to the few values the core needs, so the rest of the package does not
depend on the model's layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.errors import DecisionError


@dataclass(frozen=True)
class DecisionPolicy:
    """One decision as the runbook defines it."""

    name: str
    approval: str  # two_person | confirm | none
    expiry_seconds: float
    required: tuple[str, ...]  # flags: turn, evidence, effects, reason
    drops: str | None
    rules: tuple[str, ...]
    summary: str | None = None
    accepted_when: str | None = None
    checks_after: tuple[str, ...] = ()
    raw: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Limits:
    """Durations and thresholds (runbook YAML ``limits``)."""

    recovery_wait_poll: float
    recovery_wait_max: float
    resume_backoff_initial: float
    resume_backoff_max: float
    resume_backoff_total: float
    approval_expiry: float
    repeated_threshold: int


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if isinstance(obj, Mapping) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


def _seconds(value: Any) -> float | None:
    if value is None:
        return None
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def decision_policy(runbooks: Any, name: str, limits: Limits) -> DecisionPolicy:
    """The runbook's definition of ``name``; an unknown decision is refused with the known ones."""
    decisions = _get(runbooks, "decisions", default={}) or {}
    if name not in decisions:
        known = ", ".join(sorted(decisions)) or "none"
        raise DecisionError(f"unknown decision {name!r}", hint=f"The runbook defines: {known}.")
    d = decisions[name]
    approval = _get(d, "approval", "policy", default=None)
    approval = str(_get(approval, "policy", "kind", default=approval) or "none")
    expiry = _seconds(_get(_get(d, "approval", default=None), "expiry", "expiry_seconds", default=None))
    if expiry is None:
        expiry = _seconds(_get(d, "expiry", "expiry_seconds", default=None))
    required = tuple(str(x) for x in (_get(d, "required", "required_flags", "requires", default=()) or ()))
    rules = tuple(str(x) for x in (_get(d, "rules", default=()) or ()))
    checks = _get(d, "checks_after", "after", default=()) or ()
    if isinstance(checks, str):
        checks = (checks,)
    return DecisionPolicy(
        name=name,
        approval=approval,
        expiry_seconds=expiry if expiry is not None else limits.approval_expiry,
        required=required,
        drops=_get(d, "drops", default=None),
        rules=rules,
        summary=_get(d, "summary", "title", "description", default=None),
        accepted_when=_get(d, "accepted_when", "valid_when_text", "when", default=None),
        checks_after=tuple(str(c) for c in checks),
        raw=d,
    )


def runbook_limits(runbooks: Any) -> Limits:
    """The runbook's limits (bounds for waits, backoff, expiry, the repeated-decision threshold)."""

    def lim(name: str) -> Any:
        fn = getattr(runbooks, "limit", None)
        if fn is None:
            raise DecisionError(f"the runbook set has no limits (needed: {name})")
        return fn(name)

    rr = lim("recovery_required_wait")
    rb = lim("resume_backoff")
    return Limits(
        recovery_wait_poll=_seconds(_get(rr, "poll", "poll_seconds", "every")) or 15.0,
        recovery_wait_max=_seconds(_get(rr, "max", "max_seconds", "up_to")) or 600.0,
        resume_backoff_initial=_seconds(_get(rb, "initial", "initial_seconds", "start")) or 1.0,
        resume_backoff_max=_seconds(_get(rb, "max_delay", "cap", "max_seconds")) or 30.0,
        resume_backoff_total=_seconds(_get(rb, "total", "for", "max_total", "up_to")) or 600.0,
        approval_expiry=_seconds(lim("approval_expiry")) or 1800.0,
        repeated_threshold=int(lim("repeated_decision_threshold") or 2),
    )
