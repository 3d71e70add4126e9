"""When break-glass is allowed: one rule, read by the command (at "now") and by the gate (at the time
the chain recorded the ``break_glass`` step).

Why one rule for both: the command refuses early with a reason a person can act on; the gate re-derives
the same answer from the chain alone before anything is sent, so a table edit, a forged step or a
second code path cannot make the two disagree. Pure functions: the only look-up is the approver
directory, read once when the requester breaks glass (:func:`others_reading`) and recorded with the
step; the gate judges that recorded reading against today's RECOVER_APPROVERS with no look-ups
(:func:`reading_problem`), as it does an approval's evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.decisions._rules import ApproverDirectory, approver_allowed, same_person
from bot.format import duration
from bot.runbook.escalation import EscalationSpec
from bot.vocab import Step

BREAK_GLASS = Step.BREAK_GLASS
ANNOUNCED = Step.BREAK_GLASS_ANNOUNCED
REVIEWED = Step.BREAK_GLASS_REVIEWED
ASKED = Step.BREAK_GLASS_ASKED  # the requester's `break-glass` command: shown, waiting for the typed confirm


@dataclass(frozen=True)
class GlassRule:
    """What the gate needs to judge a ``break_glass`` step: the runbook's ladder and the decision."""

    escalation: EscalationSpec | None
    decision: str


#: Why break-glass is allowed, by the runbook's ``break_glass.when`` condition that holds (said in the
#: confirmation, the loud notice and ``pending``).
WHY = {
    "no_other_approver": "no eligible approver other than the requester exists",
    "ladder_ended": "the escalation ladder ran to its end with no approver answering",
}


@dataclass(frozen=True)
class GlassVerdict:
    """The one rule's answer: ``allowed_by`` (the condition that holds) or ``problem`` (why not)."""

    allowed_by: str | None
    problem: str | None

    @property
    def why(self) -> str:
        return WHY.get(self.allowed_by or "", "")


def glass_verdict(
    spec: EscalationSpec | None,
    decision: str,
    requested_at: datetime,
    at: datetime,
    expires: datetime | None,
    no_other: str | None,
) -> GlassVerdict:
    """THE break-glass rule, for the command (at "now") and the gate (at the step's recorded time).

    Allowed for a decision the runbook's ``break_glass.decisions`` names, before the expiry, when one
    of ``break_glass.when`` holds (any one suffices): ``no_other_approver`` when ``no_other`` (the
    problem :func:`others_reading` / :func:`reading_problem` found) is None, at once, because a ladder
    that can reach nobody but the requester would only make them wait; ``ladder_ended`` from the
    ladder's end, nobody having approved.
    """
    if spec is None:
        return GlassVerdict(None, "the runbook has no escalation: section, so it allows no break-glass")
    if not spec.allows_break_glass(decision):
        allowed = ", ".join(spec.break_glass.decisions) or "none"
        return GlassVerdict(
            None, f"the runbook allows no break-glass for `{decision}` (break_glass.decisions: {allowed})"
        )
    if expires is None or at > expires:
        return GlassVerdict(None, "the request has expired")
    when = spec.break_glass.when
    if "no_other_approver" in when and no_other is None:
        return GlassVerdict("no_other_approver", None)
    end = window_opens(spec, requested_at)
    if "ladder_ended" in when and at >= end:
        return GlassVerdict("ladder_ended", None)
    why_not: list[str] = []
    if "ladder_ended" in when:
        left = (end - at).total_seconds()
        why_not.append(f"the escalation ladder has not run to its end yet (it ends in {duration(left)}, at {_hm(end)})")
    if "no_other_approver" in when:
        why_not.append(str(no_other))
    if not why_not:
        return GlassVerdict(None, "the runbook names no break-glass condition (break_glass.when is empty)")
    return GlassVerdict(
        None, f"none of the runbook's break-glass conditions holds ({', '.join(when)}): " + " and ".join(why_not)
    )


def window_opens(spec: EscalationSpec, requested_at: datetime) -> datetime:
    """When the ``ladder_ended`` condition first holds for a request made at ``requested_at``."""
    return requested_at + timedelta(seconds=spec.end_seconds)


