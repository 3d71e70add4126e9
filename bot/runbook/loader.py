"""Load and validate runbook files; every problem is reported as ``file:line: what is wrong``.

The bot refuses to start with an invalid runbook, and ``recover-bot runbook check`` shows the same
problems, so a bad edit is caught before it can pick a wrong branch or allow a wrong decision.
Validation has two passes: the schema (pydantic, errors mapped back to lines) per file, then references
across the whole set (rules, decisions, facts, flags, limits, duplicate subcommands).
"""

from __future__ import annotations

import copy
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from bot.errors import RunbookError
from bot.runbook.checks import Checker, check_branch, check_command, check_decision, dotted
from bot.runbook.escalation import EscalationSpec
from bot.runbook.installation import WATCH_VALUES, WatchSectionSpec
from bot.runbook.model import BranchSpec, RunbookFile, RunbookSet
from bot.runbook.values import RULE_ID
from bot.runbook.yamlio import LineMap, read_yaml_file


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


def _child(node: object, part: object) -> tuple[bool, object]:
    """``node[part]`` when the data has it: a mapping's key or a list's index in range."""
    if isinstance(node, dict):
        return part in node, node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return True, node[part]
    return False, None


def _data_path(data: object, loc: Sequence[object]) -> list[object]:
    """Keep the parts of a pydantic location that index real data (drop union/validator tags)."""
    path: list[object] = []
    node = data
    for part in loc:
        found, child = _child(node, part)
        if found:
            node = child
            path.append(part)
        elif isinstance(node, dict | list):
            # missing key or a tag: keep a missing key as the last part (its parent's line is used)
            if isinstance(part, str) and not ("[" in part or part.startswith("function-")):
                path.append(part)
            break
    return path


def _schema_problems(exc: ValidationError, data: object, lines: LineMap) -> list[str]:
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
        problems.append(f"{lines.file}:{lines.line(path)}: {dotted(where)}: {msg}")
    return problems


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


#: Runbook sets already parsed, by the identity of their files (see :func:`load_runbooks`).
_PARSED: OrderedDict[tuple[tuple[object, ...], ...], RunbookSet] = OrderedDict()
_PARSED_LOCK = threading.Lock()
_PARSED_KEEP = 8


def _identity(files: list[Path]) -> tuple[tuple[object, ...], ...] | None:
    """Each file's path and what the file system says of it (device, inode, size, change time in ns,
    for the link and its target): an edit, a replaced file or a new link is a new identity. None
    when a file cannot be stat'ed: the normal load reports it."""
    out: list[tuple[object, ...]] = []
    for path in files:
        try:
            link, target = os.lstat(path), os.stat(path)
        except OSError:
            return None
        out.append(
            (
                str(path),
                link.st_dev,
                link.st_ino,
                link.st_mtime_ns,
                link.st_size,
                target.st_dev,
                target.st_ino,
                target.st_mtime_ns,
                target.st_ctime_ns,
                target.st_size,
            )
        )
    return tuple(out)


def load_runbooks(paths: Path | str | Sequence[Path | str]) -> RunbookSet:
    """Load, validate and merge runbooks; raise :class:`RunbookError` listing every problem.

    A set whose files are unchanged since they were last parsed in this process is not parsed again:
    each installation's core and each check of a fleet read the same runbooks, and parsing (line-
    tracking YAML, the schema, the cross-file checks) costs 150-300 ms where a copy costs 10 ms
    (measured on this repository's runbooks, 2 shared cores). The caller gets its own deep copy, so
    nothing one core fills into its models reaches another."""
    files = expand_paths(paths)
    if not files:
        raise RunbookError([f"{paths}: no runbook files (*.yaml) found"])
    key = _identity(files)
    if key is not None:
        with _PARSED_LOCK:
            cached = _PARSED.get(key)
            if cached is not None:
                _PARSED.move_to_end(key)
                return copy.deepcopy(cached)
    runbooks = _parse(files)
    if key is not None:
        with _PARSED_LOCK:
            _PARSED[key] = copy.deepcopy(runbooks)
            while len(_PARSED) > _PARSED_KEEP:
                _PARSED.popitem(last=False)
    return runbooks


def _parse(files: list[Path]) -> RunbookSet:
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
    ck = Checker()
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
        for section in ("reconciler", "workers", "docker", "api", "watch", "handoff", "escalation"):
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
            check_command(ck, rs, command, ["commands", i])
        for i, branch in enumerate(model.branches):
            check_branch(ck, rs, branch, ["branches", i])
        for name, decision in model.decisions.items():
            check_decision(ck, rs, decision, ["decisions", name])
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
        if model.watch is not None:
            _check_watch(ck, rs, model.watch)
        if model.escalation is not None:
            _check_escalation(ck, rs, model.escalation)
    return rs, ck.problems


def _check_escalation(ck: Checker, rs: RunbookSet, spec: EscalationSpec) -> None:
    """Rule references resolve, and break-glass names only two-person decisions the runbook has."""
    ck.rules(spec.rules, rs.rules, ["escalation", "rules"])
    for i, step in enumerate(spec.steps):
        ck.rules(step.rules, rs.rules, ["escalation", "steps", i, "rules"])
    ck.rules(spec.break_glass.rules, rs.rules, ["escalation", "break_glass", "rules"])
    for i, name in enumerate(spec.break_glass.decisions):
        decision = rs.decisions.get(name)
        if decision is None:
            ck.at(["escalation", "break_glass", "decisions", i], f"no decision named {name!r}")
        elif (decision.approval is None or decision.approval.policy != "two_person") and not decision.irreversible:
            # (an irreversible decision without two people is reported by its own check)
            ck.at(
                ["escalation", "break_glass", "decisions", i],
                f"{name!r} is not a two-person decision: break-glass replaces a second person only",
            )


def _check_watch(ck: Checker, rs: RunbookSet, watch: WatchSectionSpec) -> None:
    """Each watch value is of its kind (a poll interval is a duration, the storm threshold a count)."""
    ck.rules(watch.rules, rs.rules, ["watch", "rules"])
    for name, kind in WATCH_VALUES.items():
        value = getattr(watch, name)
        ck.rules(value.rules, rs.rules, ["watch", name, "rules"])
        if getattr(value, kind) is None:
            ck.at(["watch", name], f"must be a {{{kind}: …}} value")
