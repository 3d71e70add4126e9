"""Worker-log coverage for diagnose: answer with what was read in time, read the rest, follow up.

Why: a worker log of a million lines takes longer to read than the diagnose budget, and the evidence
that decides the interrupt branch (R3.2–R3.5: the stage timeline) may sit anywhere in it. So one
:class:`LogReadJob` per diagnose reads the log on its own thread, the part nearest the turn first
(the source decides how: Docker reads newest first), and

- the first answer takes a snapshot of what was read by the deadline (or once ``log_byte_budget``
  bytes were read: that limit bounds the first answer's time, never what is covered) and says what
  it covered;
- the job reads on to the end of the log; the front end runs :func:`bot.diagnosis.followup.follow_up` after it
  delivered the first answer, which waits for the end and, if the whole log shows evidence the first
  answer lacked (an interrupt stage, a restore or start-up failure line…), posts ONE follow-up through
  the command's reporter and records it as a ``diagnose_followup`` step.

Memory stays bounded as in a single scan: each segment keeps only what :class:`LogScanResult` keeps.
At most :data:`MAX_BACKGROUND_SCANS` jobs read past their first answer at once; the others wait.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from bot.controlhost import Event, Turn
from bot.diagnosis import facts as F
from bot.logs import Coverage, LogSegment, LogSource, LogSourceError

#: Full scans reading past their first answer at the same time (two cores: more would only compete).
MAX_BACKGROUND_SCANS = 2
#: A full scan is given up after this long (it then posts nothing).
FULL_SCAN_TIMEOUT_SECONDS = 15 * 60.0
#: Margin around the turn's started_at / ended_at (clocks of the control host and Docker host differ).
FOCUS_MARGIN = timedelta(seconds=60)
SNAPSHOT_MARGIN_SECONDS = 0.25
_background = threading.BoundedSemaphore(MAX_BACKGROUND_SCANS)


# -- what the turn tells about where to look -----------------------------------------------------------


class WorkerLogSource(LogSource, Protocol):
    """A log source diagnose can read in stretches, nearest the turn first (files and Docker both can)."""

    def segments_for_session(
        self,
        session_id: str,
        *,
        since: datetime,
        until: datetime | None = None,
        focus: tuple[datetime, datetime] | None = None,
        on_bytes: Callable[[int], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LogSegment]: ...


class Focus:
    """The window around the turn (``started_at``/``ended_at``), else around the last events' times.

    Filled by the turns and events reads running beside the log read; the log read waits for it a
    short while only (it starts reading newest first either way).
    """

    def __init__(self) -> None:
        self._turn: tuple[datetime | None, datetime | None] | None = None
        self._events: list[datetime] = []
        self._turns_done = threading.Event()
        self._events_done = threading.Event()

    def set_turn(self, head: Turn | None, detail: Turn | None) -> None:
        turn = detail if detail is not None else head
        if turn is not None:
            self._turn = (turn.started_at, turn.ended_at)
        self._turns_done.set()

    def set_events(self, events: list[Event]) -> None:
        self._events = [e.at for e in events[-5:] if e.at is not None]
        self._events_done.set()

    def give_up(self) -> None:
        self._turns_done.set()
        self._events_done.set()

    def window(self, timeout: float) -> tuple[datetime, datetime] | None:
        end = time.monotonic() + timeout
        self._turns_done.wait(max(0.0, end - time.monotonic()))
        if self._turn is not None and self._turn[0] is not None:
            started, ended = self._turn[0], self._turn[1] or self._turn[0]
            return started - FOCUS_MARGIN, ended + FOCUS_MARGIN
        self._events_done.wait(max(0.0, end - time.monotonic()))
        if self._events:
            return min(self._events) - FOCUS_MARGIN, max(self._events) + FOCUS_MARGIN
        return None


# -- a snapshot of what was read -----------------------------------------------------------------------


def merge_results(parts: list[F.LogScanResult]) -> F.LogScanResult:
    """Fold per-segment scans, oldest segment first, into one (as if the log had been read in order).

    Field by field so a field added to :class:`LogScanResult` folds too: numbers add, flags or,
    counters add per key, lists concatenate (``notable`` keeps its cap), text keeps the latest value.
    """
    out = F.LogScanResult()
    for part in parts:
        for f in dataclasses.fields(out):
            mine, theirs = getattr(out, f.name), getattr(part, f.name)
            if isinstance(mine, bool) or isinstance(theirs, bool):
                setattr(out, f.name, bool(mine) or bool(theirs))
            elif isinstance(mine, int) and isinstance(theirs, int):
                setattr(out, f.name, mine + theirs)
            elif isinstance(mine, dict) and isinstance(theirs, dict):
                for key, value in theirs.items():
                    mine[key] = mine.get(key, 0) + value
            elif isinstance(mine, list) and isinstance(theirs, list):
                mine.extend(theirs)
            elif theirs is not None:
                setattr(out, f.name, theirs)
    del out.notable[F.MAX_NOTABLE :]
    return out


@dataclass
class LogSnapshot:
    """What the log read had found at one moment, and how much of the log that was."""

    result: F.LogScanResult
    coverage: list[tuple[str, Coverage]]
    complete: bool
    bytes_read: int
    elapsed: float
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for people: what of the worker log this answer is based on."""
        if not self.coverage:
            return "Worker log: no worker log found for this session."
        per_source: dict[str, list[Coverage]] = {}
        for _, cov in self.coverage:
            per_source.setdefault(cov.source, []).append(cov)
        parts = []
        for source, covs in per_source.items():
            lines = sum(c.lines for c in covs)
            size = sum(c.bytes_read for c in covs)
            times = sorted(t for c in covs for t in (c.first_ts, c.last_ts) if t)
            span = f", {times[0]} to {times[-1]}" if times else ""
            parts.append(f"{source} ({_mb(size)}, {lines:,} lines{span})")
        what = "; ".join(parts)
        if self.complete:
            return f"Worker log read in full ({_mb(self.bytes_read)} in {self.elapsed:.1f} s): {what}."
        return (
            f"Worker log: this answer covers only what was read in {self.elapsed:.1f} s "
            f"({_mb(self.bytes_read)}, the part nearest the turn first): {what}. The rest is being read; "
            "a follow-up is posted here if it adds evidence."
        )


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB" if size >= 1e6 else f"{size / 1e3:,.1f} kB"


