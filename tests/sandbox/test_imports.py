"""The sandbox must not share code with the bot's reading of the runbook.

If the sandbox imported diagnosis, decisions, runbook or router code, a misreading of the runbook
could hide in both sides and every test would still pass. This walks the imports of every module
under bot/sandbox, following imports of other ``bot`` modules transitively, and fails on any of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import bot

FORBIDDEN = ("bot.diagnosis", "bot.decisions", "bot.runbook", "bot.app.router")
BOT_ROOT = Path(bot.__file__).resolve().parent


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]
    base = BOT_ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(BOT_ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, package: str | None = None) -> set[str]:
    """Absolute names of every module imported by ``path`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if package is None:
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            # ``from bot import diagnosis`` imports a submodule.
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _closure(start: list[Path]) -> dict[str, set[str]]:
    """Every bot module reachable from ``start``, with what each imports."""
    seen: dict[str, set[str]] = {}
    queue = list(start)
    while queue:
        path = queue.pop()
        name = _module_name(path)
        if name in seen:
            continue
        imported = _imports(path)
        seen[name] = imported
        for module in imported:
            if module == "bot" or module.startswith("bot."):
                # Importing bot.x.y also runs bot.x's __init__.
                parts = module.split(".")
                for i in range(1, len(parts) + 1):
                    target = _module_file(".".join(parts[:i]))
                    if target is not None:
                        queue.append(target)
    return seen


def _sandbox_files() -> list[Path]:
    return sorted((BOT_ROOT / "sandbox").rglob("*.py"))


def test_every_sandbox_module_is_checked() -> None:
    names = {_module_name(p) for p in _sandbox_files()}
    assert {"bot.sandbox", "bot.sandbox._state", "bot.sandbox._server"} <= names


def test_sandbox_imports_nothing_from_diagnosis_decisions_runbook_or_router() -> None:
    closure = _closure(_sandbox_files())
    offenders = {
        f"{module} imports {imported}"
        for module, imports in closure.items()
        for imported in imports
        if any(imported == f or imported.startswith(f + ".") for f in FORBIDDEN)
    }
    assert not offenders, sorted(offenders)
    reached = {m for m in closure if not m.startswith("bot.sandbox")}
    # Only the shared foundations are allowed in the closure.
    assert reached <= {"bot", "bot.clock", "bot.errors", "bot.redact"}, sorted(reached)


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The walker itself must see relative and ``from bot import x`` imports (else the pin is hollow)."""
    sample = BOT_ROOT / "sandbox" / "_state.py"
    names = _imports(sample)
    assert "bot.clock" in names
    fake = tmp_path / "mod.py"
    fake.write_text(
        "from bot import decisions\nfrom ..runbook.model import X\nimport bot.app.router\n", encoding="utf-8"
    )
    found = _imports(fake, package="bot.sandbox")
    assert {"bot.decisions", "bot.runbook.model", "bot.app.router"} <= found
