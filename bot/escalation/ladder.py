"""Where a request stands on its ladder, read from the runbook's ``escalation:`` and the chain.

Two questions other parts ask (break-glass above all): has the ladder run to its end for a request
(:func:`ladder_ended`), and who may approve it now (:func:`eligible_now`). Both read the chain's
``escalation_*`` steps, never a table: a step counts once the runner recorded it, so a ladder whose
runner was down has not "ended" however late it is, and a widened group is eligible exactly when the
gate will accept its members (bot/decisions/_widening.py, the one reading of widening).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.clock import parse_time
from bot.decisions._context import DecisionContext
from bot.decisions._ladder_rows import unsaid_steps
from bot.decisions._requests import DecisionRequest
from bot.decisions._rules import same_person
from bot.decisions._widening import request_step, widened_for
from bot.runbook.escalation import EscalationSpec, LadderStep
from bot.store import Step as ChainStep
from bot.vocab import Policy, RequestState
from bot.vocab import Step as StepName

#: The chain step each ladder kind is recorded as (the expiry's announcement is ``escalation_expired``).
STEP_OF_KIND: dict[str, str] = {
    "remind": StepName.ESCALATION_REMINDED,
    "mention": StepName.ESCALATION_MENTIONED,
    "widen": StepName.ESCALATION_WIDENED,
}
LADDER_STEPS = frozenset((*STEP_OF_KIND.values(), StepName.ESCALATION_EXPIRED))
PENDING_STATES = (RequestState.REQUESTED, RequestState.RECHECK)


@dataclass(frozen=True)
class Eligible:
    """Who may approve a request now. ``anyone``: RECOVER_APPROVERS is unset, so any identifiable
    person but the requester; otherwise the listed ``users`` and ``groups`` plus those the ladder
    ``widened`` to (already included in ``users``/``groups``). The requester never is (a listed or
    widened id of the requester is left out; a group they belong to still excludes them at approval)."""

    anyone: bool
    users: tuple[str, ...]
    groups: tuple[str, ...]
    widened: tuple[str, ...]
    requester: str

    @property
    def ids(self) -> tuple[str, ...]:
        return (*self.users, *self.groups)


def spec_of(ctx: DecisionContext, request: DecisionRequest) -> EscalationSpec | None:
    """The ladder that applies to ``request``: the runbook's, for a two-person request; else None."""
    return ctx.runbooks.escalation if request.policy == Policy.TWO_PERSON else None


def ladder_steps_of(ctx: DecisionContext, request: DecisionRequest) -> list[ChainStep]:
    """The chain's ladder steps for ``request`` (oldest first)."""
    return [
        s
        for s in ctx.store.steps(session_id=request.session_id)
        if s.step in LADDER_STEPS and s.inputs.get("request_id") == request.id
    ]


def done_indexes(steps: list[ChainStep]) -> set[int]:
    """The ladder indexes the chain records as run (early by ``remind`` or at their time)."""
    out: set[int] = set()
    for s in steps:
        index = s.inputs.get("step")
        if isinstance(index, int) and s.step != StepName.ESCALATION_EXPIRED and not s.inputs.get("instead"):
            out.add(index)
    return out


def elapsed(request: DecisionRequest, now: datetime) -> float:
    created = parse_time(request.created_at)
    return 0.0 if created is None else (now - created).total_seconds()


def due_at(request: DecisionRequest, step: LadderStep) -> datetime | None:
    """When ``step`` is due for ``request`` (times count from the request)."""
    created = parse_time(request.created_at)
    return None if created is None else created + timedelta(seconds=step.after_seconds)


def ladder_ended(ctx: DecisionContext, request: DecisionRequest, now: datetime) -> bool:
    """The ladder ran to its end for a pending two-person ``request``: its last step's time has come,
    the chain records that step, and no step of it is unsaid (a step the front had nowhere to post, or
    whose post Slack did not confirm, was seen by nobody)."""
    spec = spec_of(ctx, request)
    if spec is None or request.state not in PENDING_STATES or not spec.ended(elapsed(request, now)):
        return False
    if unsaid_steps(ctx.store, request.id):
        return False
    return len(spec.steps) - 1 in done_indexes(ladder_steps_of(ctx, request))


def eligible_now(ctx: DecisionContext, request: DecisionRequest, now: datetime) -> Eligible:
    """Who may approve ``request`` at ``now``: RECOVER_APPROVERS plus what its ladder widened to as the
    chain records it (the same reading the approval and the gate use)."""
    steps = list(ctx.store.steps(session_id=request.session_id))
    made = request_step(steps, request.id)
    widened = widened_for(spec_of(ctx, request), made, steps, now) if made is not None else ()
    anyone = not ctx.approvers
    listed = () if anyone else (*ctx.approvers, *(w for w in widened if w not in ctx.approvers))
    not_requester = [i for i in listed if not same_person(i, request.requester, ctx.console_users)]
    return Eligible(
        anyone=anyone,
        users=tuple(i for i in not_requester if not i.startswith("S")),
        groups=tuple(i for i in not_requester if i.startswith("S")),
        widened=() if anyone else tuple(widened),
        requester=request.requester,
    )


def next_step(ctx: DecisionContext, request: DecisionRequest) -> tuple[int, LadderStep, datetime | None] | None:
    """The first ladder step the chain does not record yet, and when it is due; None at the end."""
    spec = spec_of(ctx, request)
    if spec is None:
        return None
    done = done_indexes(ladder_steps_of(ctx, request))
    for i, step in enumerate(spec.steps):
        if i not in done:
            return i, step, due_at(request, step)
    return None


__all__ = [
    "LADDER_STEPS",
    "PENDING_STATES",
    "STEP_OF_KIND",
    "Eligible",
    "done_indexes",
    "due_at",
    "eligible_now",
    "ladder_ended",
    "ladder_steps_of",
    "next_step",
    "spec_of",
]