# -- the job -------------------------------------------------------------------------------------------


class LogReadJob:
    """One session's worker log, read on its own thread (see the module docstring)."""

    def __init__(
        self,
        source: WorkerLogSource,
        session_id: str,
        *,
        since: datetime,
        focus: Focus,
        byte_budget: int | None = None,
        focus_wait: float = 1.0,
        background: threading.BoundedSemaphore | None = None,
    ) -> None:
        self.source = source
        # Its diagnoser's own slots (one per installation: another's slow engine never holds them).
        self._background = background if background is not None else _background
        self.session_id = session_id
        self.since = since
        self.focus = focus
        self.byte_budget = byte_budget
        self.focus_wait = focus_wait
        self._lock = threading.Lock()
        self._parts: list[tuple[tuple[int, ...], F.LogScanResult, Coverage]] = []
        self._bytes = 0
        self._first_ready = threading.Event()  # byte budget reached, or done
        self._done = threading.Event()
        self._stop = threading.Event()
        self._complete = False
        self._error: BaseException | None = None
        self._problems: list[str] = []
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"log-read-{session_id}"[:40], daemon=True)

    # -- life cycle ---------------------------------------------------------------------------------

    def start(self) -> LogReadJob:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading (closes the stream); used when nobody will wait for a follow-up."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    # -- reading (job thread) -----------------------------------------------------------------------

    def _segments(self, focus: tuple[datetime, datetime] | None) -> Iterator[LogSegment]:
        yield from self.source.segments_for_session(
            self.session_id, since=self.since, focus=focus, on_bytes=self._count, stop=self._stop
        )

    def _count(self, n: int) -> None:
        with self._lock:
            self._bytes += n
            if self.byte_budget is not None and self._bytes >= self.byte_budget:
                self._first_ready.set()

    def _run(self) -> None:
        holding = False
        try:
            focus = self.focus.window(self.focus_wait)
            deadline = self._started + FULL_SCAN_TIMEOUT_SECONDS
            for segment in self._segments(focus):
                result = F.LogScanResult()
                with self._lock:
                    self._parts.append((segment.rank, result, segment.coverage))
                for n, line in enumerate(segment.scan):
                    with self._lock:
                        result.add(line)
                    if n % 256 == 255 and time.monotonic() > deadline:
                        self._stop.set()
                stats = segment.scan.stats
                with self._lock:
                    self._problems.extend(stats.problems)
                    if not segment.coverage.bytes_read:
                        segment.coverage.bytes_read = stats.bytes_read
                        segment.coverage.complete = not stats.truncated
                if self._stop.is_set():
                    break
                if self._first_ready.is_set() and not holding:
                    holding = self._acquire_background()
                    if not holding:
                        break
            with self._lock:
                self._complete = not self._stop.is_set() and all(c.complete for _, _, c in self._parts)
        except BaseException as exc:  # noqa: BLE001 - reported by first_answer / follow_up
            with self._lock:
                self._error = exc
        finally:
            if holding:
                self._background.release()
            self._first_ready.set()
            self._done.set()

    def _acquire_background(self) -> bool:
        """Past the first answer: wait for a background slot (bounded concurrency), unless stopped."""
        while not self._stop.is_set():
            if self._background.acquire(timeout=0.2):
                return True
        return False

    # -- snapshots ----------------------------------------------------------------------------------

    def snapshot(self) -> LogSnapshot:
        with self._lock:
            parts = sorted(self._parts, key=lambda p: p[0])
            result = merge_results([r for _, r, _ in parts])  # builds new lists; the parts stay as they are
            coverage = [(str(rank), dataclasses.replace(c)) for rank, _, c in parts]
            complete = self._done.is_set() and self._complete
            result.truncated = not complete
            return LogSnapshot(
                result=result,
                coverage=coverage,
                complete=complete,
                bytes_read=self._bytes or sum(c.bytes_read for _, c in coverage),
                elapsed=time.monotonic() - self._started,
                problems=list(self._problems),
            )

    def first_answer(self, deadline: float) -> LogSnapshot:
        """What was read by ``deadline`` (monotonic), or by the byte budget, or all of it if sooner.

        Raises the source's error when nothing could be read, and :class:`TimeoutError` when not even
        one segment had started by the deadline (the source is then reported slow).
        """
        # Snapshot a little before the deadline, so the gathering (which waits until the deadline
        # itself) sees this answer instead of calling the log source slow.
        self._first_ready.wait(max(0.0, deadline - SNAPSHOT_MARGIN_SECONDS - time.monotonic()))
        with self._lock:
            error, started = self._error, bool(self._parts) or self._done.is_set()
        if error is not None and not self._parts:
            raise error
        if not started:
            raise TimeoutError("no log segment started before the deadline")
        return self.snapshot()

    def final(self, timeout: float | None = None) -> LogSnapshot | None:
        """The snapshot once the whole log was read; None when it could not be (error, stop, time)."""
        if not self._done.wait(timeout):
            return None
        with self._lock:
            if self._error is not None and not isinstance(self._error, LogSourceError | OSError):
                return None
        snap = self.snapshot()
        return snap if snap.complete else None


