"""Grouping a triage's sessions by runbook branch and cause, and saying it to people.

A group is every session with the same branch, attention code and reason (the cause as the API
states it); its examples' worker logs add the likely cause. Group ids are numbered in order of first
appearance, so an id shown in an early summary still means the same group in the final one.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bot.csvfile import Cell, csv_text
from bot.diagnosis.cure import incurable_cause
from bot.ids import group_id
from bot.messages import Attachment, Message
from bot.runbook.evaluate import Evaluation, _sort_rules
from bot.triage.store import Member
from bot.vocab import BATCH_DECISIONS

MAX_GROUPS_SHOWN = 15
#: The triage file's columns (people's sheets and scripts rely on this order).
TRIAGE_COLUMNS = (
    "group",
    "session_id",
    "branch",
    "attention_code",
    "attention_reason",
    "revision",
    "last_failure",
    "valid",
)


@dataclass
class Group:
    id: str
    branch: str
    title: str
    code: str | None
    reason: str | None
    rules: list[str]
    members: list[Member] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)
    likely_cause: str | None = None
    damage: bool = False  # an example's logs show permanent damage (R2.8)

    @property
    def cause(self) -> str:
        return f"{self.code or 'no attention'}/{self.reason or 'no reason'}"

    def times(self) -> tuple[str | None, str | None]:
        known = sorted(m.failed_at for m in self.members if m.failed_at)
        return (known[0], known[-1]) if known else (None, None)

    def valid_for_all(self) -> list[str]:
        """Decisions the runbook judges valid for every member now."""
        if not self.members:
            return []
        common = set(self.members[0].valid)
        for m in self.members[1:]:
            common &= set(m.valid)
        return [d for d in self.members[0].valid if d in common]

    def why_not_by_decision(self) -> list[tuple[str, str]]:
        """(decision, its most frequent reason and how many) for each decision not valid for all."""
        out: list[tuple[str, str]] = []
        valid = set(self.valid_for_all())
        reasons: dict[str, Counter[str]] = {}
        for m in self.members:
            for decision, why in m.verdicts.items():
                reasons.setdefault(decision, Counter())[why] += 1
        for decision, counter in reasons.items():
            if decision in valid:
                continue
            why, n = counter.most_common(1)[0]
            share = "all" if n == len(self.members) else f"{n} of {len(self.members)}"
            out.append((decision, f"{why} ({share})"))
        return out

    def to_json(self) -> dict[str, Any]:
        first, last = self.times()
        return {
            "id": self.id,
            "branch": self.branch,
            "title": self.title,
            "code": self.code,
            "reason": self.reason,
            "rules": self.rules,
            "count": len(self.members),
            "first_failure": first,
            "last_failure": last,
            "valid_for_all": self.valid_for_all(),
            "likely_cause": self.likely_cause,
            "damage": self.damage,
            "examples": self.examples,
            "members": [m.to_json() for m in self.members],
        }


class Grouper:
    """Adds evaluated sessions to groups keyed by (branch, attention code, reason)."""

    def __init__(self, triage_id: str) -> None:
        self.triage_id = triage_id
        self.groups: dict[tuple[str, str | None, str | None], Group] = {}

    def add(self, member: Member, evaluation: Evaluation) -> Group:
        key = (evaluation.branch_id, member.facts.get("attention.code"), member.facts.get("attention.reason"))
        group = self.groups.get(key)
        if group is None:
            group = Group(
                id=group_id(self.triage_id, len(self.groups) + 1),
                branch=evaluation.branch_id,
                title=evaluation.title,
                code=key[1],
                reason=key[2],
                rules=list(evaluation.rules),
            )
            self.groups[key] = group
        group.members.append(member)
        return group

    def ordered(self) -> list[Group]:
        return sorted(self.groups.values(), key=lambda g: (-len(g.members), g.id))


def _time(value: str | None) -> str:
    return value[11:19] + "Z" if value and len(value) >= 19 else (value or "unknown")


_CODE = re.compile(r"\b[A-Z][A-Z_]{3,}\b")


def _not_valid(group: Group) -> str:
    """The decisions not valid for every member, by the API code that refuses them (one phrase)."""
    by_code: dict[str, list[str]] = {}
    for decision, why in group.why_not_by_decision():
        code = _CODE.search(why)
        share = why.rsplit("(", 1)[-1].rstrip(")") if why.endswith(")") else "all"
        label = (code.group(0) if code else "refused") + ("" if share == "all" else f", {share}")
        by_code.setdefault(label, []).append(decision)
    return "; ".join(f"{', '.join(ds)} ({label})" for label, ds in by_code.items()) or "none"


def group_lines(group: Group, *, examples: int) -> list[str]:
    """At most three lines per group: what it is, what is valid for all and what not (by code), the
    examples and what their logs say. Each refusal's whole reason is behind details."""
    first, last = group.times()
    valid = [d for d in group.valid_for_all() if d in BATCH_DECISIONS]
    other = [d for d in group.valid_for_all() if d not in BATCH_DECISIONS]
    shown = group.examples or [{"session_id": m.session_id} for m in group.members[:examples]]
    ex = ", ".join(
        e["session_id"] + (f" ({e['branch']})" if e.get("branch") and e["branch"] != group.branch else "")
        for e in shown
    )
    third = f"    examples: {ex}"
    if group.likely_cause:
        third += f" · likely cause (worker logs): {group.likely_cause}"
    if group.damage:
        third += " · [!] the examples' logs show permanent damage: retry_restore cannot cure it (R2.8)"
    # What a valid decision still needs, as diagnose says it: --cause-fixed where a retry cannot cure the
    # cause (R2.3, R2.8, R5.3, the rule is bot.diagnosis.cure's); a per-session decision its own --turn.
    cure = incurable_cause({"attention.reason": group.reason}, branch=group.branch, damage=group.damage)
    said = [f"{d} (needs --cause-fixed)" if d == "retry_restore" and cure else d for d in valid]
    said += [f"{d} (per session, each with its --turn)" for d in other]
    return [
        f"*{group.id}* · {len(group.members)} × {group.title} [{group.branch}] · {group.cause}"
        f" · failures {_time(first)} … {_time(last)}",
        "    valid for every member: " + (", ".join(said) or "none") + f" · not: {_not_valid(group)}",
        third,
    ]


