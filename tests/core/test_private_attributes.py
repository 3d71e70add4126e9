"""No code in bot/ reaches into a dependency's private attributes (``transport._pool._network_backend``).

Why: a private attribute is not an interface; the next release of the library may rename it and the
guarantee built on it (a total deadline, a signature check) is gone without an error. A private name
is the bot's own when the same module defines it (a function or class, a module or local name, an
argument, an import alias, an attribute set on ``self``/``cls``) or when it is reached through
``self``/``cls``; any other ``x._name`` (or ``getattr(x, "_name")``) is taken for a dependency's. Per
module, so that a name the bot happens to use elsewhere (``self._pool`` of some class) does not
excuse ``transport._pool``; only what a class of bot/ declares in its body (a field, a method) is the
bot's own everywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import bot

BOT = Path(bot.__file__).resolve().parent
# A type name only (typeshed names it; the standard library has no public one): no behaviour touched.
ALLOWED = {"_SubParsersAction"}
_ATTR_CALLS = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_names(trees: list[ast.AST]) -> set[str]:
    own: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif isinstance(node, ast.alias):
                own.add(node.asname or node.name.split(".")[-1])
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                own.add(node.attr)
    return own


def _declared_in_classes(trees: list[ast.Module]) -> set[str]:
    declared: set[str] = set()
    for tree in trees:
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for item in cls.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    declared.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    declared.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    declared.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return declared


def foreign_private_uses(sources: dict[str, str]) -> list[str]:
    """``file:line name`` for each private attribute used in ``sources`` that they do not define."""
    found: list[str] = []
    trees = {name: ast.parse(text) for name, text in sources.items()}
    declared = _declared_in_classes(list(trees.values()))
    for name, tree in trees.items():
        own = _own_names([tree]) | declared | ALLOWED
        for node in ast.walk(tree):
            attr: str | None = None
            if isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                attr = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in _ATTR_CALLS
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                attr = node.args[1].value
            if attr is not None and _private(attr) and attr not in own:
                found.append(f"{name}:{node.lineno} {attr}")
    return found


def test_no_module_of_bot_uses_a_private_attribute_of_a_dependency() -> None:
    sources = {
        str(p.relative_to(BOT)): p.read_text(encoding="utf-8")
        for p in sorted(BOT.rglob("*.py"))
        if "__pycache__" not in p.parts
    }
    assert foreign_private_uses(sources) == []


def test_the_checker_catches_a_private_attribute_of_a_dependency() -> None:
    """What the control host client once did to give httpx's pool a network backend, and what the
    front did to read Bolt's signing secret; the bot's own private names stay allowed."""
    source = (
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._own = 1\n"
        "    def _helper(self):\n"
        "        return self._own + other._own\n"
        "pool = transport._pool\n"
        "pool._network_backend = backend\n"
        "secret = getattr(app, '_signing_secret', None)\n"
    )
    assert foreign_private_uses({"m.py": source}) == [
        "m.py:6 _pool",
        "m.py:7 _network_backend",
        "m.py:8 _signing_secret",
    ]
