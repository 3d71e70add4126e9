"""The runbook's condition language and its text templates.

Conditions are YAML mappings, compiled once at load time (so a typo is a ``file:line`` error, not a
silently unreachable branch) and evaluated with three-valued logic: a fact that is ``None`` is
*unknown*, a test on it is unknown, and a branch is chosen only when its condition is definitely true.

    {all: [c, …]}  {any: [c, …]}  {not: c}  {always: true}
    {fact: name, <op>: value}     {flag: name, <op>: value}

Operators: eq, ne, in, not_in, gt, ge, lt, le, contains, matches, is_true, is_false, is_null, known.
A value may itself be a reference: ``{fact: other}`` or ``{flag: turn}``. Templates replace
``{fact.name}``, ``{flag.name}``, ``{decision}`` (optionally ``{name|time}``, ``|date``, ``|yesno``);
``None`` renders as ``unknown``. See docs/runbook-format.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from bot.clock import parse_time
from bot.runbook.vocabulary import FACT_NAMES

Tri = bool | None
Problem = Callable[[Sequence[object], str], None]

COMPARE_OPS = ("eq", "ne", "in", "not_in", "gt", "ge", "lt", "le", "contains", "matches")
FLAG_OPS = ("is_true", "is_false", "is_null", "known")
OPERATORS = COMPARE_OPS + FLAG_OPS
COMBINATORS = ("all", "any", "not", "always")


@dataclass(frozen=True)
class Ref:
    """A reference to a fact or a flag value, used as a subject or as an operand."""

    kind: str  # "fact" | "flag"
    name: str

    def resolve(self, ctx: Context) -> object:
        return ctx.facts.get(self.name) if self.kind == "fact" else ctx.flags.get(self.name)


@dataclass(frozen=True)
class Context:
    """What a condition is evaluated against."""

    facts: Mapping[str, object]
    flags: Mapping[str, object]


class Cond:
    """A compiled condition."""

    def evaluate(self, ctx: Context) -> Tri:
        raise NotImplementedError

    def refs(self) -> list[Ref]:
        raise NotImplementedError


@dataclass(frozen=True)
class Always(Cond):
    value: bool

    def evaluate(self, ctx: Context) -> Tri:
        return self.value

    def refs(self) -> list[Ref]:
        return []


@dataclass(frozen=True)
class AllOf(Cond):
    items: tuple[Cond, ...]

    def evaluate(self, ctx: Context) -> Tri:
        unknown = False
        for item in self.items:
            value = item.evaluate(ctx)
            if value is False:
                return False
            unknown = unknown or value is None
        return None if unknown else True

    def refs(self) -> list[Ref]:
        return [r for item in self.items for r in item.refs()]


@dataclass(frozen=True)
class AnyOf(Cond):
    items: tuple[Cond, ...]

    def evaluate(self, ctx: Context) -> Tri:
        unknown = False
        for item in self.items:
            value = item.evaluate(ctx)
            if value is True:
                return True
            unknown = unknown or value is None
        return None if unknown else False

    def refs(self) -> list[Ref]:
        return [r for item in self.items for r in item.refs()]


@dataclass(frozen=True)
class Not(Cond):
    item: Cond

    def evaluate(self, ctx: Context) -> Tri:
        value = self.item.evaluate(ctx)
        return None if value is None else not value

    def refs(self) -> list[Ref]:
        return self.item.refs()


def _as_time(value: object) -> datetime | None:
    return parse_time(value) if isinstance(value, str) and value[:4].isdigit() else None


def _ordered(left: object, right: object) -> tuple[Any, Any] | None:
    """Make two values comparable: numbers, ISO times (whatever their precision), or strings."""
    if isinstance(left, bool) or isinstance(right, bool):
        return None
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left, right
    lt, rt = _as_time(left), _as_time(right)
    if lt is not None and rt is not None:
        return lt, rt
    if isinstance(left, str) and isinstance(right, str):
        return left, right
    return None


def _equal(left: object, right: object) -> bool:
    pair = _ordered(left, right)
    if pair is not None and isinstance(pair[0], datetime):
        return bool(pair[0] == pair[1])
    if isinstance(left, bool) != isinstance(right, bool):
        return False
    return left == right


@dataclass(frozen=True)
class Test(Cond):
    subject: Ref
    op: str
    operand: object = None

    def _operand(self, ctx: Context) -> object:
        if isinstance(self.operand, Ref):
            return self.operand.resolve(ctx)
        if isinstance(self.operand, tuple):
            return tuple(x.resolve(ctx) if isinstance(x, Ref) else x for x in self.operand)
        return self.operand

    def evaluate(self, ctx: Context) -> Tri:
        value = self.subject.resolve(ctx)
        if self.op == "is_null":
            return value is None if self.operand else value is not None
        if self.op == "known":
            return value is not None if self.operand else value is None
        if value is None:
            return None
        if self.op == "is_true":
            return value is True
        if self.op == "is_false":
            return value is False
        operand = self._operand(ctx)
        if self.op in ("in", "not_in"):
            assert isinstance(operand, tuple)
            found = any(_equal(value, x) for x in operand)
            return found if self.op == "in" else not found
        if operand is None:
            return None
        if self.op == "eq":
            return _equal(value, operand)
        if self.op == "ne":
            return not _equal(value, operand)
        if self.op == "contains":
            return isinstance(value, str) and isinstance(operand, str) and operand in value
        if self.op == "matches":
            return isinstance(value, str) and isinstance(operand, re.Pattern) and bool(operand.search(value))
        pair = _ordered(value, operand)
        if pair is None:
            return None
        left, right = pair
        return bool({"gt": left > right, "ge": left >= right, "lt": left < right, "le": left <= right}[self.op])

    def refs(self) -> list[Ref]:
        out = [self.subject]
        if isinstance(self.operand, Ref):
            out.append(self.operand)
        elif isinstance(self.operand, tuple):
            out.extend(x for x in self.operand if isinstance(x, Ref))
        return out


def _check_fact(name: object, path: Sequence[object], problem: Problem) -> bool:
    if not isinstance(name, str) or name not in FACT_NAMES:
        problem(path, f"unknown fact '{name}' (facts are listed in docs/facts.md)")
        return False
    return True


def _ref(
    raw: Mapping[str, object], path: Sequence[object], problem: Problem, flags: Collection[str] | None
) -> Ref | None:
    if "fact" in raw:
        return Ref("fact", str(raw["fact"])) if _check_fact(raw["fact"], [*path, "fact"], problem) else None
    name = raw.get("flag")
    if flags is None:
        problem([*path, "flag"], "flags can only be used in decision preconditions")
        return None
    if not isinstance(name, str) or name not in flags:
        problem([*path, "flag"], f"unknown flag '{name}' (known here: {', '.join(sorted(flags)) or 'none'})")
        return None
    return Ref("flag", name)


def _operand(
    raw: object, path: Sequence[object], problem: Problem, flags: Collection[str] | None
) -> tuple[bool, object]:
    if isinstance(raw, Mapping):
        if set(raw) in ({"fact"}, {"flag"}):
            ref = _ref(raw, path, problem, flags)
            return ref is not None, ref
        problem(path, "an operand is a plain value or a reference {fact: name} / {flag: name}")
        return False, None
    if isinstance(raw, list):
        problem(path, "a list operand is only allowed with 'in' / 'not_in'")
        return False, None
    return True, raw


def compile_condition(
    raw: object, path: Sequence[object], problem: Problem, flags: Collection[str] | None = None
) -> Cond | None:
    """Compile one YAML condition, reporting every problem with its path; None when invalid."""
    path = list(path)
    if not isinstance(raw, Mapping) or not raw:
        problem(path, "a condition is a mapping: {all: […]}, {any: […]}, {not: …} or {fact: name, <op>: value}")
        return None
    keys = set(raw)
    for combinator in ("all", "any"):
        if combinator in keys:
            if keys != {combinator}:
                problem(path, f"'{combinator}' cannot be mixed with {sorted(keys - {combinator})}")
                return None
            items = raw[combinator]
            if not isinstance(items, list) or not items:
                problem([*path, combinator], f"'{combinator}' takes a non-empty list of conditions")
                return None
            compiled = [compile_condition(x, [*path, combinator, i], problem, flags) for i, x in enumerate(items)]
            if any(c is None for c in compiled):
                return None
            parts = tuple(c for c in compiled if c is not None)
            return AllOf(parts) if combinator == "all" else AnyOf(parts)
    if "not" in keys:
        if keys != {"not"}:
            problem(path, f"'not' cannot be mixed with {sorted(keys - {'not'})}")
            return None
        inner = compile_condition(raw["not"], [*path, "not"], problem, flags)
        return Not(inner) if inner is not None else None
    if "always" in keys:
        if keys != {"always"} or not isinstance(raw["always"], bool):
            problem(path, "'always' takes true or false and nothing else")
            return None
        return Always(bool(raw["always"]))
    subjects = keys & {"fact", "flag"}
    if len(subjects) != 1:
        unknown = sorted(str(k) for k in keys - {"fact", "flag", *OPERATORS})
        if unknown:
            problem(
                path,
                f"unknown condition operator {unknown[0]!r} (known: {', '.join(COMBINATORS + OPERATORS)})",
            )
        else:
            problem(path, "a test names exactly one subject: 'fact: <name>' or 'flag: <name>'")
        return None
    ops = keys - subjects
    unknown_ops = sorted(str(k) for k in ops - set(OPERATORS))
    if unknown_ops:
        problem(
            [*path, unknown_ops[0]],
            f"unknown condition operator {unknown_ops[0]!r} (known: {', '.join(OPERATORS)})",
        )
        return None
    if len(ops) != 1:
        problem(path, f"a test has exactly one operator, got {sorted(str(o) for o in ops) or 'none'}")
        return None
    op = str(next(iter(ops)))
    subject = _ref({k: raw[k] for k in subjects}, path, problem, flags)
    if subject is None:
        return None
    value = raw[op]
    if op in FLAG_OPS:
        if not isinstance(value, bool) or (op in ("is_true", "is_false") and value is not True):
            problem([*path, op], f"'{op}' takes " + ("true" if op in ("is_true", "is_false") else "true or false"))
            return None
        return Test(subject, op, value)
    if op in ("in", "not_in"):
        if not isinstance(value, list) or not value:
            problem([*path, op], f"'{op}' takes a non-empty list")
            return None
        operands: list[object] = []
        for i, item in enumerate(value):
            ok, operand = _operand(item, [*path, op, i], problem, flags)
            if not ok:
                return None
            operands.append(operand)
        return Test(subject, op, tuple(operands))
    if op == "matches":
        if not isinstance(value, str):
            problem([*path, op], "'matches' takes a regular expression")
            return None
        try:
            return Test(subject, op, re.compile(value))
        except re.error as exc:
            problem([*path, op], f"bad regular expression {value!r}: {exc}")
            return None
    ok, operand = _operand(value, [*path, op], problem, flags)
    return Test(subject, op, operand) if ok else None


# --- templates ---------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}|]*)(?:\|([^{}]*))?\}")
FILTERS = ("time", "date", "yesno")


def check_template(
    text: str,
    path: Sequence[object],
    problem: Problem,
    flags: Collection[str] = (),
    extra: Collection[str] = (),
) -> None:
    """Report placeholders that name an unknown fact/flag or filter, and stray braces."""
    pos = 0
    for match in _PLACEHOLDER.finditer(text):
        between = text[pos : match.start()]
        if "{" in between or "}" in between:
            problem(path, f"stray brace in template {text!r} (write {{{{ or }}}} for a literal brace)")
            return
        pos = match.end()
        name = match.group(1)
        if name is None:
            continue
        name = name.strip()
        if name.startswith("flag."):
            if name[5:] not in flags:
                problem(path, f"template placeholder {{{name}}} names an unknown flag")
        elif name not in FACT_NAMES and name not in extra:
            problem(path, f"template placeholder {{{name}}} names an unknown fact (see docs/facts.md)")
        filt = match.group(2)
        if filt is not None and filt.strip() not in FILTERS:
            problem(path, f"unknown template filter '|{filt}' (known: {', '.join(FILTERS)})")
    rest = text[pos:]
    if "{" in rest or "}" in rest:
        problem(path, f"stray brace in template {text!r} (write {{{{ or }}}} for a literal brace)")


def format_value(value: object, filt: str | None = None) -> str:
    """How a fact reads in text: None is 'unknown', booleans read yes/no, times can be shortened."""
    if value is None:
        return "unknown"
    if filt == "yesno" or isinstance(value, bool):
        return "yes" if value else "no"
    if filt in ("time", "date"):
        when = _as_time(value)
        if when is not None:
            if filt == "time":
                return when.strftime("%H:%M:%S") + "Z"
            return when.strftime("%Y-%m-%d %H:%M:%S") + "Z"
    return str(value)


def known_absent(name: str, values: Mapping[str, object]) -> bool:
    """``attention.code`` of a session known to have no attention block reads "none", not "unknown":
    a field of an object whose ``<object>.present`` fact is False is absent, which is not unknown; so
    is a ``retry_at`` the API sent as null (not in backoff)."""
    head, dot, tail = name.partition(".")
    if name == "attention.retry_at" and values.get("attention.in_backoff") is False:
        return True  # R2.2: present and null (stopped or relaunched): "none", not "unknown"
    return bool(dot) and tail != "present" and values.get(f"{head}.present") is False


def render(text: str, values: Mapping[str, object]) -> str:
    """Fill a template; names missing from ``values`` read 'unknown' (never a KeyError), fields of an
    object known to be absent read 'none'."""

    def sub(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole in ("{{", "}}"):
            return whole[0]
        name = (match.group(1) or "").strip()
        filt = match.group(2).strip() if match.group(2) else None
        value = values.get(name)
        if value is None and known_absent(name, values):
            return "none"
        return format_value(value, filt)

    return _PLACEHOLDER.sub(sub, text)


class Variant(Protocol):
    """One alternative of a conditional text (``{when: …, text: …}``); see :func:`pick_text`."""

    text: str

    @property
    def condition(self) -> Cond | None: ...


def pick_text(texts: str | Sequence[Variant] | None, ctx: Context) -> str | None:
    """The template a conditional text stands for now: a plain string, or the first variant whose
    ``when`` is surely true (a variant without ``when`` always applies); None when none applies."""
    if texts is None or isinstance(texts, str):
        return texts or None
    for variant in texts:
        cond = variant.condition
        if cond is None or cond.evaluate(ctx) is True:
            return variant.text
    return None
