"""Who a request's escalation ladder widened its approvers to, read from the chain: one reading for
the approval (what it records) and the gate (what it accepts).

A ``widen`` step of the runbook's ``escalation:`` makes further groups or people eligible approvers,
counted from the request. The ladder's runner records each step it runs as an ``escalation_widened``
chain step (bot/escalation). An id counts as widened for an approval at time ``at`` only when both
hold: today's ladder has a ``widen`` step naming it due at ``at`` (counted from the request step), and
the chain has an intact ``escalation_widened`` step for that request, naming it, before the approval.
Neither alone suffices: a runbook edit cannot widen past approvals, a step cannot widen early.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from bot.clock import parse_time
from bot.runbook.escalation import EscalationSpec
from bot.store import Step

WIDENED = "escalation_widened"


def widened_for(
    escalation: EscalationSpec | None,
    made: Step,
    steps: Iterable[Step],
    at: datetime | None,
    *,
    before_seq: int | None = None,
    intact: Callable[[Step], bool] = lambda _s: True,
) -> tuple[str, ...]:
    """The ids the ladder widened ``made``'s request to at ``at`` (see the module docstring).

    ``steps``: the chain's steps about the request; ``before_seq``: only steps before the approval's.
    """
    requested_at = parse_time(made.at)
    if escalation is None or at is None or requested_at is None:
        return ()
    due = set(escalation.widened_groups((at - requested_at).total_seconds()))
    request_id = (made.detail or {}).get("request_id")
    out: list[str] = []
    for s in steps:
        if s.step != WIDENED or s.inputs.get("request_id") != request_id or s.seq <= made.seq:
            continue
        if before_seq is not None and s.seq >= before_seq:
            continue
        if not intact(s):
            continue
        for ident in s.inputs.get("groups") or []:
            if isinstance(ident, str) and ident in due and ident not in out:
                out.append(ident)
    return tuple(out)


def request_step(steps: Iterable[Step], request_id: str) -> Step | None:
    """The ``decision_requested`` step of ``request_id`` (the one the gate reads), if any."""
    for s in steps:
        if s.step == "decision_requested" and (s.detail or {}).get("request_id") == request_id:
            return s
    return None


def widened_now(
    escalation: EscalationSpec | None, steps: Iterable[Step], request_id: str, at: datetime
) -> tuple[str, ...]:
    """What the ladder widened ``request_id``'s approvers to at ``at``, from the chain (an approval
    records what allowed it under this; the gate re-reads it with :func:`widened_for`)."""
    listed = list(steps)
    made = request_step(listed, request_id)
    return () if made is None else widened_for(escalation, made, listed, at)
