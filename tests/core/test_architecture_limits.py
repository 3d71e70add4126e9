"""The architecture's measurable promise (docs/architecture.md): typed core boundaries.

Why a test: this limit erodes one convenient edit at a time; the suite is where a reviewer sees it.
(Modules are cut by job, not by length: ruff's complexity rules in pyproject.toml bound a function's
size; no test counts a module's lines.)
- At most 10 bare ``Any`` annotations (``x: Any``, ``-> Any``, ``*args: Any``) in the core, i.e.
  outside the fronts (``bot/slack``, ``bot/console``) and the sandbox: everything past the control
  host client's lenient parsing is a typed model.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bot

BOT = Path(bot.__file__).resolve().parent
MAX_BARE_ANY = 10
FRONTS_AND_DOUBLES = ("slack", "console", "sandbox")


def _modules(exclude: tuple[str, ...]) -> list[Path]:
    return sorted(
        p for p in BOT.rglob("*.py") if p.relative_to(BOT).parts[0] not in exclude and "__pycache__" not in p.parts
    )


def _is_any(node: ast.expr | None) -> bool:
    return (
        (isinstance(node, ast.Name) and node.id == "Any")
        or (isinstance(node, ast.Attribute) and node.attr == "Any")
        or (isinstance(node, ast.Constant) and node.value == "Any")
    )


def bare_any_annotations(source: str) -> list[int]:
    """Line numbers of annotations that are exactly ``Any`` (not ``dict[str, Any]``)."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            annotations = [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs]
            annotations += [a.annotation for a in (args.vararg, args.kwarg) if a is not None]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        found += [a.lineno for a in annotations if a is not None and _is_any(a)]
    return found


def test_the_counter_sees_bare_any_and_only_bare_any() -> None:
    source = (
        "from typing import Any\n"
        "import typing\n"
        "def f(a: Any, *b: Any, **c: 'Any') -> typing.Any: ...\n"
        "x: Any = 1\n"
        "def g(a: dict[str, Any], b: list[Any] | None) -> tuple[Any, ...]: ...\n"
    )
    assert bare_any_annotations(source) == [3, 3, 3, 3, 4]


def test_the_core_has_at_most_ten_bare_any_annotations() -> None:
    where = {
        str(p.relative_to(BOT.parent)): lines
        for p in _modules(exclude=FRONTS_AND_DOUBLES)
        if (lines := bare_any_annotations(p.read_text(encoding="utf-8")))
    }
    total = sum(len(v) for v in where.values())
    assert total <= MAX_BARE_ANY, f"{total} bare Any annotations in the core (limit {MAX_BARE_ANY}): {where}"


@pytest.mark.parametrize("part", FRONTS_AND_DOUBLES)
def test_the_exempt_parts_exist(part: str) -> None:
    # A renamed front would silently widen the exemption; fail loudly instead.
    assert (BOT / part).is_dir()
