"""docs/architecture.md walks one `decide` then one `approve` through the modules: keep it true.

Why a test: the walk-through is how a newcomer learns where a request goes; a renamed module or
method would leave it pointing at nothing. Each numbered line names one module that exists, and every
code name it cites (`Room.method`, `function(…)`) is in that module's source, or is a recorded step or
request state (bot/vocab.py) that the module's call writes. The rooms appear in the order the code runs.
"""

from __future__ import annotations

import re
from pathlib import Path

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


@pytest.mark.parametrize("walk", ["decide", "approve"])
def test_every_module_and_code_name_cited_exists(walk: str) -> None:
    missing = []
    for path, words in _sections()[walk]:
        module = ROOT / path
        if not module.is_file():
            missing.append(path)
            continue
        source = module.read_text(encoding="utf-8")
        for name in CODE_NAME.findall(words):
            if name.split(".")[-1] not in source and name not in VOCABULARY:
                missing.append(f"{path}: {name}")
    assert not missing, f"the walk-through cites what the code no longer has: {missing}"


@pytest.mark.parametrize(
    ("walk", "order"),
    [
        ("decide", ["bot/slack/front.py", "bot/router.py", "bot/decisions/_service.py", "bot/decisions/_decide.py",
                    "bot/decisions/_requests.py", "bot/store/_store.py"]),
        ("approve", ["bot/router.py", "bot/decisions/_service.py", "bot/decisions/_approvals.py",
                     "bot/decisions/_lifecycle.py", "bot/decisions/_execution.py", "bot/controlhost/_client.py",
                     "bot/decisions/_outcomes.py", "bot/decisions/_verify.py"]),
    ],
)
def test_the_rooms_come_in_the_order_the_code_runs(walk: str, order: list[str]) -> None:
    paths = [path for path, _ in _sections()[walk]]
    assert all(p in paths for p in order), [p for p in order if p not in paths]
    assert [paths.index(p) for p in order] == sorted(paths.index(p) for p in order), paths
