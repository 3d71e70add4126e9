"""docs/architecture.md walks one `decide` then one `approve` through the modules: keep it true.

Why a test: the walk-through is how a newcomer learns where a request goes; a renamed module or
method would leave it pointing at nothing. Each numbered line names one module that imports, and every
code name it cites (`Room.method`, `function(…)`, `ctx.method`) is followed through the imported module:
an attribute of the module (a class, function or name it imports) and then of that, or a method of a
class the module defines, or a recorded step or request state (bot/vocab.py) that the module's call
writes. A word that merely appears in a comment or a string does not count. The rooms appear in the
order the code runs.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

from bot.vocab import RequestState, Step

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT.joinpath("docs/architecture.md")
HEADING = "## Walk-through: one `decide`, then one `approve`"
LINE = re.compile(r"^\d+\. `(bot/[\w/]+\.py)` — (.+)$")
CODE_NAME = re.compile(r"`([A-Za-z_][\w.]*)(?:\([^`]*\))?`")
VOCABULARY = {str(v) for v in Step} | {str(v) for v in RequestState}


def _sections() -> dict[str, list[tuple[str, str]]]:
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, "docs/architecture.md lost its walk-through"
    body = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for line in body.splitlines():
        if line in ("`decide`:", "`approve`:"):
            current = line.strip("`:")
            sections[current] = []
        elif re.match(r"^\d+\. ", line):
            match = LINE.match(line)
            assert match, f"a walk-through line names one module first: {line[:90]}"
            sections[current].append((match.group(1), match.group(2)))
    return sections


def test_both_walks_are_there_one_module_per_line() -> None:
    sections = _sections()
    assert set(sections) == {"decide", "approve"}
    for name, steps in sections.items():
        assert len(steps) >= 10, f"the {name} walk is too short to follow the code: {len(steps)} lines"


def _module_of(path: str) -> ModuleType:
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def _resolves(module: ModuleType, name: str) -> bool:
    """``name`` is something the imported module has: ``A.b.c`` by attributes from the module, or
    (``ctx.policy``, ``record_step``: a method named by its instance) a member of a class the module
    defines or imports."""
    head, *rest = name.split(".")
    target: object = module
    for part in (head, *rest):
        if not hasattr(target, part):
            break
        target = getattr(target, part)
    else:
        return True
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__.startswith("bot")]
    return any(hasattr(c, rest[-1] if rest else head) for c in classes)


def test_resolution_follows_the_code_not_the_text() -> None:
    # A name that appears only in a comment or docstring of a module does not resolve.
    walk = _module_of("bot/decisions/_authority.py")
    assert "client.send" in inspect.getsource(walk)
    assert _resolves(walk, "Gate.send_decision")
    assert not _resolves(walk, "Gate.no_such_method")
    assert not _resolves(walk, "walk_through_word_only")


@pytest.mark.parametrize("walk", ["decide", "approve"])
def test_every_module_and_code_name_cited_exists(walk: str) -> None:
    missing = []
    for path, words in _sections()[walk]:
        if not (ROOT / path).is_file():
            missing.append(path)
            continue
        module = _module_of(path)
        for name in CODE_NAME.findall(words):
            if name not in VOCABULARY and not _resolves(module, name):
                missing.append(f"{path}: {name}")
    assert not missing, f"the walk-through cites what the code no longer has: {missing}"


@pytest.mark.parametrize(
    ("walk", "order"),
    [
        (
            "decide",
            [
                "bot/slack/front.py",
                "bot/app/router.py",
                "bot/decisions/_service.py",
                "bot/decisions/_decide.py",
                "bot/decisions/_requests.py",
                "bot/store/_store.py",
            ],
        ),
        (
            "approve",
            [
                "bot/app/router.py",
                "bot/decisions/_service.py",
                "bot/decisions/_approvals.py",
                "bot/decisions/_lifecycle.py",
                "bot/decisions/_execution.py",
                "bot/controlhost/_client.py",
                "bot/decisions/_outcomes.py",
                "bot/decisions/_verify.py",
            ],
        ),
    ],
)
def test_the_rooms_come_in_the_order_the_code_runs(walk: str, order: list[str]) -> None:
    paths = [path for path, _ in _sections()[walk]]
    assert all(p in paths for p in order), [p for p in order if p not in paths]
    assert [paths.index(p) for p in order] == sorted(paths.index(p) for p in order), paths
