"""``/recover triage``: every session needing an operator, diagnosed concurrently, grouped by cause.

The listing (the runbook's ``api.sessions`` path, every page) feeds a bounded pool of workers that
read each session's turns and events through the paced client (runbook limits ``bulk_concurrency``
and ``bulk_rate``); the runbook's own evaluation picks each session's branch and valid decisions.
A summary is shown at once and updated in place as sessions are read, at most once per
``progress_interval``; when every session is read, each group's few examples get their worker logs
read, which names the likely cause. The groups are stored, so ``batch decide t7.g1`` binds exactly
the members shown.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections import Counter
from typing import Any, Protocol

from bot.clock import Clock, isoformat
from bot.controlhost import ControlHostClient, Session
from bot.diagnosis.facts import Facts
from bot.diagnosis.model import Diagnosis
from bot.logs import LogSource
from bot.messages import Message, Reply, Reporter
from bot.runbook.evaluate import evaluate
from bot.runbook.model import RunbookSet
from bot.store import Store
from bot.triage import facts as TF
from bot.triage.groups import Group, Grouper, summary_message
from bot.triage.pace import Throttle
from bot.triage.store import Member, TriageStore
from bot.vocab import Step

log = logging.getLogger(__name__)

DEFAULTS = {
    "bulk_concurrency": 16,
    "bulk_rate": 90,
    "bulk_page_size": 500,
    "batch_approval_threshold": 50,
    "batch_recheck_age": 1.0,
    "approval_expiry": 1800.0,
    "triage_examples": 3,
    "progress_interval": 2.0,
    "diagnose_budget": 10.0,
    "log_window": 6 * 3600.0,
    "batch_lease": 30.0,
}


def runbook_limit(runbooks: RunbookSet, name: str) -> float:
    """A runbook limit, or its documented default when the runbook does not set it."""
    try:
        return float(runbooks.limit(name))
    except KeyError:
        return float(DEFAULTS[name])


class ExampleDiagnoser(Protocol):
    """``diagnose``'s own gathering (bot.diagnosis.service.Diagnoser): a group's examples are
    classified by the very function that answers ``/recover diagnose``, so the two never disagree."""

    def gather(self, session_id: str, *, keep_reading_logs: bool = False) -> Diagnosis: ...


class Triage:
    """Runs triages over one client (the paced bulk client) and stores their groups."""

    def __init__(
        self,
        *,
        client: ControlHostClient,
        runbooks: RunbookSet,
        store: Store,
        clock: Clock,
        log_source: LogSource | None = None,
        diagnoser: ExampleDiagnoser | None = None,
    ) -> None:
        self.diagnoser = diagnoser
        self.client = client
        self.runbooks = runbooks
        self.store = store
        self.clock = clock
        self.log_source = log_source
        self.saved = TriageStore(store)

    def run(self, actor: str, reporter: Reporter) -> Reply:
        triage_id = self.saved.new(actor)
        return _Run(self, triage_id, actor, reporter).run()


class _Run:
    def __init__(self, triage: Triage, triage_id: str, actor: str, reporter: Reporter) -> None:
        self.t = triage
        self.id = triage_id
        self.actor = actor
        self.grouper = Grouper(triage_id)
        self.lock = threading.Lock()
        self.listed = 0
        self.read = 0
        self.listing_done = False
        self.unreadable = 0
        self.started = time.monotonic()
        self.now = triage.clock.now()
        self.examples = int(runbook_limit(triage.runbooks, "triage_examples"))
        self.throttle = Throttle(reporter, runbook_limit(triage.runbooks, "progress_interval"))
        self.saved_at = 0.0
        self.full: dict[str, Facts] = {}

    # -- reading -------------------------------------------------------------------------------

    def _one(self, session: Session) -> None:
        facts, failed_at = TF.gather(self.t.client, session, self.now)
        evaluation = evaluate(self.t.runbooks, facts)
        member = Member(
            session_id=session.id,
            revision=session.revision,
            branch=evaluation.branch_id,
            facts=dict(facts),
            valid=list(evaluation.valid_decisions),
            verdicts={v.decision: v.text for v in evaluation.invalid_decisions},
            failed_at=failed_at,
        )
        with self.lock:
            self.full[member.session_id] = facts
            self.grouper.add(member, evaluation)
            self.read += 1
            if facts.get("source.turns") != "ok" or facts.get("source.events") != "ok":
                self.unreadable += 1
        self.throttle.update(self._progress)

    def run(self) -> Reply:
        concurrency = max(1, int(runbook_limit(self.t.runbooks, "bulk_concurrency")))
        pool = cf.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="triage")
        futures: list[cf.Future[None]] = []
        page_size = int(runbook_limit(self.t.runbooks, "bulk_page_size"))
        try:
            # Each session once, however often the host lists it: counted once, grouped once (so a batch
            # over a group has one member per session).
            for sessions in self.t.client.listing(limit=page_size):
                with self.lock:
                    self.listed += len(sessions)
                futures.extend(pool.submit(self._one, s) for s in sessions)
                self.throttle.update(self._progress)
            with self.lock:
                self.listing_done = True
            for future in cf.as_completed(futures):
                future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        self._read_examples()
        self.throttle.close()
        groups = self.grouper.ordered()
        self._save(groups, final=True)
        self.t.store.record_step(
            None,
            self.actor,
            Step.TRIAGE,
            {"triage_id": self.id},
            "done",
            detail={
                "sessions": self.listed,
                "groups": {g.id: {"branch": g.branch, "cause": g.cause, "count": len(g.members)} for g in groups},
            },
        )
        return Reply.of(self._message(final=True))

    # -- examples: worker logs for a few sessions per group -------------------------------------

    def _read_examples(self) -> None:
        if self.t.diagnoser is not None:
            self._diagnose_examples(self.t.diagnoser)
            return
        budget = runbook_limit(self.t.runbooks, "diagnose_budget")
        window = runbook_limit(self.t.runbooks, "log_window")
        deadline = time.monotonic() + budget
        for group in self.grouper.ordered():
            picked = sorted(group.members, key=lambda m: m.failed_at or "", reverse=True)[: self.examples]
            examples: list[dict[str, Any]] = []
            causes: Counter[str] = Counter()
            for member in picked:
                entry: dict[str, Any] = {"session_id": member.session_id}
                if self.t.log_source is not None and time.monotonic() < deadline:
                    base = dict(self.full.get(member.session_id) or member.facts)
                    try:
                        facts, evaluation = TF.with_logs(
                            self.t.runbooks, self.t.log_source, base, self.now, window=window, deadline=deadline
                        )
                    except Exception:  # noqa: BLE001 - an unreadable log leaves the example as read
                        entry["logs"] = "unreadable"
                    else:
                        entry["branch"] = evaluation.branch_id
                        entry["logs"] = facts.get("source.logs")
                        cause = facts.get("logs.likely_cause")
                        if isinstance(cause, str):
                            causes[cause] += 1
                        if facts.get("logs.permanent_damage") is True or evaluation.branch_id == "restore_permanent":
                            group.damage = True
                examples.append(entry)
            group.examples = examples
            if causes:
                group.likely_cause = causes.most_common(1)[0][0]

    def _diagnose_examples(self, diagnoser: ExampleDiagnoser) -> None:
        """Each group's examples diagnosed as ``/recover diagnose`` does (concurrently, within the
        diagnose budget); a group whose examples all land on another branch than the API's facts alone
        gave (their worker logs decided it) takes that branch, title and rules: one classification."""
        budget = runbook_limit(self.t.runbooks, "diagnose_budget")
        concurrency = max(1, int(runbook_limit(self.t.runbooks, "bulk_concurrency")))
        picked = {
            group.id: sorted(group.members, key=lambda m: m.failed_at or "", reverse=True)[: self.examples]
            for group in self.grouper.ordered()
        }
        wanted = [m.session_id for members in picked.values() for m in members]
        done: dict[str, Diagnosis] = {}
        pool = cf.ThreadPoolExecutor(
            max_workers=min(concurrency, max(1, len(wanted))), thread_name_prefix="triage-example"
        )
        futures = {pool.submit(diagnoser.gather, sid): sid for sid in wanted}
        try:
            for future in cf.as_completed(futures, timeout=budget * 2):
                try:
                    done[futures[future]] = future.result()
                except Exception:  # noqa: BLE001 - an example that could not be diagnosed stays as read
                    log.warning("triage: example %s could not be diagnosed", futures[future], exc_info=True)
        except TimeoutError:
            pass  # the examples not diagnosed in time keep the API facts' classification
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        for group in self.grouper.ordered():
            examples: list[dict[str, Any]] = []
            causes: Counter[str] = Counter()
            branches: list[tuple[str, str, list[str]]] = []
            for member in picked[group.id]:
                entry: dict[str, Any] = {"session_id": member.session_id}
                diagnosis = done.get(member.session_id)
                if diagnosis is None:
                    entry["logs"] = "unreadable"
                    examples.append(entry)
                    continue
                evaluation = diagnosis.evaluation
                entry["branch"] = evaluation.branch_id
                entry["logs"] = diagnosis.facts.get("source.logs")
                branches.append((evaluation.branch_id, evaluation.title, list(evaluation.rules)))
                member.branch = evaluation.branch_id
                cause = diagnosis.facts.get("logs.likely_cause")
                if isinstance(cause, str):
                    causes[cause] += 1
                if diagnosis.facts.get("logs.permanent_damage") is True or evaluation.branch_id == "restore_permanent":
                    group.damage = True
                examples.append(entry)
            group.examples = examples
            if causes:
                group.likely_cause = causes.most_common(1)[0][0]
            if branches and len({b for b, _, _ in branches}) == 1 and branches[0][0] != group.branch:
                group.branch, group.title, group.rules = branches[0]
                for entry in examples:
                    entry.pop("branch", None)  # now the group's own branch

    # -- saying it -------------------------------------------------------------------------------

    def _message(self, *, final: bool) -> Message:
        with self.lock:
            groups = self.grouper.ordered()
            notes = []
            if self.unreadable:
                notes.append(
                    f"[!] {self.unreadable} session(s) had turns or events unreadable: their facts are partly unknown."
                )
            note = self.throttle.note()
            if note:
                notes.append(note)
            return summary_message(
                self.id,
                groups,
                listed=self.listed,
                read=self.read,
                listing_done=self.listing_done,
                elapsed=time.monotonic() - self.started,
                examples=self.examples,
                final=final,
                notes=notes,
            )

    def _progress(self) -> Message:
        message = self._message(final=False)
        if time.monotonic() - self.saved_at >= 1.0:
            self._save(self.grouper.ordered(), final=False)
        return message

    def _save(self, groups: list[Group], *, final: bool) -> None:
        with self.lock:
            data = [g.to_json() for g in groups]
            summary = {
                "state": "complete" if final else "running",
                "sessions": self.listed,
                "at": isoformat(self.t.clock.now()),
            }
        self.t.saved.save_groups(self.id, data, summary)
        self.saved_at = time.monotonic()
