"""The second pass of loading: references across the whole set of runbooks.

Each file is valid on its own (the schema, ``bot.runbook.model``); here every rule, decision, fact,
flag, limit and pattern a file names must exist somewhere in the set, conditions and templates are
compiled once, and the safety rules between fields hold (an irreversible decision needs two people).
Every problem is collected as ``file:line: path: what is wrong``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from bot.runbook.conditions import Cond, check_template, compile_condition
from bot.runbook.model import BranchSpec, CommandSpec, DecisionSpec, RunbookSet, TextVariant
from bot.runbook.values import IDS_PLACEHOLDER
from bot.runbook.vocabulary import APPROVAL_POLICIES, FACT_NAMES
from bot.runbook.yamlio import LineMap
from bot.vocab import Policy, StepKind

# Limits that supply defaults when a decision leaves them out (names, not values: values live in YAML).
DEFAULT_EXPIRY_LIMIT = "approval_expiry"
DEFAULT_REPEAT_LIMIT = "repeated_decision_threshold"
_BODY_SOURCE = re.compile(r"^(const|flag|fact|arg):(.*)$")
_PATH_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_POLICIES = " | ".join(sorted(APPROVAL_POLICIES))


def dotted(loc: Sequence[object]) -> str:
    """A location as people read it: ``decisions.close.approval`` or ``commands[3].flags[0]``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


