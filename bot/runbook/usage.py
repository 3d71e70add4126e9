"""What each decision asks for, read from the runbook YAML: usage lines, help and the decide form.

A decision uses the flags its request body sends (``flag:<name>``), those required for it
(``required_for``) and those required always. The usage, the help, the Slack modal and the console's
form all come from here, so a runbook edit that adds a field to a decision shows everywhere at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.runbook.model import CommandSpec, FlagSpec, RunbookSet
from bot.runbook.values import IDS_PLACEHOLDER
from bot.vocab import Policy

_SHAPE = re.compile(r'--([a-z][a-z0-9-]*)[ =]("?<[^>]*>"?)')


@dataclass(frozen=True)
class FormField:
    """One input of a decision's form (a ``--flag`` with a value)."""

    name: str
    help: str
    required: bool
    pattern: re.Pattern[str] | None
    multiline: bool

    @property
    def label(self) -> str:
        return self.name.replace("-", " ").capitalize()

    def problem(self, value: str | None) -> str | None:
        """Why ``value`` is refused (empty when required, not matching the runbook's pattern), or None."""
        if not value or not value.strip():
            return empty_value(self.name, self.help) if self.required else None
        if self.pattern is not None and not self.pattern.fullmatch(value.strip()):
            return f"--{self.name} is not valid here: {self.help}"
        return None


def empty_value(name: str, help: str) -> str:
    """A flag given no text where it needs some, in words: what it is for, never its pattern."""
    return f"--{name} needs text: {help}" if help else f"--{name} needs text"


def decision_command(runbooks: RunbookSet, spec: CommandSpec) -> bool:
    """Whether ``spec`` takes a decision argument (decide, dryrun decide…)."""
    return any(arg.choices == "decisions" for arg in spec.args)


def _sent_flags(runbooks: RunbookSet, decision: str) -> set[str]:
    spec = runbooks.decisions.get(decision)
    if spec is None:
        return set()
    return {v.split(":", 1)[1] for v in spec.request.body.values() if v.startswith("flag:")}


def decision_flags(runbooks: RunbookSet, spec: CommandSpec, decision: str) -> list[tuple[FlagSpec, bool]]:
    """(flag, required) for every value flag ``decision`` uses, in the command's flag order."""
    sent = _sent_flags(runbooks, decision)
    used: list[tuple[FlagSpec, bool]] = []
    for flag in spec.flags:
        if not flag.value:
            continue
        required = flag.required or decision in flag.required_for
        if required or flag.name in sent:
            used.append((flag, required))
    return used


def value_pattern(runbooks: RunbookSet, pattern: str) -> re.Pattern[str]:
    """A value pattern with the runbook's id pattern filled in for the ids placeholder."""
    if IDS_PLACEHOLDER in pattern:
        ids = runbooks.id_pattern.pattern if runbooks.id_pattern is not None else r"(?!)"
        pattern = pattern.replace(IDS_PLACEHOLDER, f"(?:{ids})")
    return re.compile(pattern)


def flag_pattern(runbooks: RunbookSet, flag: FlagSpec) -> re.Pattern[str] | None:
    """A flag's value pattern with the runbook's id pattern filled in (None: any value)."""
    return value_pattern(runbooks, flag.pattern) if flag.pattern is not None else None


def decision_fields(runbooks: RunbookSet, spec: CommandSpec, decision: str) -> list[FormField]:
    """The decide form of ``decision``: only the fields it uses."""
    return [
        FormField(
            name=flag.name,
            help=flag.help,
            required=required,
            pattern=flag_pattern(runbooks, flag),
            multiline=flag.pattern is not None and "\\s" in flag.pattern,
        )
        for flag, required in decision_flags(runbooks, spec, decision)
    ]


def _confirms(runbooks: RunbookSet, decision: str) -> bool:
    spec = runbooks.decisions.get(decision)
    return spec is not None and spec.approval is not None and spec.approval.policy == Policy.CONFIRM