def ladder_reach(spec: EscalationSpec | None, widened: Sequence[str]) -> tuple[str, ...]:
    """Whom the ladder widened to (``widened``, as the chain records it) and whom it still will (every
    ``widen`` step of the runbook's ladder): for ``no_other_approver`` an approver the ladder will reach
    later is another approver, so break-glass never cuts short a ladder that could still reach someone."""
    later = spec.widened_groups(float("inf")) if spec is not None else ()
    return tuple(dict.fromkeys([*widened, *later]))


class _ReadOnce:
    """The directory read once per group for one reading (one answer per group, fewer Slack calls)."""

    def __init__(self, directory: ApproverDirectory | None) -> None:
        self.directory = directory
        self.read: dict[str, set[str]] = {}

    def members(self, group_id: str) -> set[str]:
        if group_id not in self.read:
            if self.directory is None:
                raise LookupError(f"user group {group_id} cannot be resolved (no directory configured)")
            self.read[group_id] = set(self.directory.members(group_id))
        return self.read[group_id]


def others_reading(
    requester: str,
    approvers: Sequence[str],
    widened: Sequence[str],
    directory: ApproverDirectory | None,
    console_users: Mapping[str, str],
) -> tuple[dict[str, Any], str | None]:
    """Who else may approve now, by the one approver rule (``approver_allowed``, RECOVER_APPROVERS and
    what the ladder ``widened`` to as the chain records it) over the listed ids and the members of the
    listed groups; the requester (under any name) is never one of them.

    Returns (reading, problem): the reading is recorded with the break-glass step (the groups as read,
    the others found); problem is None when nobody else is eligible, else why someone may be.
    """
    if not approvers:
        return {"any": True, "others": []}, "anyone may approve (RECOVER_APPROVERS is empty)"
    once = _ReadOnce(directory)
    listed = list(dict.fromkeys([*approvers, *widened]))
    candidates = [a for a in listed if not a.startswith("S")]
    unread: list[str] = []
    for group in (a for a in listed if a.startswith("S")):
        try:
            candidates.extend(sorted(once.members(group)))
        except Exception as exc:  # noqa: BLE001 - an unreadable group may hold an approver: not "nobody"
            unread.append(f"user group {group} could not be read ({type(exc).__name__})")
    others = sorted(
        {
            c
            for c in candidates
            if not same_person(c, requester, console_users) and approver_allowed(c, approvers, once, widened)[0]
        }
    )
    reading: dict[str, Any] = {
        "approvers": listed,
        "groups": {g: sorted(m) for g, m in once.read.items()},
        "others": others,
    }
    if unread:
        return reading, unread[0]
    if others:
        return reading, f"{len(others)} other eligible approver(s) exist"
    return reading, None


def reading_problem(
    reading: object, requester: str, approvers: Sequence[str], console_users: Mapping[str, str]
) -> str | None:
    """Does the recorded reading still show nobody but the requester under today's approvers (with what
    the ladder widened to)? No look-ups: every listed id must be the requester, every listed group read
    then with no other member."""
    if not isinstance(reading, Mapping):
        return "the break-glass step records no reading of the approvers"
    if not approvers:
        return "anyone may approve (RECOVER_APPROVERS is empty)"
    if reading.get("others"):
        return f"the reading found {len(reading['others'])} other eligible approver(s)"
    groups = reading.get("groups")
    groups = groups if isinstance(groups, Mapping) else {}
    for entry in approvers:
        if entry.startswith("S"):
            members = groups.get(entry)
            if not isinstance(members, list):
                return f"user group {entry} was not read when glass was broken"
            if any(not same_person(str(m), requester, console_users) for m in members):
                return f"user group {entry} has another member"
        elif not same_person(entry, requester, console_users):
            return f"{entry} may approve"
    return None


def _hm(when: datetime) -> str:
    return when.strftime("%H:%M:%S UTC")


__all__ = [
    "ANNOUNCED",
    "ASKED",
    "BREAK_GLASS",
    "REVIEWED",
    "WHY",
    "GlassRule",
    "GlassVerdict",
    "glass_verdict",
    "ladder_reach",
    "others_reading",
    "reading_problem",
    "window_opens",
]