def group_facts(group: Group) -> list[tuple[str, str]]:
    """Why each decision is not valid for every member, in full (what ``details`` shows)."""
    return [(f"{group.id} not valid", why) for _, why in group.why_not_by_decision()]


def summary_message(
    triage_id: str,
    groups: list[Group],
    *,
    listed: int,
    read: int,
    listing_done: bool,
    elapsed: float,
    examples: int,
    final: bool,
    notes: list[str],
) -> Message:
    total = f"{listed}" if listing_done else f"{listed}+"
    state = "complete" if final else f"reading: {read} of {total} diagnosed"
    headline = (
        f"Triage {triage_id}: {listed if listing_done else total} session(s) need an operator, "
        f"{len(groups)} group(s) · {state} · {elapsed:.1f} s"
    )
    lines: list[str] = [*notes]
    facts: list[tuple[str, str]] = []
    for group in groups[:MAX_GROUPS_SHOWN]:
        lines.extend(group_lines(group, examples=examples))
        facts.extend(group_facts(group))
    if len(groups) > MAX_GROUPS_SHOWN:
        lines.append(f"… {len(groups) - MAX_GROUPS_SHOWN} smaller group(s) in the attached file")
    if groups:
        g = groups[0].id
        lines.append(
            f'Act on a group: `/recover dryrun batch decide {g} <decision> --reason "…"` first, then '
            f"`/recover batch decide {g} …` (retry_restore, start_fresh, close)."
        )
    attachment = None
    if final and groups:
        # Reasons come from the control host: written by the one CSV writer, never joined by hand,
        # so a reason holding a newline, commas or a formula stays one cell of its session's row.
        rows: list[list[Cell]] = [
            [group.id, m.session_id, m.branch, group.code, group.reason, m.revision, m.failed_at, " ".join(m.valid)]
            for group in groups
            for m in group.members
        ]
        attachment = Attachment(f"triage-{triage_id}.csv", csv_text(TRIAGE_COLUMNS, rows))
    rules = _sort_rules(list({r for g in groups for r in g.rules}))
    return Message(
        headline=headline,
        level="info" if final else "progress",
        lines=lines,
        facts=facts,
        rules=rules[:12],
        attachment=attachment,
        kind="triage",
        ref=triage_id,
    )
