"""What diagnose returns and reads: the diagnosis, its sources and evidence, the reconciler's status.

Plain data, apart from the service that gathers it and the wording that renders it, so both import
this module and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from bot.controlhost import Event
from bot.diagnosis import facts as F
from bot.diagnosis import logcoverage
from bot.diagnosis.timeline import ControlResult, InterruptTimeline
from bot.logs import LogLine
from bot.runbook.evaluate import Evaluation
from bot.runbook.model import RunbookSet

#: How facts become an evaluation (``bot.runbook.evaluate.evaluate``; the same for diagnose and follow-ups).
Evaluate = Callable[[RunbookSet, Mapping[str, object]], Evaluation]


@dataclass(frozen=True)
class ReconcilerStatus:
    """The reconciler's last pass as read from its status file and log lines (R1.4)."""

    last_pass: str | None  # "completed" | "failed" | None
    last_pass_at: str | None
    raw: object = None


class ReconcilerStatusSource(Protocol):
    """Where diagnose reads the reconciler's status (the Docker implementation lives in dockerops)."""

    def read_status(self) -> ReconcilerStatus: ...


@dataclass(frozen=True)
class SourceStatus:
    """How one source answered: ok, slow (no answer by the deadline), unreachable, not_configured."""

    name: str
    state: str
    detail: str | None = None
    elapsed_ms: int | None = None


@dataclass
class Evidence:
    """What people read beside the facts (not used by runbook conditions)."""

    timeline: InterruptTimeline | None = None
    control_result: ControlResult | None = None
    log_lines: list[LogLine] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    logs_truncated: bool = False
    #: What of the worker log the answer is based on (one line; see diagnosis.logcoverage).
    log_coverage: str | None = None


@dataclass
class Diagnosis:
    """The result of :meth:`Diagnoser.gather`: facts, the runbook's evaluation and where they came from."""

    session_id: str
    facts: dict[str, F.FactValue]
    evaluation: Evaluation
    sources: list[SourceStatus]
    evidence: Evidence
    gathered_at: datetime
    #: The worker-log read behind this answer, when it goes on in the background (follow-up).
    log_job: logcoverage.LogReadJob | None = None
    log_snapshot: logcoverage.LogSnapshot | None = None

    def source(self, name: str) -> SourceStatus | None:
        return next((s for s in self.sources if s.name == name), None)

    @property
    def degraded_sources(self) -> list[SourceStatus]:
        """Sources that were slow or unreachable (not_configured is a setup choice, not a fault)."""
        return [s for s in self.sources if s.state in (F.SOURCE_SLOW, F.SOURCE_UNREACHABLE)]
