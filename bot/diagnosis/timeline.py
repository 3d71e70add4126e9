"""The interrupt-stage timeline (R3.2–R3.5) and the ``control.result`` line (R3.3), from worker log lines.

Pure functions over parsed log lines: diagnosis shows people *where* an interrupt stalled, because the
terminal reason alone (R3.1) does not say whether the engine never answered, the capture budget ran out,
the capture failed, or the API refused the manifest — and each of those points to a different fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from bot.logs import LogLine

# R3.2: the normal order of the stages, each with elapsed_ms since the interrupt was received.
STAGES: tuple[str, ...] = (
    "control_received",
    "sdk_interrupt_called",
    "sdk_interrupt_answered",
    "engine_terminal",
    "capture_started",
    "capture_finished",
    "finalize_started",
    "finalize_finished",
)
STAGE_EVENT = "worker.turn.interrupt.stage"
# R3.4: an SDK answer after the engine terminal is logged apart, never put in the normal sequence.
LATE_ANSWER = "late_sdk_interrupt_answered"
CONTROL_RESULT_EVENT = "control.result"

# R3.5 readings, as stable codes; bot.diagnosis.wording turns them into sentences.
READ_ENGINE_TERMINAL_TIMEOUT = "engine_terminal_timeout"
READ_CAPTURE_TIMEOUT = "capture_timeout"
READ_CAPTURE_FAILED = "capture_failed"
READ_FINALIZE_CHECKPOINT_UNAVAILABLE = "finalize_checkpoint_unavailable"
READ_FINALIZE_FAILED = "finalize_failed"


@dataclass(frozen=True)
class StageEntry:
    """One ``worker.turn.interrupt.stage`` line, reduced to what people and rules read."""

    stage: str
    elapsed_ms: int | None
    outcome: str | None = None
    reason: str | None = None
    budget_ms: int | None = None
    error_code: str | None = None
    ts: datetime | None = None
    text: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    @property
    def timed_out(self) -> bool:
        return self.outcome == "timeout"


@dataclass
class InterruptTimeline:
    """The stages of one interrupt (grouped by session_id, turn_id, control_id: R3.2)."""

    session_id: str | None
    turn_id: str | None
    control_id: str | None
    stages: list[StageEntry] = field(default_factory=list)
    late: list[StageEntry] = field(default_factory=list)

    def stage(self, name: str) -> StageEntry | None:
        """The last entry logged for a stage (a retried stage's final word counts)."""
        found = [s for s in self.stages if s.stage == name]
        return found[-1] if found else None

    @property
    def missing(self) -> list[str]:
        present = {s.stage for s in self.stages}
        return [name for name in STAGES if name not in present]

    @property
    def last_at(self) -> datetime | None:
        times = [s.ts for s in (*self.stages, *self.late) if s.ts is not None]
        return max(times) if times else None

    # R3.5: what the stages mean.
    @property
    def engine_terminal_timeout(self) -> bool:
        entry = self.stage("engine_terminal")
        return entry is not None and entry.timed_out

    @property
    def capture_timeout(self) -> bool:
        entry = self.stage("capture_finished")
        return entry is not None and entry.timed_out

    @property
    def capture_failed(self) -> bool:
        entry = self.stage("capture_finished")
        return entry is not None and entry.failed

    @property
    def capture_completed(self) -> bool:
        entry = self.stage("capture_finished")
        return entry is not None and entry.outcome in (None, "ok", "completed", "succeeded", "success")

    @property
    def finalize_checkpoint_unavailable(self) -> bool:
        # R3.5: finalize failed with CHECKPOINT_UNAVAILABLE after a finished capture = the API refused
        # the manifest or its ref (not a capture timeout, not an S3 failure).
        entry = self.stage("finalize_finished")
        if entry is None or not entry.failed:
            return False
        if not self.capture_completed:
            return False
        blob = " ".join(filter(None, [entry.reason, entry.error_code, entry.text]))
        return "CHECKPOINT_UNAVAILABLE" in blob

    def readings(self) -> list[tuple[str, StageEntry]]:
        """R3.5 readings that apply, in stage order, each with the entry that shows it."""
        out: list[tuple[str, StageEntry]] = []
        engine = self.stage("engine_terminal")
        if engine is not None and engine.timed_out:
            out.append((READ_ENGINE_TERMINAL_TIMEOUT, engine))
        capture = self.stage("capture_finished")
        if capture is not None and capture.timed_out:
            out.append((READ_CAPTURE_TIMEOUT, capture))
        elif capture is not None and capture.failed:
            out.append((READ_CAPTURE_FAILED, capture))
        finalize = self.stage("finalize_finished")
        if finalize is not None and finalize.failed:
            if self.finalize_checkpoint_unavailable:
                out.append((READ_FINALIZE_CHECKPOINT_UNAVAILABLE, finalize))
            else:
                out.append((READ_FINALIZE_FAILED, finalize))
        return out


@dataclass(frozen=True)
class ControlResult:
    """The ``control.result`` line logged after the final finalize (R3.3)."""

    operation: str | None
    outcome: str | None
    reason_code: str | None
    effect_ms: int | None
    duration_ms: int | None
    turn_id: str | None = None
    control_id: str | None = None
    ts: datetime | None = None
    text: str = ""

    @property
    def no_op(self) -> bool:
        # R3.3: a no-op on an already-ended turn logs effect_ms=0.
        return self.effect_ms == 0

    @property
    def deadline_exceeded(self) -> bool:
        # R3.3: a receipt not finished by its deadline logs outcome=unknown, reason_code=deadline_exceeded.
        return self.outcome == "unknown" and self.reason_code == "deadline_exceeded"


def _entry(line: LogLine, stage: str) -> StageEntry:
    return StageEntry(
        stage=stage,
        elapsed_ms=line.int_of("elapsed_ms"),
        outcome=line.text_of("outcome"),
        reason=line.text_of("reason"),
        budget_ms=line.int_of("budget_ms"),
        error_code=line.text_of("code") or line.text_of("error_code"),
        ts=line.ts,
        text=line.text,
    )


def _key(line: LogLine) -> tuple[str | None, str | None, str | None]:
    return (
        (line.session_id or "").strip() or line.text_of("session_id"),
        line.text_of("turn_id"),
        line.text_of("control_id"),
    )


def build_timelines(lines: Iterable[LogLine]) -> list[InterruptTimeline]:
    """Group interrupt-stage lines by (session_id, turn_id, control_id) and order each group (R3.2).

    Stages sort by their place in the normal sequence (elapsed_ms breaks ties between repeats), so the
    order people read does not depend on the order log lines were interleaved by the collector.
    """
    groups: dict[tuple[str | None, str | None, str | None], InterruptTimeline] = {}
    for line in lines:
        event = line.event
        stage = line.text_of("stage")
        if event == STAGE_EVENT and stage is not None:
            pass
        elif event == LATE_ANSWER:
            stage = LATE_ANSWER
        else:
            continue
        key = _key(line)
        timeline = groups.get(key)
        if timeline is None:
            timeline = groups[key] = InterruptTimeline(*key)
        entry = _entry(line, stage)
        if stage == LATE_ANSWER:
            timeline.late.append(entry)  # R3.4: apart from the normal sequence
        elif stage in STAGES:
            timeline.stages.append(entry)
        # Unknown stage names are newer worker vocabulary: ignored rather than misplaced.
    order = {name: i for i, name in enumerate(STAGES)}
    for timeline in groups.values():
        timeline.stages.sort(key=lambda s: (order[s.stage], s.elapsed_ms if s.elapsed_ms is not None else -1))
    return list(groups.values())


def select_timeline(
    timelines: list[InterruptTimeline], turn_id: str | None = None, control_id: str | None = None
) -> InterruptTimeline | None:
    """The timeline of the outcome-unknown turn — and only that turn's (R3.2: session_id · turn_id ·
    control_id): with ``turn_id`` given and no stage line naming it, there is none. Without a turn to
    explain, the most recent one."""
    if not timelines:
        return None
    if turn_id is not None:
        matching = [
            t for t in timelines if t.turn_id == turn_id and (control_id is None or t.control_id in (None, control_id))
        ]
        return matching[-1] if matching else None
    dated = [t for t in timelines if t.last_at is not None]
    if dated:
        return max(dated, key=lambda t: t.last_at or datetime.min)
    return timelines[-1]


def control_results(lines: Iterable[LogLine]) -> list[ControlResult]:
    """Every ``control.result`` line, in log order."""
    out: list[ControlResult] = []
    for line in lines:
        if line.event != CONTROL_RESULT_EVENT:
            continue
        out.append(
            ControlResult(
                operation=line.text_of("operation"),
                outcome=line.text_of("outcome"),
                reason_code=line.text_of("reason_code"),
                effect_ms=line.int_of("effect_ms"),
                duration_ms=line.int_of("duration_ms"),
                turn_id=line.text_of("turn_id"),
                control_id=line.text_of("control_id"),
                ts=line.ts,
                text=line.text,
            )
        )
    return out


def select_control_result(
    results: list[ControlResult],
    timeline: InterruptTimeline | None = None,
    turn_id: str | None = None,
    control_id: str | None = None,
) -> ControlResult | None:
    """The ``control.result`` of the interrupt being explained (same control or turn). With a turn to
    explain, another turn's result is never taken for it (R3.3); without one, the last."""
    if not results:
        return None
    controls = {c for c in (control_id, timeline.control_id if timeline is not None else None) if c}
    same = [r for r in results if r.control_id is not None and r.control_id in controls]
    if same:
        return same[-1]
    wanted = turn_id or (timeline.turn_id if timeline is not None else None)
    if wanted is not None:
        same = [r for r in results if r.turn_id == wanted and (not controls or r.control_id in (None, *controls))]
        return same[-1] if same else None
    return results[-1]
