"""``diagnose``: gather the facts about one session concurrently within the runbook's budget, let the
runbook pick the branch, record the step, and say it to a person.

Why concurrent with a deadline: diagnose is what an on-call engineer types first, and a control host in
trouble is often slow in one place only. Every source gets the same deadline; one that has not answered
is reported *slow* (its facts stay unknown) instead of holding the whole answer hostage, and the runbook
decides with the facts that did arrive (its conditions treat unknown explicitly).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bot.clock import Clock, SystemClock, isoformat
from bot.controlhost import ControlHostClient, Event, Session, Turn, deadline_at
from bot.diagnosis import facts as F
from bot.diagnosis import logcoverage, wording
from bot.diagnosis.followup import follow_up
from bot.diagnosis.model import (
    Diagnosis,
    Evaluate,
    Evidence,
    ReconcilerStatus,
    ReconcilerStatusSource,
    SourceStatus,
)
from bot.diagnosis.nearby import near_session_ids
from bot.errors import CommandError, ControlHostAuthError, ControlHostError, RecoverError
from bot.ids import HOST_ID
from bot.messages import Reply, Reporter
from bot.runbook.evaluate import evaluate as runbook_evaluate
from bot.runbook.model import RunbookSet
from bot.store import Step, Store
from bot.vocab import Step as StepName
from bot.workpool import PoolBusy, WorkPool

DEFAULT_BUDGET_SECONDS = 10.0
DEFAULT_LOG_WINDOW_SECONDS = 24 * 3600.0
_EVENT_PAGES = 50  # bound on event pages read per diagnose (each page is one GET)
# Sources read at once across every diagnose in the process, and how many may wait for a worker.
POOL_WORKERS = 16
POOL_QUEUE = 64


class _DeadlinePassed(Exception):
    """A source noticed the deadline itself (a long log scan): it is slow, not broken."""


@dataclass
class _SessionResult:
    session: Session | None = None
    found: bool = True


@dataclass
class _TurnsResult:
    head: Turn | None = None
    detail: Turn | None = None
    session_missing: bool = False


@dataclass
class _EventsResult:
    events: list[Event] = field(default_factory=list)


def _budget_seconds(runbooks: RunbookSet, name: str, default: float) -> float:
    """A duration limit from the runbook; its absence means the documented default, never a crash."""
    try:
        value = float(runbooks.limit(name))
    except (KeyError, ValueError, TypeError, RecoverError):
        return default
    return value if value > 0 else default


class Diagnoser:
    """Gathers facts about a session and evaluates the runbook on them."""

    def __init__(
        self,
        *,
        client: ControlHostClient,
        runbooks: RunbookSet,
        store: Store,
        log_source: logcoverage.WorkerLogSource | None,
        reconciler_status: ReconcilerStatusSource | None,
        clock: Clock | None = None,
        evaluate: Evaluate | None = None,
        pool: WorkPool | None = None,
    ) -> None:
        self.client = client
        # One bounded pool for every diagnose: a slow control host cannot make threads pile up.
        self.pool = pool or WorkPool("diagnose", workers=POOL_WORKERS, queue=POOL_QUEUE)
        self.background_scans = threading.BoundedSemaphore(logcoverage.MAX_BACKGROUND_SCANS)
        self.runbooks = runbooks
        self.store = store
        self.log_source = log_source
        self.reconciler_status = reconciler_status
        self.clock: Clock = clock or SystemClock()
        self._evaluate: Evaluate = evaluate or runbook_evaluate

    # -- limits (YAML) -------------------------------------------------------------------------------

    @property
    def budget_seconds(self) -> float:
        return _budget_seconds(self.runbooks, "diagnose_budget", DEFAULT_BUDGET_SECONDS)

    @property
    def deadline_seconds(self) -> float:
        """Each source's deadline: the whole budget, or the per-source timeout when the runbook sets a
        shorter one (the answer must still come within the budget)."""
        per_source = _budget_seconds(self.runbooks, "diagnose_source_timeout", self.budget_seconds)
        return min(self.budget_seconds, per_source)

    @property
    def log_window_seconds(self) -> float:
        return _budget_seconds(self.runbooks, "log_window", DEFAULT_LOG_WINDOW_SECONDS)

    def _log_byte_budget(self) -> int | None:
        value = _budget_seconds(self.runbooks, "log_byte_budget", 0.0)
        return int(value) if value > 0 else None

    # -- gathering -----------------------------------------------------------------------------------

    def near_sessions(self, session_id: str) -> list[str]:
        """The known session ids ``session_id`` was probably meant to be (for a 404's did-you-mean)."""
        return near_session_ids(session_id, self.client, self.store)

    def _check_id(self, session_id: str) -> None:
        regex = self.runbooks.id_pattern or HOST_ID
        if not isinstance(session_id, str) or not regex.match(session_id):
            raise CommandError(wording.bad_session_id(session_id), usage="/recover diagnose <session_id>")

    def _read_session(self, session_id: str) -> _SessionResult:
        try:
            return _SessionResult(session=self.client.get_session(session_id))
        except ControlHostError as exc:
            if exc.code == "NOT_FOUND":
                return _SessionResult(found=False)
            raise

    def _read_turns(self, session_id: str) -> _TurnsResult:
        # Classification uses the turns endpoint (R3.1), not the attention code alone.
        try:
            listed = self.client.list_turns(session_id, status="outcome_unknown")
        except ControlHostError as exc:
            if exc.code == "NOT_FOUND":
                return _TurnsResult(session_missing=True)
            raise
        head = F.pick_unknown_turn(listed)
        if head is None:
            return _TurnsResult()
        detail = self.client.get_turn(session_id, head.id) if head.id else None
        return _TurnsResult(head=head, detail=detail)

    def _read_events(self, session_id: str, deadline: float) -> _EventsResult:
        events: list[Event] = []
        after: int | None = None
        for _ in range(_EVENT_PAGES):
            page = self.client.list_events(session_id, after=after)
            items, nxt = page.events, page.next
            events.extend(items)
            if not items or nxt is None or nxt == after:
                break
            after = nxt
            if time.monotonic() > deadline:
                raise _DeadlinePassed()
        return _EventsResult(events)

    def _log_job(self, session_id: str, now: datetime, focus: logcoverage.Focus) -> logcoverage.LogReadJob:
        """The worker-log read: window around the turn first, the budget bounds only the first answer."""
        assert self.log_source is not None
        return logcoverage.LogReadJob(
            self.log_source,
            session_id,
            since=now - timedelta(seconds=self.log_window_seconds),
            focus=focus,
            byte_budget=self._log_byte_budget(),
            focus_wait=min(1.0, self.deadline_seconds / 5),
            background=self.background_scans,
        ).start()

    def _read_reconciler(self) -> ReconcilerStatus:
        assert self.reconciler_status is not None
        return self.reconciler_status.read_status()

    def gather(self, session_id: str, *, keep_reading_logs: bool = False) -> Diagnosis:
        """Read every source concurrently within the budget, flatten to facts, evaluate the runbook.

        ``keep_reading_logs``: the worker-log read goes on after the answer (``Diagnosis.log_job``) so
        a follow-up can report what the rest of the log shows; otherwise it stops with the answer.
        """
        self._check_id(session_id)
        now = self.clock.now()
        budget = self.deadline_seconds
        started = time.monotonic()
        deadline = started + budget
        focus = logcoverage.Focus()

        def turns() -> _TurnsResult:
            try:
                result = self._read_turns(session_id)
                focus.set_turn(result.head, result.detail)
                return result
            finally:
                focus.give_up()

        def events() -> _EventsResult:
            try:
                found = self._read_events(session_id, deadline)
                focus.set_events(found.events)
                return found
            finally:
                focus.give_up()

        tasks: dict[str, Callable[[], object]] = {
            "session": lambda: self._read_session(session_id),
            "turns": turns,
            "events": events,
        }
        job: logcoverage.LogReadJob | None = None
        if self.log_source is not None:
            job = self._log_job(session_id, now, focus)
            log_job = job
            tasks["logs"] = lambda: log_job.first_answer(deadline)
        if self.reconciler_status is not None:
            tasks["reconciler"] = self._read_reconciler

        results: dict[str, object] = {}
        states: dict[str, SourceStatus] = {}
        finished_at: dict[str, float] = {}
        lock = threading.Lock()

        def run(name: str, fn: Callable[[], object]) -> object:
            try:
                if time.monotonic() >= deadline:
                    raise _DeadlinePassed()  # waited in the queue past the budget: do not start
                # Every control-host request inside ends by the deadline, so the worker is free by then.
                with deadline_at(deadline):
                    return fn()
            finally:
                with lock:
                    finished_at[name] = time.monotonic()

        futures: dict[cf.Future[object], str] = {}
        for name, fn in tasks.items():
            try:
                futures[self.pool.submit(functools.partial(run, name, fn))] = name
            except PoolBusy as busy:
                states[name] = SourceStatus(name, F.SOURCE_SLOW, str(busy), 0)
        # A slow source must not delay the answer: whatever has not finished by the deadline is slow.
        done, not_done = cf.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        for future, name in futures.items():
            with lock:
                end = finished_at.get(name)
            elapsed = int(((end if end is not None else time.monotonic()) - started) * 1000)
            if future in not_done:
                states[name] = SourceStatus(name, F.SOURCE_SLOW, wording.source_slow(budget), elapsed)
                continue
            exc = future.exception()
            if isinstance(exc, _DeadlinePassed | TimeoutError) or (
                isinstance(exc, ControlHostError) and exc.code == "TIMEOUT"
            ):
                # A request that ran out of the budget (e.g. a host that dribbles its answer) is slow.
                states[name] = SourceStatus(name, F.SOURCE_SLOW, wording.source_slow(budget), elapsed)
            elif isinstance(exc, ControlHostAuthError):
                # R0.1: a refused key is a setting to fix (401 wrong or expired, 403 no scope), not a
                # source to diagnose around: one line, instead of a diagnosis of unknowns.
                raise exc
            elif exc is not None:
                states[name] = SourceStatus(name, F.SOURCE_UNREACHABLE, wording.source_error(exc), elapsed)
            else:
                results[name] = future.result()
                states[name] = SourceStatus(name, F.SOURCE_OK, None, elapsed)
        for name in F.SOURCES:
            if name not in states:
                detail = wording.source_not_configured(name)
                states[name] = SourceStatus(name, F.SOURCE_NOT_CONFIGURED, detail)
        diagnosis = self._assemble(session_id, now, results, states)
        if job is not None:
            snapshot = results.get("logs")
            diagnosis.log_snapshot = snapshot if isinstance(snapshot, logcoverage.LogSnapshot) else None
            if keep_reading_logs and diagnosis.log_snapshot is not None and not diagnosis.log_snapshot.complete:
                diagnosis.log_job = job
            else:
                job.stop()
        return diagnosis

    def _assemble(
        self, session_id: str, now: datetime, results: dict[str, object], states: dict[str, SourceStatus]
    ) -> Diagnosis:
        facts = F.empty_facts(session_id, now)
        evidence = Evidence()
        session_result = results.get("session")
        if isinstance(session_result, _SessionResult):
            if session_result.found and session_result.session is not None:
                facts.update(F.session_facts(session_result.session))
            else:
                facts.update(F.session_missing_facts())
        turns_result = results.get("turns")
        if isinstance(turns_result, _TurnsResult) and not turns_result.session_missing:
            facts.update(F.turn_facts(turns_result.head, turns_result.detail))
        events_result = results.get("events")
        if isinstance(events_result, _EventsResult):
            facts.update(F.event_facts(events_result.events))
            evidence.events = events_result.events
        snapshot = results.get("logs")
        if isinstance(snapshot, logcoverage.LogSnapshot):
            scan = snapshot.result
            evidence.log_coverage = snapshot.describe()
            turn = facts.get("unknown_turn.id")
            control = facts.get("unknown_turn.control_id")
            log_facts, log_evidence = F.log_facts_from(
                scan,
                turn_id=turn if isinstance(turn, str) else None,
                control_id=control if isinstance(control, str) else None,
            )
            facts.update(log_facts)
            evidence.timeline = log_evidence.timeline
            evidence.control_result = log_evidence.control_result
            evidence.log_lines = log_evidence.notable
            evidence.logs_truncated = log_evidence.truncated
        status = results.get("reconciler")
        if isinstance(status, ReconcilerStatus):
            facts.update(F.reconciler_facts(status.last_pass, status.last_pass_at))
        F.link_facts(facts)
        ordered = [states[name] for name in F.SOURCES] + [s for n, s in states.items() if n not in F.SOURCES]
        for source in ordered:
            facts[f"source.{source.name}"] = source.state
        evaluation = self._evaluate(self.runbooks, facts)
        return Diagnosis(session_id, facts, evaluation, ordered, evidence, now)

    # -- the command ---------------------------------------------------------------------------------

    def diagnose(self, session_id: str, actor: str, reporter: Reporter | None = None) -> Reply:
        """The ``/recover diagnose`` command: gather, record the step, render.

        With a ``reporter``, a worker log not read in full by the answer is read on, and the reply
        carries the follow-up as deferred work: the front end runs it after delivering the answer,
        and it posts through the same reporter only if the whole log adds evidence.
        """
        return self.diagnose_and_record(session_id, actor, reporter)[1]

    def diagnose_and_record(
        self, session_id: str, actor: str, reporter: Reporter | None = None
    ) -> tuple[Diagnosis, Reply]:
        """:meth:`diagnose`, and the diagnosis itself (the router closes a case its facts show settled)."""
        diagnosis = self.gather(session_id, keep_reading_logs=reporter is not None)
        self.record(diagnosis, actor)
        unknown = diagnosis.facts.get("session.found") is False
        near = self.near_sessions(session_id) if unknown else []
        reply = Reply.of(*wording.render(diagnosis, self.runbooks, near=near))
        job = diagnosis.log_job
        if job is not None and reporter is not None:
            reply.deferred.append(
                lambda: follow_up(
                    diagnosis,
                    job,
                    runbooks=self.runbooks,
                    evaluate=self._evaluate,
                    store=self.store,
                    actor=actor,
                    reporter=reporter,
                )
            )
        return diagnosis, reply

    def record(self, diagnosis: Diagnosis, actor: str) -> Step:
        """Record a ``diagnose`` step: the branch as its outcome, the facts as its detail.

        An unknown session (404) is recorded outside any case, so a typo does not open a case that
        then sits in everyone's ``/recover cases`` list.
        """
        branch = diagnosis.evaluation.branch_id or "unknown"
        known = diagnosis.facts.get("session.found") is not False
        return self.store.record_step(
            diagnosis.session_id if known else None,
            actor,
            StepName.DIAGNOSE,
            {"session_id": diagnosis.session_id, "gathered_at": isoformat(diagnosis.gathered_at)},
            branch,
            detail=dict(diagnosis.facts),
        )
