"""Evaluate the runbook against diagnosis facts: one branch, and which decisions are valid now.

Python only runs the condition language over the YAML; it holds no branch rule, valid decision,
policy or precondition. A fact that is ``None`` is unknown (three-valued logic): a branch is chosen only
when its condition is surely true, and a precondition that cannot be checked is reported as such
instead of being guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bot.errors import RunbookError
from bot.runbook.conditions import Cond, Context, pick_text, render
from bot.runbook.model import BranchSpec, DecisionSpec, RunbookSet


@dataclass(frozen=True)
class DecisionVerdict:
    """Whether a decision would be accepted now, and if not the API's answer and the runbook's reason.

    ``reason`` is the rendered text without the status/code (e.g. "until the backoff ends at
    10:04:30Z"); :attr:`text` is the whole line people read.
    """

    ok: bool
    code: str | None
    reason: str
    rules: tuple[str, ...] = ()
    decision: str = ""
    status: int | None = None
    unknown: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.decision

    @property
    def text(self) -> str:
        prefix = " ".join(str(p) for p in (self.status, self.code) if p is not None)
        return f"{self.decision}: {prefix + ' ' if prefix else ''}{self.reason}"


@dataclass
class Evaluation:
    """The branch the runbook picked for these facts, what it means and what may be done now."""

    branch_id: str
    title: str
    explanation: str
    notes: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    valid_decisions: list[str] = field(default_factory=list)
    invalid_decisions: list[DecisionVerdict] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    show_facts: list[str] = field(default_factory=list)
    deciding_facts: list[tuple[str, object]] = field(default_factory=list)
    unknown_facts: list[str] = field(default_factory=list)
    verdicts: dict[str, DecisionVerdict] = field(default_factory=dict)
    #: For each valid decision that has one, what it does here (branch ``consequences``, else the
    #: decision's own ``consequence``), e.g. close: "ends the session for good" (R3.9, R5.4).
    consequences: dict[str, str] = field(default_factory=dict)

    @property
    def invalid_reasons(self) -> list[str]:
        """One line per decision not valid now, e.g. "retry_restore: 409 REQUEST_STALE until …"."""
        return [v.text for v in self.invalid_decisions]

    def valid_text(self) -> list[str]:
        """Each valid decision, with its consequence when it has one."""
        return [
            f"{name} ({self.consequences[name]})" if name in self.consequences else name
            for name in self.valid_decisions
        ]

    def summary(self) -> str:
        """A plain-text rendering (console, logs, test failure messages)."""
        lines = [f"{self.title} [{self.branch_id}]", self.explanation, *self.notes]
        lines.append("Valid now: " + (", ".join(self.valid_text()) or "none"))
        lines.extend(f"Not valid: {r}" for r in self.invalid_reasons)
        lines.extend(f"Next: {s}" for s in self.next_steps)
        if self.rules:
            lines.append("Runbook: " + ", ".join(self.rules))
        return "\n".join(lines)


def _values(facts: Mapping[str, object], flags: Mapping[str, object], decision: str = "") -> dict[str, object]:
    values: dict[str, object] = dict(facts)
    values.update({f"flag.{k}": v for k, v in flags.items()})
    if decision:
        values["decision"] = decision
    return values


def _dedupe(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


def _unknown_refs(cond: Cond | None, ctx: Context) -> list[str]:
    if cond is None:
        return []
    return _dedupe((r.name if r.kind == "fact" else f"--{r.name}") for r in cond.refs() if r.resolve(ctx) is None)


def _clean_flags(flags: Mapping[str, object] | None) -> dict[str, object]:
    return {k: v for k, v in (flags or {}).items() if v is not None and v != "" and v is not False}


def _check(
    runbooks: RunbookSet,
    spec: DecisionSpec,
    facts: Mapping[str, object],
    flags: Mapping[str, object] | None,
) -> DecisionVerdict:
    name = spec.name
    given = _clean_flags(flags)
    if flags is not None:
        missing = [f for f in runbooks.required_flags(name) if f not in given]
        if missing:
            return DecisionVerdict(
                ok=False,
                code="BAD_REQUEST",
                status=400,
                reason=f"{', '.join('--' + m for m in missing)} required for {name}",
                rules=tuple(spec.rules),
                decision=name,
            )
    # diagnose has no flags: the runbook says which fact stands in for which flag (e.g. --turn).
    effective: dict[str, object] = {flag: facts.get(fact) for flag, fact in spec.diagnose_flags.items()}
    effective.update(given)
    ctx = Context(facts=facts, flags=effective)
    values = _values(facts, effective, name)
    for pre in spec.preconditions:
        cond = pre._cond
        result = cond.evaluate(ctx) if cond is not None else True
        if result is True:
            continue
        reason = render(pick_text(pre.reason, ctx) or pre.code, values)
        rules = tuple(pre.rules or spec.rules)
        if result is None:
            unknown = tuple(_unknown_refs(cond, ctx))
            return DecisionVerdict(
                ok=False,
                code=None,
                status=None,
                reason=(
                    f"cannot tell ({', '.join(unknown) or 'facts'} unknown); "
                    f"the API may answer {pre.status} {pre.code}: {reason}"
                ),
                rules=rules,
                decision=name,
                unknown=unknown,
            )
        return DecisionVerdict(ok=False, code=pre.code, status=pre.status, reason=reason, rules=rules, decision=name)
    return DecisionVerdict(
        ok=True, code=None, reason="the runbook's checks pass", rules=tuple(spec.rules), decision=name
    )


def check_decision(
    runbooks: RunbookSet,
    decision: str,
    facts: Mapping[str, object],
    flags: Mapping[str, object] | None = None,
) -> DecisionVerdict:
    """Would ``decision`` be accepted with these (fresh) facts and flags? ``decide`` asks this last.

    With ``flags`` given, flags the decision requires must be present (else 400 BAD_REQUEST); with
    ``flags=None`` (diagnose) the decision's ``diagnose_flags`` fill them from facts.
    """
    spec = runbooks.decisions.get(decision)
    if spec is None:
        known = ", ".join(runbooks.decisions) or "none"
        return DecisionVerdict(
            ok=False,
            code="BAD_REQUEST",
            status=400,
            reason=f"unknown decision (the runbook defines: {known})",
            decision=decision,
        )
    return _check(runbooks, spec, facts, flags)


def select_branch(runbooks: RunbookSet, facts: Mapping[str, object]) -> tuple[BranchSpec, list[str]]:
    """The first branch, in precedence order, whose condition is surely true; else the fallback.

    Also returns the facts that were unknown in the conditions tried, so an unclassified answer can say
    what is missing.
    """
    ctx = Context(facts=facts, flags={})
    unknown: list[str] = []
    for branch in runbooks.branches:
        cond = branch.condition
        if cond is None:  # the fallback (the loader puts it last)
            return branch, _dedupe(unknown)
        result = cond.evaluate(ctx)
        if result is True:
            return branch, _dedupe(unknown)
        if result is None:
            unknown.extend(_unknown_refs(cond, ctx))
    raise RunbookError([f"{', '.join(runbooks.files_text()) or 'runbooks'}: no loaded runbook defines branches"])


def evaluate(runbooks: RunbookSet, facts: Mapping[str, object]) -> Evaluation:
    """Pick exactly one branch by precedence and judge every decision against the facts."""
    branch, unknown = select_branch(runbooks, facts)
    ctx = Context(facts=facts, flags={})
    values = _values(facts, {})
    notes: list[str] = []
    rules = list(branch.rules)
    for note in branch.notes:
        if note._cond is not None and note._cond.evaluate(ctx) is True:
            notes.append(render(note.text, values))
            rules.extend(note.rules)
    valid: list[str] = []
    invalid: list[DecisionVerdict] = []
    verdicts: dict[str, DecisionVerdict] = {}
    consequences: dict[str, str] = {}
    for name, spec in runbooks.decisions.items():
        verdict = _check(runbooks, spec, facts, None)
        if verdict.ok and name not in branch.decisions:
            advice = branch.not_advised.get(name)
            verdict = DecisionVerdict(
                ok=False,
                code=None,
                reason=render(advice, values) if advice else f"not advised in this branch ({branch.title})",
                rules=tuple(branch.rules),
                decision=name,
            )
        verdicts[name] = verdict
        if verdict.ok:
            valid.append(name)
            said = branch.consequences.get(name) or pick_text(spec.consequence, ctx)
            if said:
                consequences[name] = render(said, values)
        else:
            invalid.append(verdict)
    names = [r.name for r in branch.condition.refs() if r.kind == "fact"] if branch.condition else []
    shown = _dedupe([*names, *branch.show_facts])
    return Evaluation(
        branch_id=branch.id,
        title=branch.title,
        explanation=render(pick_text(branch.explanation, ctx) or branch.title, values),
        notes=notes,
        rules=_sort_rules(_dedupe(rules)),
        valid_decisions=valid,
        invalid_decisions=invalid,
        next_steps=[render(text, values) for text in branch.next],
        show_facts=shown,
        deciding_facts=[(n, facts.get(n)) for n in shown],
        unknown_facts=unknown,
        verdicts=verdicts,
        consequences=consequences,
    )


def _sort_rules(rules: list[str]) -> list[str]:
    def key(rule: str) -> tuple[int, int]:
        major, _, minor = rule[1:].partition(".")
        return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (99, 99)

    return sorted(rules, key=key)
