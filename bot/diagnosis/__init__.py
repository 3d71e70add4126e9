"""Diagnosis: facts about a stuck session, gathered concurrently, judged by the runbook YAML."""

from __future__ import annotations

from bot.diagnosis.facts import ALL_FACTS, SOURCES, FactValue, empty_facts
from bot.diagnosis.logcoverage import WorkerLogSource
from bot.diagnosis.model import Diagnosis, Evidence, ReconcilerStatus, ReconcilerStatusSource, SourceStatus
from bot.diagnosis.service import DEFAULT_BUDGET_SECONDS, Diagnoser
from bot.diagnosis.timeline import ControlResult, InterruptTimeline, StageEntry, build_timelines

__all__ = [
    "ALL_FACTS",
    "DEFAULT_BUDGET_SECONDS",
    "SOURCES",
    "ControlResult",
    "Diagnoser",
    "Diagnosis",
    "Evidence",
    "FactValue",
    "InterruptTimeline",
    "ReconcilerStatus",
    "ReconcilerStatusSource",
    "SourceStatus",
    "StageEntry",
    "WorkerLogSource",
    "build_timelines",
    "empty_facts",
]