def _who(runbooks: RunbookSet, decision: str) -> str:
    spec = runbooks.decisions.get(decision)
    policy = spec.approval.policy if spec is not None and spec.approval is not None else None
    if policy == Policy.TWO_PERSON:
        return "a second person approves"
    if policy == Policy.CONFIRM:
        return "one person, confirmed with a button or --yes"
    return policy or ""


def decision_usage(runbooks: RunbookSet, spec: CommandSpec, decision: str) -> str:
    """``decide <session_id> abandon --turn <turn_id> --effects "<…>" --reason "<text>"``."""
    shapes = {m.group(1): m.group(2) for m in _SHAPE.finditer(spec.usage)}
    head = spec.usage.split(" [--", 1)[0].split(" --", 1)[0]
    words = [w if w != "<decision>" else decision for w in head.split(" ")]
    parts = [" ".join(words)]
    for flag, required in decision_flags(runbooks, spec, decision):
        shape = f"--{flag.name} {shapes.get(flag.name, '<value>')}"
        parts.append(shape if required else f"[{shape}]")
    if _confirms(runbooks, decision) and spec.flag("yes") is not None:
        parts.append("[--yes]")
    return " ".join(parts)


def decision_lines(runbooks: RunbookSet, spec: CommandSpec, prefix: str) -> list[str]:
    """One usage line per decision, with who decides, for help and error usage."""
    names = [d for d in runbooks.decidable]
    return [f"  {prefix} {decision_usage(runbooks, spec, d)}   ({_who(runbooks, d)})" for d in names]


def decide_form(runbooks: RunbookSet, decision: str) -> list[FormField]:
    """The form behind a decision button (Slack modal, console): the fields of its own command."""
    spec = runbooks.decisions.get(decision)
    command = runbooks.commands.get(spec.command) if spec is not None else None
    if command is None:
        return []
    return decision_fields(runbooks, command, decision)


def form_errors(fields: list[FormField], values: dict[str, str]) -> dict[str, str]:
    """Field name → why it is refused, for the form to show before anything is sent."""
    errors: dict[str, str] = {}
    for field in fields:
        problem = field.problem(values.get(field.name))
        if problem:
            errors[field.name] = problem
    return errors


# The order flags are printed in: what identifies the target, what accounts for it, then why.
_LINE_ORDER = ("turn", "evidence", "effects", "cause-fixed", "reason")
_BARE = re.compile(r"[A-Za-z0-9_.:-]+")
PLACEHOLDER = '"…"'


def flag_value(name: str, value: str) -> str:
    """A flag's value as typed: a turn id stays bare, any text quoted so the parser reads it back whole."""
    return value if name == "turn" and _BARE.fullmatch(value) else json.dumps(value, ensure_ascii=False)


def typed_line(
    subcommand: str,
    *args: str,
    values: Mapping[str, str | None] | None = None,
    needs: Sequence[str] = (),
    yes: bool = False,
) -> str:
    """The one typed ``/recover`` line the bot prints for a person to type or paste (a button's typed
    equivalent, a confirmation, a refusal's or a hand-off's next step): ``values`` are the request's own
    flags (one set to None is left out), ``needs`` the flags the person still fills in, shown as ``"…"``.
    Pasted back with the placeholders filled, it is the request the bot would send."""
    given = {k: v for k, v in (values or {}).items() if v is not None and v != ""}
    wanted = list(dict.fromkeys(needs))
    names = [n for n in _LINE_ORDER if n in given or n in wanted]
    names += [n for n in [*given, *wanted] if n not in names]
    parts = ["/recover", subcommand, *args]
    for name in dict.fromkeys(names):
        value = given.get(name)
        parts.append(f"--{name} {flag_value(name, value) if value is not None else PLACEHOLDER}")
    if yes:
        parts.append("--yes")
    return " ".join(parts)


def decide_line(
    session_id: str,
    decision: str,
    values: Mapping[str, str | None],
    *,
    needs: Sequence[str] = (),
    yes: bool = False,
) -> str:
    """:func:`typed_line` of a ``decide``: ``--reason`` is always asked for (every decision needs one)."""
    return typed_line("decide", session_id, decision, values=values, needs=[*needs, "reason"], yes=yes)