# Facts the timeline and control.result lines above already say (or that are mere totals).
_SAID_BY_THE_TIMELINE = frozenset(
    {
        "logs.lines",
        "logs.missing_stages",
        "logs.late_sdk_interrupt_answered",
        "logs.engine_terminal_timeout",
        "logs.capture_timeout",
        "logs.capture_failed",
        "logs.finalize_checkpoint_unavailable",
        "logs.control_result_outcome",
        "logs.control_result_reason_code",
    }
)


def new_evidence(
    first: F.Facts, final: F.Facts, first_snap: LogSnapshot, final_snap: LogSnapshot, turn_id: str | None
) -> list[str]:
    """What the whole log shows that the first answer's part did not, one line each (none: nothing)."""
    out: list[str] = []
    _, ev_first = F.log_facts_from(first_snap.result, turn_id=turn_id)
    _, ev_final = F.log_facts_from(final_snap.result, turn_id=turn_id)
    had = {s.stage for s in ev_first.timeline.stages} if ev_first.timeline is not None else set()
    if ev_final.timeline is not None:
        new_stages = [s.stage for s in ev_final.timeline.stages if s.stage not in had]
        if new_stages:
            out.append(
                f"interrupt stage{'s' if len(new_stages) > 1 else ''} {', '.join(dict.fromkeys(new_stages))} "
                f"of turn {ev_final.timeline.turn_id or '?'} (R3.2)"
            )
        late_before = bool(ev_first.timeline.late) if ev_first.timeline is not None else False
        if ev_final.timeline.late and not late_before:
            out.append("late_sdk_interrupt_answered (R3.4)")
    if ev_first.control_result is None and ev_final.control_result is not None:
        out.append("the control.result line (R3.3)")
    for name in F.LOG_FACTS:
        before, after = first.get(name), final.get(name)
        if name in _SAID_BY_THE_TIMELINE or before == after:
            continue
        if isinstance(after, bool) and after and not before:
            out.append(f"{name} = true")
        elif isinstance(after, int) and not isinstance(after, bool):
            # A kind of line the first answer had not seen at all (more of a seen kind adds nothing).
            if after > 0 and not before:
                out.append(f"{name}: {after} line{'s' if after > 1 else ''}")
        elif isinstance(after, str) and before is None:
            out.append(f"{name} = {after}")
    return out
