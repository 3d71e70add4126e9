"""Load and validate runbook files; every problem is reported as ``file:line: what is wrong``.

The bot refuses to start with an invalid runbook, and ``recover-bot runbook check`` shows the same
problems, so a bad edit is caught before it can pick a wrong branch or allow a wrong decision.
Validation has two passes: the schema (pydantic, errors mapped back to lines) per file, then references
across the whole set (rules, decisions, facts, flags, limits, duplicate subcommands).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.errors import RunbookError
from bot.runbook.conditions import Cond, check_template, compile_condition
from bot.runbook.model import (
    RULE_ID,
    BranchSpec,
    CommandSpec,
    DecisionSpec,
    RunbookFile,
    RunbookSet,
    TextVariant,
)
from bot.runbook.vocabulary import APPROVAL_POLICIES, FACT_NAMES
from bot.runbook.yamlio import LineMap, read_yaml_file

# Limits that supply defaults when a decision leaves them out (names, not values: values live in YAML).
DEFAULT_EXPIRY_LIMIT = "approval_expiry"
DEFAULT_REPEAT_LIMIT = "repeated_decision_threshold"
IDS_PLACEHOLDER = "{ids}"
_BODY_SOURCE = re.compile(r"^(const|flag|fact|arg):(.*)$")
_PATH_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_POLICIES = " | ".join(sorted(APPROVAL_POLICIES))


def expand_paths(paths: Path | str | Sequence[Path | str]) -> list[Path]:
    """A directory means every ``*.yaml`` in it (sorted); files are taken as given."""
    items = [paths] if isinstance(paths, Path | str) else list(paths)
    out: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()))
        else:
            out.append(path)
    return out


def _dotted(loc: Sequence[object]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def _data_path(data: Any, loc: Sequence[object]) -> list[object]:
    """Keep the parts of a pydantic location that index real data (drop union/validator tags)."""
    path: list[object] = []
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            node = node[part]
            path.append(part)
        elif isinstance(node, dict | list):
            # missing key or a tag: keep a missing key as the last part (its parent's line is used)
            if isinstance(part, str) and not ("[" in part or part.startswith("function-")):
                path.append(part)
            break
    return path


def _schema_problems(exc: ValidationError, data: Any, lines: LineMap) -> list[str]:
    problems = []
    for err in exc.errors():
        path = _data_path(data, err["loc"])
        kind = err["type"]
        if kind == "missing":
            where, msg = path[:-1], f"missing field '{path[-1]}'" if path else "missing field"
        elif kind == "extra_forbidden":
            where, msg = path[:-1], f"unknown field '{path[-1]}'" if path else "unknown field"
        else:
            where, msg = path, str(err["msg"]).removeprefix("Value error, ")
        problems.append(f"{lines.file}:{lines.line(path)}: {_dotted(where)}: {msg}")
    return problems


class _Checker:
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
        self.problems.append(f"{self.lines.file}:{self.lines.line(path)}: {_dotted(path)}: {message}")

    def rules(self, rules: Collection[str], known: Collection[str], path: Sequence[object]) -> None:
        for i, rule in enumerate(rules):
            if rule not in known:
                self.at([*path, i], f"cites rule {rule!r}, which no loaded runbook defines (under 'rules:')")

    def condition(
        self, raw: object, path: Sequence[object], flags: Collection[str] | None = None
    ) -> Cond | None:
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


def _read_file(path: Path) -> tuple[RunbookFile | None, LineMap, list[str]]:
    data, lines, problems = read_yaml_file(path)
    if problems:
        return None, lines, problems
    if not isinstance(data, dict):
        return None, lines, [f"{path}:1: a runbook file is a mapping with version, name, title, …"]
    # Top-level keys starting with "x-" hold YAML anchors for reuse (as in compose files).
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    try:
        model = RunbookFile.model_validate(data)
    except ValidationError as exc:
        return None, lines, _schema_problems(exc, data, lines)
    for command in model.commands:
        command.source = str(path)
    return model, lines, []


def load_runbooks(paths: Path | str | Sequence[Path | str]) -> RunbookSet:
    """Load, validate and merge runbooks; raise :class:`RunbookError` listing every problem."""
    files = expand_paths(paths)
    if not files:
        raise RunbookError([f"{paths}: no runbook files (*.yaml) found"])
    problems: list[str] = []
    parsed: list[tuple[Path, RunbookFile, LineMap]] = []
    for path in files:
        if not path.exists():
            problems.append(f"{path}:1: no such file")
            continue
        model, lines, file_problems = _read_file(path)
        problems.extend(file_problems)
        if model is not None:
            parsed.append((path, model, lines))
    if problems:
        raise RunbookError(problems)
    parsed.sort(key=lambda item: (item[1].order, str(item[0])))
    runbooks, problems = _assemble(parsed)
    if problems:
        raise RunbookError(problems)
    return runbooks


def _assemble(parsed: list[tuple[Path, RunbookFile, LineMap]]) -> tuple[RunbookSet, list[str]]:
    rs = RunbookSet(files=[p for p, _, _ in parsed], names=[m.name for _, m, _ in parsed])
    ck = _Checker()
    command_at: dict[str, str] = {}
    decision_at: dict[str, str] = {}
    limit_at: dict[str, str] = {}
    branch_at: dict[str, str] = {}
    single_at: dict[str, str] = {}
    fallbacks: list[BranchSpec] = []

    # Pass 1: merge, catching duplicates (also across files).
    for _path, model, lines in parsed:
        ck.lines = lines
        for rule, summary in model.rules.items():
            if not RULE_ID.match(rule):
                ck.at(["rules", rule], f"bad rule id {rule!r}: rules are numbered like R2.10")
                continue
            rs.rules.setdefault(rule, summary)
        if model.ids is not None:
            if rs.id_pattern is not None and rs.id_pattern.pattern != model.ids.pattern:
                ck.at(["ids", "pattern"], f"a different id pattern is already defined at {single_at['ids']}")
            else:
                rs.id_pattern = re.compile(model.ids.pattern)
                rs.id_help = model.ids.help
                single_at["ids"] = lines.where(["ids"])
        for i, command in enumerate(model.commands):
            if command.name in command_at:
                ck.at(
                    ["commands", i, "name"],
                    f"duplicate subcommand {command.name!r} (already defined at {command_at[command.name]})",
                )
            else:
                command_at[command.name] = lines.where(["commands", i, "name"])
                rs.commands[command.name] = command
        for name, decision in model.decisions.items():
            decision.name = name
            if name in decision_at:
                ck.at(
                    ["decisions", name],
                    f"duplicate decision {name!r} (already defined at {decision_at[name]})",
                )
            else:
                decision_at[name] = lines.where(["decisions", name])
                rs.decisions[name] = decision
        for name, limit in model.limits.items():
            if name in limit_at:
                ck.at(["limits", name], f"duplicate limit {name!r} (already defined at {limit_at[name]})")
            else:
                limit_at[name] = lines.where(["limits", name])
                rs.limits[name] = limit
        for i, branch in enumerate(model.branches):
            if branch.id in branch_at:
                ck.at(
                    ["branches", i, "id"],
                    f"duplicate branch {branch.id!r} (already defined at {branch_at[branch.id]})",
                )
                continue
            branch_at[branch.id] = lines.where(["branches", i, "id"])
            if branch.fallback:
                fallbacks.append(branch)
            else:
                rs.branches.append(branch)
        for section in ("reconciler", "workers", "docker", "api"):
            value = getattr(model, section)
            if value is None:
                continue
            if section in single_at:
                ck.at([section], f"'{section}' is already defined at {single_at[section]}")
            else:
                single_at[section] = lines.where([section])
                setattr(rs, section, value)
    # R-precedence: the fallback ("unclassified") is tried last, whatever file it came from.
    if rs.branches or fallbacks:
        if len(fallbacks) != 1:
            where = ", ".join(branch_at[b.id] for b in fallbacks) or "none"
            ck.problems.append(
                f"{parsed[0][2].file}:1: branches: exactly one branch must be 'fallback: true' "
                f"(the unclassified answer), found {len(fallbacks)} ({where})"
            )
        rs.branches.extend(fallbacks)

    # Pass 2: references, conditions and templates, per file so lines are right.
    for _path, model, lines in parsed:
        ck.lines = lines
        for i, command in enumerate(model.commands):
            _check_command(ck, rs, command, ["commands", i])
        for i, branch in enumerate(model.branches):
            _check_branch(ck, rs, branch, ["branches", i])
        for name, decision in model.decisions.items():
            _check_decision(ck, rs, decision, ["decisions", name])
        for name, limit in model.limits.items():
            ck.rules(limit.rules, rs.rules, ["limits", name, "rules"])
        if model.reconciler is not None:
            rec = model.reconciler
            ck.rules(rec.rules, rs.rules, ["reconciler", "rules"])
            for field_name in ("review_window", "exec_timeout"):
                limit_name = getattr(rec, field_name)
                target = rs.limits.get(limit_name)
                if target is None or target.duration is None:
                    ck.at(
                        ["reconciler", field_name],
                        f"names {limit_name!r}, which is not a duration under 'limits:'",
                    )
        if model.docker is not None:
            ck.rules(model.docker.rules, rs.rules, ["docker", "rules"])
    return rs, ck.problems


def _check_command(ck: _Checker, rs: RunbookSet, command: CommandSpec, path: list[object]) -> None:
    ck.rules(command.rules, rs.rules, [*path, "rules"])
    if command.kind == "text" and not command.text and not command.checklist:
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


def _check_pattern(ck: _Checker, rs: RunbookSet, pattern: str, path: list[object]) -> None:
    if IDS_PLACEHOLDER in pattern:
        if rs.id_pattern is None:
            ck.at(path, "uses {ids} but no runbook defines 'ids: pattern:'")
            return
        pattern = pattern.replace(IDS_PLACEHOLDER, f"(?:{rs.id_pattern.pattern})")
    try:
        re.compile(pattern)
    except re.error as exc:
        ck.at(path, f"bad regular expression {pattern!r}: {exc}")


def _check_branch(ck: _Checker, rs: RunbookSet, branch: BranchSpec, path: list[object]) -> None:
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


def _check_decision(ck: _Checker, rs: RunbookSet, decision: DecisionSpec, path: list[object]) -> None:
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