class Checker:
    """Cross-reference checks over the whole set; collects problems with their file:line."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.lines: LineMap = LineMap("?")
        self._seen: set[tuple[str, int, str]] = set()

    def at(self, path: Sequence[object], message: str) -> None:
        # A YAML alias reuses one node in many places: report its problem once, at the node's line.
        key = (self.lines.file, self.lines.line(path), message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.problems.append(f"{self.lines.file}:{self.lines.line(path)}: {dotted(path)}: {message}")

    def rules(self, rules: Collection[str], known: Collection[str], path: Sequence[object]) -> None:
        for i, rule in enumerate(rules):
            if rule not in known:
                self.at([*path, i], f"cites rule {rule!r}, which no loaded runbook defines (under 'rules:')")

    def condition(self, raw: object, path: Sequence[object], flags: Collection[str] | None = None) -> Cond | None:
        return compile_condition(raw, path, self.at, flags)

    def template(
        self,
        text: str | Sequence[TextVariant] | None,
        path: Sequence[object],
        flags: Collection[str] = (),
        extra: Collection[str] = (),
    ) -> None:
        """A template, or conditional variants of one (each ``when`` compiled here, once)."""
        if isinstance(text, str):
            if text:
                check_template(text, path, self.at, flags, extra)
            return
        for i, variant in enumerate(text or ()):
            if variant.when is not None:
                variant._cond = self.condition(variant.when, [*path, i, "when"], flags or None)
            check_template(variant.text, [*path, i, "text"], self.at, flags, extra)


def check_command(ck: Checker, rs: RunbookSet, command: CommandSpec, path: list[object]) -> None:
    ck.rules(command.rules, rs.rules, [*path, "rules"])
    if command.kind == StepKind.TEXT and not command.text and not command.checklist:
        ck.at(path, "missing field 'text' (a text-kind subcommand shows its text or checklist)")
    seen_optional = False
    for j, arg in enumerate(command.args):
        apath = [*path, "args", j]
        if arg.pattern is not None:
            _check_pattern(ck, rs, arg.pattern, [*apath, "pattern"])
        if arg.rest and j != len(command.args) - 1:
            ck.at([*apath, "rest"], "only the last argument may take the rest of the line")
        if not arg.required:
            seen_optional = True
        elif seen_optional:
            ck.at(apath, "a required argument cannot follow an optional one")
    names: set[str] = set()
    for j, flag in enumerate(command.flags):
        fpath = [*path, "flags", j]
        if flag.name in names:
            ck.at([*fpath, "name"], f"duplicate flag --{flag.name}")
        names.add(flag.name)
        if flag.pattern is not None:
            if not flag.value:
                ck.at([*fpath, "pattern"], "a switch (value: false) cannot have a pattern")
            _check_pattern(ck, rs, flag.pattern, [*fpath, "pattern"])
        for k, decision in enumerate(flag.required_for):
            if decision not in rs.decisions:
                ck.at([*fpath, "required_for", k], f"unknown decision {decision!r} referenced")


def _check_pattern(ck: Checker, rs: RunbookSet, pattern: str, path: list[object]) -> None:
    if IDS_PLACEHOLDER in pattern:
        if rs.id_pattern is None:
            ck.at(path, "uses {ids} but no runbook defines 'ids: pattern:'")
            return
        pattern = pattern.replace(IDS_PLACEHOLDER, f"(?:{rs.id_pattern.pattern})")
    try:
        re.compile(pattern)
    except re.error as exc:
        ck.at(path, f"bad regular expression {pattern!r}: {exc}")


def check_branch(ck: Checker, rs: RunbookSet, branch: BranchSpec, path: list[object]) -> None:
    ck.rules(branch.rules, rs.rules, [*path, "rules"])
    if branch.fallback:
        if branch.when is not None:
            ck.at([*path, "when"], "the fallback branch has no 'when' (it applies when no other branch does)")
    elif branch.when is None:
        ck.at(path, "missing field 'when' (only the fallback branch may leave it out)")
    else:
        branch._cond = ck.condition(branch.when, [*path, "when"])
    for j, decision in enumerate(branch.decisions):
        if decision not in rs.decisions:
            ck.at([*path, "decisions", j], f"unknown decision {decision!r} referenced")
    for decision, text in branch.not_advised.items():
        if decision not in rs.decisions:
            ck.at([*path, "not_advised", decision], f"unknown decision {decision!r} referenced")
        ck.template(text, [*path, "not_advised", decision])
    for decision, text in branch.consequences.items():
        if decision not in rs.decisions:
            ck.at([*path, "consequences", decision], f"unknown decision {decision!r} referenced")
        ck.template(text, [*path, "consequences", decision])
    ck.template(branch.explanation, [*path, "explanation"])
    for j, text in enumerate(branch.next):
        ck.template(text, [*path, "next", j])
    for j, note in enumerate(branch.notes):
        note._cond = ck.condition(note.when, [*path, "notes", j, "when"])
        ck.template(note.text, [*path, "notes", j, "text"])
        ck.rules(note.rules, rs.rules, [*path, "notes", j, "rules"])
    for j, fact in enumerate(branch.show_facts):
        if fact not in FACT_NAMES:
            ck.at([*path, "show_facts", j], f"unknown fact {fact!r} (see docs/facts.md)")


def _check_irreversible(ck: Checker, decision: DecisionSpec, path: list[object]) -> None:
    """An irreversible decision is never sent on one person's word: it must need a second person.

    ``close`` cannot be undone (R5.4); a runbook edit that made it single-person would take the two-person
    rule away without any code change, so the loader refuses it.
    """
    if not decision.irreversible or decision.approval is None or decision.approval.policy is None:
        return  # a missing policy is reported on its own
    policy = decision.approval.policy
    if policy != Policy.TWO_PERSON:
        ck.at(
            [*path, "irreversible"],
            f"an irreversible decision needs 'approval: {{policy: {Policy.TWO_PERSON}}}', not {policy!r} "
            f"(at {ck.lines.where([*path, 'approval', 'policy'])}): a second person approves what cannot be "
            "undone; or set 'irreversible: false' if it can be",
        )


def check_decision(ck: Checker, rs: RunbookSet, decision: DecisionSpec, path: list[object]) -> None:
    name = decision.name
    ck.rules(decision.rules, rs.rules, [*path, "rules"])
    # Approval policy (two-person rule) must be explicit: no silent default for an irreversible action.
    if decision.approval is None or decision.approval.policy is None:
        ck.at(
            path,
            f"decision {name!r} has no approval policy (approval: {{policy: {_POLICIES}}})",
        )
    else:
        if decision.approval.policy not in APPROVAL_POLICIES:
            ck.at(
                [*path, "approval", "policy"],
                f"unknown approval policy {decision.approval.policy!r} (known: {_POLICIES})",
            )
        if decision.approval.expires is None:
            default = rs.limits.get(DEFAULT_EXPIRY_LIMIT)
            if default is None or default.duration is None:
                ck.at(
                    [*path, "approval"],
                    f"no 'expires' and no '{DEFAULT_EXPIRY_LIMIT}' duration under 'limits:'",
                )
            else:
                decision.approval.expires = default.duration
    _check_irreversible(ck, decision, path)
    if decision.repeat_threshold is None:
        default = rs.limits.get(DEFAULT_REPEAT_LIMIT)
        if default is None or default.count is None:
            ck.at(path, f"no 'repeat_threshold' and no '{DEFAULT_REPEAT_LIMIT}' count under 'limits:'")
        else:
            decision.repeat_threshold = default.count
    command = rs.commands.get(decision.command)
    if command is None:
        ck.at(
            [*path, "command"],
            f"unknown subcommand {decision.command!r} (the command that takes this decision)",
        )
        flags: list[str] = []
        args: list[str] = []
    else:
        flags = [f.name for f in command.flags]
        args = [a.name for a in command.args]
    for key, source in decision.request.body.items():
        match = _BODY_SOURCE.match(source)
        bpath = [*path, "request", "body", key]
        if match is None:
            ck.at(
                bpath,
                f"bad body source {source!r}: use const:<value>, flag:<name>, fact:<name> or arg:<name>",
            )
            continue
        kind, ref = match.groups()
        if kind == "flag" and ref not in flags:
            ck.at(
                bpath,
                f"unknown flag {ref!r} (subcommand {decision.command!r} has: {', '.join(flags) or 'none'})",
            )
        elif kind == "fact" and ref not in FACT_NAMES:
            ck.at(bpath, f"unknown fact {ref!r} (see docs/facts.md)")
        elif kind == "arg" and ref not in args:
            ck.at(
                bpath,
                f"unknown argument {ref!r} ({decision.command!r} has: {', '.join(args) or 'none'})",
            )
    for key in decision.request.optional:
        if key not in decision.request.body:
            ck.at([*path, "request", "optional"], f"optional body field {key!r} is not in the body")
    for placeholder in _PATH_PLACEHOLDER.findall(decision.request.path):
        if placeholder not in args:
            ck.at(
                [*path, "request", "path"],
                f"path placeholder {{{placeholder}}} is not an argument of {decision.command!r}",
            )
    for flag, fact in decision.diagnose_flags.items():
        if flag not in flags:
            ck.at([*path, "diagnose_flags", flag], f"unknown flag {flag!r}")
        if fact not in FACT_NAMES:
            ck.at([*path, "diagnose_flags", flag], f"unknown fact {fact!r} (see docs/facts.md)")
    extra = ("decision",)
    if decision.approval is not None:
        ck.template(decision.approval.confirm_text, [*path, "approval", "confirm_text"], flags, extra)
    ck.template(decision.warning, [*path, "warning"], flags, extra)
    ck.template(decision.repeat_warning, [*path, "repeat_warning"], flags, extra)
    ck.template(decision.drops, [*path, "drops"], flags, extra)
    ck.template(decision.consequence, [*path, "consequence"], (), extra)
    for j, pre in enumerate(decision.preconditions):
        ppath = [*path, "preconditions", j]
        pre._cond = ck.condition(pre.require, [*ppath, "require"], flags)
        ck.template(pre.reason, [*ppath, "reason"], flags, extra)
        ck.rules(pre.rules, rs.rules, [*ppath, "rules"])
    for j, fact in enumerate(decision.verify.report):
        if fact not in FACT_NAMES:
            ck.at([*path, "verify", "report", j], f"unknown fact {fact!r} (see docs/facts.md)")
    ck.rules(decision.verify.rules, rs.rules, [*path, "verify", "rules"])
    watch = decision.verify.watch
    for field_name in ("every", "window") if watch is not None else ():
        limit_name = getattr(watch, field_name)
        limit = rs.limits.get(limit_name)
        if limit is None or limit.duration is None:
            ck.at(
                [*path, "verify", "watch", field_name], f"names {limit_name!r}, which is not a duration under 'limits:'"
            )
    for j, step in enumerate(decision.verify.next):
        spath = [*path, "verify", "next", j]
        if step.when is not None:
            step._cond = ck.condition(step.when, [*spath, "when"])
        ck.template(step.say, [*spath, "say"], (), extra)
        ck.rules(step.rules, rs.rules, [*spath, "rules"])
        for k, suggested in enumerate(step.suggest):
            if suggested not in rs.decisions:
                ck.at([*spath, "suggest", k], f"unknown decision {suggested!r} referenced")
    for code, handler in decision.on_error.items():
        epath = [*path, "on_error", code]
        ck.rules(handler.rules, rs.rules, [*epath, "rules"])
        if handler.wait is not None:
            for field_name in ("every", "up_to", "max_every"):
                limit_name = getattr(handler.wait, field_name)
                if limit_name is None:
                    continue
                limit = rs.limits.get(limit_name)
                if limit is None or limit.duration is None:
                    ck.at(
                        [*epath, "wait", field_name],
                        f"names {limit_name!r}, which is not a duration under 'limits:'",
                    )
