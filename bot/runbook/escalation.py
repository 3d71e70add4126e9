"""The escalation ladder of two-person requests, and when break-glass is allowed: runbook data.

A pending ``close``/``abandon``/``confirm_completed`` request otherwise waits for someone to notice it
and dies unseen at its expiry. The ladder says, counted from the request (never from the previous step),
when to remind in the request's thread, when to mention the eligible approvers, when to widen the
eligible approvers to further named groups, and when the request expires (announced in the thread and
the hand-off). Its last step is the ladder's end: break-glass is allowed from then until the expiry,
for the decisions ``break_glass.decisions`` names, under the conditions ``break_glass.when`` names.

Every time is a ``{duration: …}`` value, like those under ``limits:``; a few seconds are accepted, so
tests can run the ladder on a short clock.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from bot.runbook.installation import LimitSpec
from bot.runbook.values import Model

#: What a ladder step does (its ``kind``).
StepKind = Literal["remind", "mention", "widen"]

#: The break-glass conditions a runbook may name: the ladder ran to its end with no eligible approver
#: answering; or no eligible approver other than the requester exists at all.
BreakGlassCondition = Literal["ladder_ended", "no_other_approver"]

_DEFAULT_CONDITIONS: tuple[BreakGlassCondition, ...] = ("ladder_ended", "no_other_approver")
_GROUP_OR_USER = r"^[SU][A-Z0-9]{2,}$"


class LadderStep(Model):
    """One rung: ``remind`` (a thread message that mentions nobody), ``mention`` (the eligible
    approvers, one ``<@U…>`` each, groups as ``<!subteam^S…>``), or ``widen`` (``groups``, ``S…``
    user groups or ``U…`` ids, become eligible approvers from then on; never the requester)."""

    kind: StepKind
    after: LimitSpec
    groups: list[Annotated[str, Field(pattern=_GROUP_OR_USER)]] = Field(default_factory=list)
    help: str = ""
    rules: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _shape(self) -> LadderStep:
        if self.after.duration is None:
            raise ValueError("'after' must be a {duration: …} value (counted from the request)")
        if self.groups and self.kind != "widen":
            raise ValueError(f"only a 'widen' step names groups, not a {self.kind!r} step")
        return self

    @property
    def after_seconds(self) -> float:
        assert self.after.duration is not None
        return float(self.after.duration)


class BreakGlassSpec(Model):
    """Which two-person decisions the requester may send alone, and when (any one condition suffices)."""

    decisions: list[str] = Field(default_factory=lambda: ["close", "abandon"])
    when: list[BreakGlassCondition] = Field(default_factory=lambda: list(_DEFAULT_CONDITIONS))
    rules: list[str] = Field(default_factory=list)


class EscalationSpec(Model):
    """The ladder (``steps``, in increasing ``after`` order, all before ``expiry``), the two-person
    ``expiry``, how often the requester's ``remind`` may run (``remind_interval``) and how often the
    live "expires in …" line of a request may be edited (``live_update``, Slack allows ~1/min)."""

    steps: list[LadderStep] = Field(min_length=1)
    expiry: LimitSpec
    remind_interval: LimitSpec = Field(
        default_factory=lambda: LimitSpec(duration=300.0, help="remind at most this often")
    )
    live_update: LimitSpec = Field(
        default_factory=lambda: LimitSpec(duration=60.0, help="edit the live line at most this often")
    )
    break_glass: BreakGlassSpec = Field(default_factory=BreakGlassSpec)
    rules: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _order(self) -> EscalationSpec:
        for name in ("expiry", "remind_interval", "live_update"):
            if getattr(self, name).duration is None:
                raise ValueError(f"'{name}' must be a {{duration: …}} value")
        previous = 0.0
        for i, step in enumerate(self.steps):
            if step.after_seconds <= previous:
                raise ValueError(
                    f"steps[{i}] ({step.kind}) comes at {step.after_seconds:g}s, not after the step before "
                    f"it ({previous:g}s): times count from the request and must increase"
                )
            previous = step.after_seconds
        if previous >= self.expiry_seconds:
            raise ValueError(
                f"the ladder's last step ({previous:g}s) must come before the expiry ({self.expiry_seconds:g}s): "
                "break-glass is allowed from the ladder's end until the expiry"
            )
        return self

    @property
    def expiry_seconds(self) -> float:
        assert self.expiry.duration is not None
        return float(self.expiry.duration)

    @property
    def end_seconds(self) -> float:
        """The ladder's end (its last step), counted from the request."""
        return self.steps[-1].after_seconds

    @property
    def remind_interval_seconds(self) -> float:
        assert self.remind_interval.duration is not None
        return float(self.remind_interval.duration)

    @property
    def live_update_seconds(self) -> float:
        assert self.live_update.duration is not None
        return float(self.live_update.duration)

    def due(self, elapsed: float) -> list[tuple[int, LadderStep]]:
        """The steps (index, step) due ``elapsed`` seconds after the request, in ladder order."""
        return [(i, s) for i, s in enumerate(self.steps) if s.after_seconds <= elapsed]

    def widened_groups(self, elapsed: float) -> tuple[str, ...]:
        """The groups and ids ``widen`` steps due by ``elapsed`` made eligible (in ladder order)."""
        out: list[str] = []
        for _i, step in self.due(elapsed):
            if step.kind == "widen":
                out.extend(g for g in step.groups if g not in out)
        return tuple(out)

    def ended(self, elapsed: float) -> bool:
        """The ladder ran to its end (break-glass may be allowed from here until the expiry)."""
        return elapsed >= self.end_seconds

    def allows_break_glass(self, decision: str) -> bool:
        return decision in self.break_glass.decisions


__all__ = ["BreakGlassCondition", "BreakGlassSpec", "EscalationSpec", "LadderStep", "StepKind"]
