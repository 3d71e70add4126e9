"""The fact vocabulary in Python is exactly the one documented in docs/facts.md."""

from __future__ import annotations

import re
from pathlib import Path

from bot.runbook.vocabulary import FACT_NAMES, SOURCES

FACTS_MD = Path(__file__).resolve().parents[2] / "docs/facts.md"


def _documented() -> set[str]:
    names: set[str] = set()
    for line in FACTS_MD.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*`([^`]+)`\s*\|[^|]*\|([^|]*)\|", line)
        if not match:
            continue
        name, meaning = match.group(1), match.group(2)
        if name.endswith(".<name>"):
            # "`source.<name>` … — for session, turns, events, logs, reconciler"
            listed = meaning.split("for", 1)[1]
            names.update(f"{name[: -len('<name>')]}{s.strip()}" for s in listed.split(",") if s.strip())
        else:
            names.add(name)
    return names


def test_vocabulary_matches_docs_facts_md() -> None:
    documented = _documented()
    assert len(documented) > 40
    assert documented == set(FACT_NAMES), documented ^ set(FACT_NAMES)


def test_sources_are_the_documented_ones() -> None:
    assert {f"source.{s}" for s in SOURCES} <= _documented()
