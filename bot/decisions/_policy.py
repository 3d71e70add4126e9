"""What the decisions core reads from the runbook YAML, through the loaded :class:`RunbookSet`.

Policies, expiry, thresholds, durations, the request's shape, the advice for API errors and the next
step after verification come only from the YAML; this module turns the runbook model into the few
plain values the core needs, so the rest of the package does not depend on the model's layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.decisions._requests import DecisionRequest
from bot.errors import DecisionError
from bot.runbook.conditions import Context, pick_text, render
from bot.runbook.model import DecisionSpec, RunbookSet, Texts

# The one refusal the bot waits out rather than refuses: the worker is not yet confirmed gone (R3.9).
WAITABLE = "RECOVERY_REQUIRED"


def flags_of(req: DecisionRequest | None = None, **given: str | bool | None) -> dict[str, str | bool | None]:
    """The flags a decision is checked and built with: a stored request's, or those given to decide."""
    if req is not None:
        return {
            "turn": req.turn_id,
            "evidence": req.evidence_ref,
            "effects": req.effects,
            "reason": req.reason,
            "yes": True,
        }
    return dict(given)


@dataclass(frozen=True)
class Limits:
    """Durations and thresholds from the runbook's ``limits``."""

    recovery_wait_poll: float
    recovery_wait_max: float
    resume_backoff_initial: float
    resume_backoff_max: float
    resume_backoff_total: float
    approval_expiry: float
    repeated_threshold: int


@dataclass(frozen=True)
class Advice:
    """The runbook's advice for an API error code, and its bounded wait if it has one."""

    code: str
    text: str
    rules: tuple[str, ...]
    every: float | None = None
    up_to: float | None = None
    max_every: float | None = None


@dataclass(frozen=True)
class NextStep:
    """A step after an accepted decision (the runbook's ``verify.next``): what to say, what it suggests."""

    say: str
    suggest: tuple[str, ...]
    rules: tuple[str, ...]


@dataclass(frozen=True)
class DecisionPolicy:
    """One decision as the runbook defines it."""

    name: str
    approval: str  # two_person | confirm | none
    expiry_seconds: float
    required: tuple[str, ...]
    rules: tuple[str, ...]
    repeat_threshold: int
    spec: DecisionSpec

    def drops(self, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> str | None:
        return _render(self.spec.drops, facts, flags)

    def warning(self, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> str | None:
        return _render(self.spec.warning, facts, flags)

    def confirm_text(self, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> str | None:
        approval = self.spec.approval
        return _render(approval.confirm_text if approval is not None else None, facts, flags)

    def accepted_when(self) -> list[str]:
        """The acceptance checks in the API's order, as the runbook words them (for REQUEST_STALE)."""
        return [f"{p.id} ({p.code})" for p in self.spec.preconditions]

    def request(
        self, session_id: str, facts: Mapping[str, Any], flags: Mapping[str, Any]
    ) -> tuple[str, str, dict[str, Any]]:
        """Method, path and body, built from the runbook's request spec (``arg:``/``flag:``/``fact:``/``const:``)."""
        req = self.spec.request
        body: dict[str, Any] = {}
        for field_name, source in req.body.items():
            kind, _, name = str(source).partition(":")
            if kind == "const":
                value: object = name
            elif kind == "arg":
                value = {"decision": self.name, "session_id": session_id}.get(name, flags.get(name))
            elif kind == "flag":
                value = flags.get(name)
            elif kind == "fact":
                value = facts.get(name)
            else:
                raise DecisionError(f"the runbook's request body for {self.name} has an unknown source {source!r}")
            if value in (None, "") and (field_name in req.optional or kind == "flag"):
                continue
            body[field_name] = value
        return req.method, req.path.replace("{session_id}", session_id), body

    def advice(
        self, code: str, facts: Mapping[str, Any], flags: Mapping[str, Any], runbooks: RunbookSet
    ) -> Advice | None:
        spec = self.spec.on_error.get(code)
        if spec is None:
            return None
        wait = spec.wait
        return Advice(
            code=code,
            text=_render(spec.advice, facts, flags) or "",
            rules=tuple(spec.rules),
            every=runbooks.limit(wait.every) if wait else None,
            up_to=runbooks.limit(wait.up_to) if wait else None,
            max_every=runbooks.limit(wait.max_every) if wait and wait.max_every else None,
        )

    def report(self) -> list[str]:
        return list(self.spec.verify.report)

    def next_step(self, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> NextStep | None:
        """The first ``verify.next`` entry whose condition is definitely true (R5.1, R3.12)."""
        ctx = Context(facts=dict(facts), flags=dict(flags))
        for step in self.spec.verify.next:
            cond = step._cond
            if cond is None or cond.evaluate(ctx) is True:
                return NextStep(
                    _render(step.say, facts, flags) or "",
                    tuple(step.suggest),
                    tuple(step.rules or self.spec.verify.rules),
                )
        return None


def _render(template: Texts | None, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> str | None:
    """A template, or the variant of a conditional text that holds for these facts and flags."""
    template = pick_text(template, Context(facts=dict(facts), flags=dict(flags)))
    if not template:
        return None
    values: dict[str, Any] = dict(facts)
    values.update({f"flag.{k}": v for k, v in flags.items()})
    return render(template, values)


def decision_policy(runbooks: RunbookSet, name: str, limits: Limits) -> DecisionPolicy:
    """The runbook's definition of ``name``; an unknown decision is refused with the known ones."""
    decisions = runbooks.decisions
    if name not in decisions:
        known = ", ".join(runbooks.decidable) or "none"
        raise DecisionError(f"unknown decision {name!r}", hint=f"The runbook defines: {known}.")
    spec = decisions[name]
    approval = spec.approval
    policy = approval.policy if approval is not None and approval.policy else "none"
    return DecisionPolicy(
        name=name,
        approval=policy,
        # The one expiry rule (the ladder's expiry for a two-person decision); the request's
        # ``expires_at``, bound by its content hash, is made from it and the gate reads only that.
        expiry_seconds=runbooks.approval_expiry(name)
        if approval is not None and approval.expires is not None
        else limits.approval_expiry,
        required=tuple(runbooks.required_flags(name)),
        rules=tuple(spec.rules),
        repeat_threshold=int(spec.repeat_threshold or limits.repeated_threshold),
        spec=spec,
    )


def runbook_limits(runbooks: RunbookSet) -> Limits:
    """The runbook's limits (a missing one is a runbook error, reported by name)."""
    try:
        return Limits(
            recovery_wait_poll=runbooks.limit("recovery_required_poll"),
            recovery_wait_max=runbooks.limit("recovery_required_wait"),
            resume_backoff_initial=runbooks.limit("resume_backoff_initial"),
            resume_backoff_max=runbooks.limit("resume_backoff_max"),
            resume_backoff_total=runbooks.limit("resume_retry_for"),
            approval_expiry=runbooks.limit("approval_expiry"),
            repeated_threshold=runbooks.limit_int("repeated_decision_threshold"),
        )
    except KeyError as exc:
        raise DecisionError(f"the runbook lacks a limit the decisions need: {exc}") from exc
