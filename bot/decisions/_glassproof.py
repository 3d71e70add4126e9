"""The gate's one other acceptance: a verified ``break_glass`` step in place of a second person's approval.

Read from the chain alone, by :func:`bot.decisions._proof._prove` only when no approval holds. A
``break_glass`` step is accepted when it is intact, by the requester (the one identity function), over
the request's content hash, recorded before the expiry (the chain's own times), in an allowed channel,
for a decision the runbook allows, with an incident ref and a reason, under one of the runbook's
conditions (the ladder's end, or nobody else eligible: bot/decisions/_glassrule.py) — and an intact
``break_glass_announced`` step (the loud notice
posted) for the same request and content comes before it. Nothing else stands in for an approval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from bot.channels import RecoveryChannels
from bot.clock import parse_time
from bot.decisions._glassrule import (
    ANNOUNCED,
    BREAK_GLASS,
    GlassRule,
    glass_verdict,
    ladder_reach,
    reading_problem,
)
from bot.decisions._rules import person_of, same_person
from bot.decisions._widening import widened_for
from bot.store import Step

#: Steps after which nobody may break glass: the request was answered, withdrawn, expired or voided.
_ANSWERED = ("decision_rejected", "decision_expired", "decision_withdrawn", "decision_void")


def glass_step(
    mine: Iterable[Step],
    made: Step,
    chain_hash: str,
    expires: datetime | None,
    rule: GlassRule,
    intact: Callable[[Step], str | None],
    *,
    approvers: Sequence[str],
    channels: RecoveryChannels,
    console_users: Mapping[str, str],
) -> tuple[Step | None, list[str]]:
    """(the first acceptable ``break_glass`` step or None, the reasons the others were refused)."""
    steps = list(mine)
    reasons: list[str] = []
    for s in (s for s in steps if s.step == BREAK_GLASS):
        why = _problem(s, steps, made, chain_hash, expires, rule, intact, approvers, channels, console_users)
        why = why or intact(s) or _announced_problem(s, steps, made, chain_hash, intact, console_users)
        if why is None:
            return s, reasons
        reasons.append(why)
    return None, reasons


def _problem(
    s: Step,
    steps: Sequence[Step],
    made: Step,
    chain_hash: str,
    expires: datetime | None,
    rule: GlassRule,
    intact: Callable[[Step], str | None],
    approvers: Sequence[str],
    channels: RecoveryChannels,
    console_users: Mapping[str, str],
) -> str | None:
    if s.inputs.get("content_hash") != chain_hash:
        return f"break-glass step {s.seq} names other content"
    if not same_person(s.actor, made.actor, console_users) or person_of(s.actor, console_users) is None:
        return f"break-glass step {s.seq} is not by the request's (identifiable) requester"
    if not str(s.inputs.get("incident") or "").strip() or not str(s.inputs.get("reason") or "").strip():
        return f"break-glass step {s.seq} records no incident ref or no reason"
    if not channels.allows(s.inputs.get("channel")):
        return f"break-glass step {s.seq} was given outside the recovery channels"
    requested_at, at = parse_time(made.at), parse_time(s.at)
    if requested_at is None or at is None or s.seq < made.seq:
        return f"break-glass step {s.seq} has no time after its request"
    answered = [a for a in steps if a.step in _ANSWERED and made.seq < a.seq < s.seq]
    if answered:
        return f"break-glass step {s.seq} comes after the request was answered ({answered[0].step})"
    # Who could have approved then: RECOVER_APPROVERS, what the ladder widened to before this step (the
    # gate's one reading of widening) and whom today's ladder would still widen to, judged against the
    # reading recorded with the step; then the one rule (bot/decisions/_glassrule.py).
    widened = (
        ()
        if rule.escalation is None
        else widened_for(rule.escalation, made, steps, at, before_seq=s.seq, intact=lambda w: intact(w) is None)
    )
    reach = ladder_reach(rule.escalation, widened)
    listed = list(dict.fromkeys([*approvers, *reach])) if approvers else []
    no_other = reading_problem(s.inputs.get("reading"), made.actor, listed, console_users)
    verdict = glass_verdict(rule.escalation, rule.decision, requested_at, at, expires, no_other)
    if verdict.problem is not None:
        return f"break-glass step {s.seq}: {verdict.problem}"
    return None


def _announced_problem(
    s: Step,
    steps: Sequence[Step],
    made: Step,
    chain_hash: str,
    intact: Callable[[Step], str | None],
    console_users: Mapping[str, str],
) -> str | None:
    """The loud notice was recorded as posted (an intact ``break_glass_announced`` step by the same
    person, over the same content) after the request and before the break-glass step."""
    before = [
        a
        for a in steps
        if a.step == ANNOUNCED
        and made.seq < a.seq < s.seq
        and a.inputs.get("content_hash") == chain_hash
        and same_person(a.actor, s.actor, console_users)
        and intact(a) is None
    ]
    if not before:
        return f"break-glass step {s.seq} has no announcement (break_glass_announced) before it"
    return None
