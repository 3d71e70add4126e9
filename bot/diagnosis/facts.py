"""Facts: the flat vocabulary of docs/facts.md, extracted from API objects, log lines and reconciler status.

Python extracts, YAML decides: every function here is pure and total — a missing field or a
``None`` object yields ``None`` (unknown) for the facts it feeds, never an exception, because a
half-broken control host is exactly when diagnose must still answer. The lenient reading of odd
shapes happens once, before: the control host's JSON in the client's models (bot.controlhost), log
fields in :class:`bot.logs.LogLine`; here every input is already typed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from bot.clock import isoformat, parse_time
from bot.controlhost import Attention, Event, Session, Turn
from bot.diagnosis import timeline as tl
from bot.logs import LogLine
from bot.redact import redact
from bot.runbook.vocabulary import ALL_FACTS, LOG_FACTS, SOURCES

__all__ = ["ALL_FACTS", "LOG_FACTS", "SOURCES"]  # re-exported: the vocabulary lives in bot.runbook

FactValue = str | int | float | bool | None
Facts = dict[str, FactValue]

SOURCE_OK = "ok"
SOURCE_SLOW = "slow"
SOURCE_UNREACHABLE = "unreachable"
SOURCE_NOT_CONFIGURED = "not_configured"

# Worker log events named by the runbook.
EV_RESTORE_UNAVAILABLE = "worker.checkpoint.restore_unavailable"  # R2.6, transient
EV_STORE_UNAVAILABLE = "worker.checkpoint.store_unavailable"  # R2.6, transient
EV_RESTORE_REFUSED = "worker.checkpoint.restore_refused"  # R2.8, permanent
EV_WORKER_FAILED = "worker.failed"  # R2.5, R2.13
EV_STOPPING = "worker.stopping"  # R2.13 (kind=failed)
EV_STOP_KIND_REFUSED = "worker.release.stop_kind_refused"  # R2.16
TRANSIENT_EVENTS = frozenset({EV_RESTORE_UNAVAILABLE, EV_STORE_UNAVAILABLE})
# Lines after which a store outage is over for that worker [assumed names: the worker reports ready,
# or the store answers again]; a failing or stopping worker ends it too.
OUTAGE_CLOSERS = frozenset({"worker.ready", "worker.checkpoint.store_available"})

# R2.5, R2.8: what marks permanent damage rather than a store outage.
_DAMAGE_TEXT = re.compile(
    r"CHECKPOINT_UNAVAILABLE|NoSuchKey|AccessDenied"
    r"|\b(?:digest|checksum)[ _-]?mismatch\b"
    r"|\b(?:http|status|status_code|code)[\s\"':=]*40[134]\b"
    r"|\b40[134]\s+(?:not\s+found|forbidden|unauthori[sz]ed)\b",
    re.IGNORECASE,
)
_DAMAGE_FIELDS = ("status", "http_status", "status_code", "code", "error_code", "reason", "error")
# R3.1: the worker's words when the engine never answered the interrupt.
_UNANSWERED_TEXT = re.compile(r"gave no terminal within|ended before its interrupt was answered", re.I)
_CAUSE_FIELDS = ("error", "err", "reason", "message", "msg", "cause", "detail")
_MAX_CAUSE_CHARS = 300


def _iso(value: datetime | None) -> str | None:
    """Times become ISO 8601 Z strings (what conditions and people compare)."""
    return isoformat(value) if value is not None else None


def empty_facts(session_id: str, now: datetime) -> Facts:
    """Every documented fact, unknown: the starting point that sources fill in."""
    facts: Facts = dict.fromkeys(ALL_FACTS)
    facts["now"] = isoformat(now)
    facts["session.id"] = session_id
    for name in SOURCES:
        facts[f"source.{name}"] = SOURCE_NOT_CONFIGURED
    return facts


# -- session detail ---------------------------------------------------------------------------------


def _in_backoff(attention: Attention | None) -> bool | None:
    """R2.2: no attention → not in backoff; ``retry_at`` a time → in backoff; present and null →
    not in backoff; missing, or not a time → unknown."""
    if attention is None:
        return False
    if attention.retry_at is not None:
        return True
    if attention.retry_at_text is None and attention.retry_at_null:
        return False
    return None


def session_facts(session: Session) -> Facts:
    """Facts from the session detail (GET /v1/sessions/{id}); fields missing upstream stay None."""
    attention = session.attention
    checkpoint = session.checkpoint
    execution = session.execution
    retry_at: str | None = None
    if attention is not None:
        # A time the API sent but that does not read as one is shown as sent (and is not a backoff).
        retry_at = _iso(attention.retry_at) or attention.retry_at_text
    state = execution.state if execution is not None else None
    facts: Facts = {
        "session.found": True,
        "session.status": session.status,
        "session.admission_state": session.admission_state,
        "session.revision": session.revision,
        "session.resumable": session.resumable,
        "session.queued_inputs": session.queued_inputs,
        "attention.present": attention is not None,
        "attention.code": attention.code if attention else None,
        "attention.reason": attention.reason if attention else None,
        "attention.failures": attention.failures if attention else None,
        "attention.retry_at": retry_at,
        # R2.1, R2.2, R2.10: retry_at set = still in backoff; present and null once stopped (or
        # relaunched). A missing or unreadable retry_at is unknown, never taken for null.
        "attention.in_backoff": _in_backoff(attention),
        "checkpoint.present": checkpoint is not None,
        "checkpoint.id": checkpoint.id if checkpoint else None,
        "checkpoint.covers_turn_id": checkpoint.covers_turn_id if checkpoint else None,
        "execution.state": state,
        # R3.9: the scheduler's pass confirmed the container absent.
        # The API accepts abandon/confirm only when execution.state is gone, so that is the test here.
        "execution.confirmed_gone": (state == "gone") if state is not None else None,
        # R3.9, R3.10: when the scheduler confirmed it; an effects account older than this was
        # written while the worker could still act.
        "execution.confirmed_gone_at": _iso(execution.confirmed_gone_at) if execution else None,
    }
    return facts


def session_missing_facts() -> Facts:
    """404 NOT_FOUND on the session: it is known not to exist (a plain answer, not an outage)."""
    return {"session.found": False}


# -- turns ------------------------------------------------------------------------------------------


def pick_unknown_turn(turns: Iterable[Turn]) -> Turn | None:
    """The outcome_unknown turn at the head of the queue: the oldest one (the API lists newest first)."""
    unknown = [t for t in turns if t.status in (None, "outcome_unknown")]
    if not unknown:
        return None
    dated = [(t.started_at, i, t) for i, t in enumerate(unknown)]
    if all(d is not None for d, _, _ in dated):
        return min(dated, key=lambda x: (x[0], -x[1]))[2]
    return unknown[-1]


def turn_facts(head: Turn | None, detail: Turn | None = None) -> Facts:
    """Facts about the outcome-unknown turn (R3.1): ``head`` from the list, ``detail`` from get_turn.

    The terminal reason comes from the turn itself (GET …/turns/{id}), not from the attention code:
    the attention block may lag or be absent while the turn endpoint is authoritative.
    """
    if head is None:
        return {
            "unknown_turn.present": False,
            "unknown_turn.id": None,
            "unknown_turn.terminal_reason": None,
            "unknown_turn.control_id": None,
        }
    return {
        "unknown_turn.present": True,
        "unknown_turn.id": (detail.id if detail else None) or head.id or None,
        "unknown_turn.terminal_reason": (detail.terminal_reason if detail else None) or head.terminal_reason,
        "unknown_turn.control_id": (detail.control_id if detail else None) or head.control_id,
    }


def link_facts(facts: Facts) -> Facts:
    """Facts that need two sources: whether the committed checkpoint covers the unknown turn (R3.11)."""
    present = facts.get("unknown_turn.present")
    if present is True and facts.get("session.found") is True and facts.get("checkpoint.present") is not None:
        turn_id = facts.get("unknown_turn.id")
        facts["unknown_turn.covered_by_checkpoint"] = (
            bool(facts.get("checkpoint.present"))
            and turn_id is not None
            and facts.get("checkpoint.covers_turn_id") == turn_id
        )
    elif present is False:
        facts["unknown_turn.covered_by_checkpoint"] = None
    return facts


# -- events -----------------------------------------------------------------------------------------


def event_facts(events: Iterable[Event]) -> Facts:
    """Counts of the system events the runbook names (R2.5, R2.12), and the newest ready report.

    ``events.ready_*`` is the evidence verification needs (R5.1, R5.2): a worker reporting ready is
    what the seed names for a restore or a start that worked (R2.1); ``events.last_seq`` is where the
    stream stood, so a later read can tell a report made after a send from one made before it.
    """
    listed = list(events)
    names = [e.name or e.type for e in listed]
    seqs = [e.seq for e in listed if e.seq is not None]
    ready = [e for e in listed if e.name == "worker_ready" and e.seq is not None]
    newest = max(ready, key=lambda e: e.seq or 0) if ready else None
    return {
        "events.restore_failed": names.count("checkpoint_restore_failed"),
        "events.startup_failed": names.count("startup_failed"),
        "events.last_seq": max(seqs) if seqs else 0,
        "events.ready_seq": newest.seq if newest else None,
        "events.ready_generation": newest.generation if newest else None,
        "events.ready_names_checkpoint": newest.names_checkpoint if newest else None,
        "events.ready_checkpoint_id": newest.checkpoint_id if newest else None,
    }


# -- logs -------------------------------------------------------------------------------------------


@dataclass
class LogEvidence:
    """What the log lines show people, beside the facts: timeline, control.result, notable lines."""

    timeline: tl.InterruptTimeline | None = None
    control_result: tl.ControlResult | None = None
    notable: list[LogLine] = field(default_factory=list)
    lines_read: int = 0
    truncated: bool = False


NOTABLE_EVENTS = frozenset(
    {
        EV_RESTORE_UNAVAILABLE,
        EV_STORE_UNAVAILABLE,
        EV_RESTORE_REFUSED,
        EV_WORKER_FAILED,
        EV_STOPPING,
        EV_STOP_KIND_REFUSED,
        tl.CONTROL_RESULT_EVENT,
        tl.LATE_ANSWER,
    }
)
MAX_NOTABLE = 40


def _transient_status(status: int | None) -> bool:
    """R2.6: 408, 429 and 5xx are a store outage, never damage."""
    return status is not None and (status in (408, 429) or 500 <= status <= 599)


def _is_damage(line: LogLine, event: str | None) -> bool:
    """R2.5, R2.8: permanent damage in a restore-related line (transient outage lines never count).

    Structured fields decide before free text (R2.6 vs R2.8): a transient status (408, 429, 5xx) in a
    status field is an outage whatever the message says; 401/403/404 or a damage code in a field is
    damage; a line with such fields is never judged again on its free text, which is read only for
    lines that carry none. Interrupt-stage lines are left out on purpose: CHECKPOINT_UNAVAILABLE at
    finalize means the API refused a manifest (R3.5), not that a stored checkpoint is damaged.
    """
    if event in TRANSIENT_EVENTS or event in (tl.STAGE_EVENT, tl.CONTROL_RESULT_EVENT, tl.LATE_ANSWER):
        return False
    if event == EV_RESTORE_REFUSED:
        return True
    statuses = [line.int_of(key) for key in _DAMAGE_FIELDS]
    if any(_transient_status(n) for n in statuses):
        return False
    if any(n in (401, 403, 404) for n in statuses):
        return True
    structured = False
    for key in _DAMAGE_FIELDS:
        value = line.fields.get(key)
        if isinstance(value, str) and value.strip():
            structured = True
            if _DAMAGE_TEXT.search(value):
                return True
    if structured or any(n is not None for n in statuses):
        return False
    return bool(_DAMAGE_TEXT.search(line.text))


def _cause(line: LogLine) -> str | None:
    """The error text of a worker.failed / worker.stopping line (R2.13), redacted and bounded."""
    for key in _CAUSE_FIELDS:
        value = line.fields.get(key)
        if isinstance(value, str) and value.strip() and value.strip() != "failed":
            text = value.strip()
            break
    else:
        text = line.text.strip()
    if not text:
        return None
    text = redact(text)
    return text if len(text) <= _MAX_CAUSE_CHARS else text[: _MAX_CAUSE_CHARS - 1] + "…"


_COUNTED: tuple[str, ...] = (
    "restore_unavailable",
    "store_unavailable",
    "restore_refused",
    "worker_failed",
    "stopping_failed",
    "stop_kind_refused",
)


@dataclass
class LogScanResult:
    """One streaming pass over a session's log lines: counts, and the few lines kept for later.

    Kept apart from :func:`log_facts_from` because the lines are read concurrently with the turns
    endpoint: which interrupt timeline matters is known only once the outcome-unknown turn is.
    """

    total: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTED, 0))
    damage: bool = False
    unanswered: bool = False
    cause: str | None = None
    interrupt_lines: list[LogLine] = field(default_factory=list)
    notable: list[LogLine] = field(default_factory=list)
    unanswered_lines: list[LogLine] = field(default_factory=list)  # R3.1, attributed per turn later
    outage_open: bool = False  # the last outage-relevant line is a transient outage line (R2.6)
    truncated: bool = False

    def add(self, line: LogLine) -> None:
        self.total += 1
        event = line.event
        fields = line.fields
        text = line.text
        stopping_failed = event == EV_STOPPING and str(fields.get("kind", "")).lower() == "failed"
        if event == EV_RESTORE_UNAVAILABLE:
            self.counts["restore_unavailable"] += 1
        elif event == EV_STORE_UNAVAILABLE:
            self.counts["store_unavailable"] += 1
        elif event == EV_RESTORE_REFUSED:
            self.counts["restore_refused"] += 1
        elif event == EV_WORKER_FAILED:
            self.counts["worker_failed"] += 1
        elif stopping_failed:
            self.counts["stopping_failed"] += 1
        elif event == EV_STOP_KIND_REFUSED:
            self.counts["stop_kind_refused"] += 1
        if event == EV_WORKER_FAILED or stopping_failed:
            # R2.13: the last failing line names the likely cause.
            self.cause = _cause(line) or self.cause
        if _is_damage(line, event):
            self.damage = True
        unanswered = bool(_UNANSWERED_TEXT.search(text)) or any(
            isinstance(v, str) and _UNANSWERED_TEXT.search(v) for v in fields.values()
        )
        self.unanswered = self.unanswered or unanswered
        if unanswered and len(self.unanswered_lines) < MAX_NOTABLE:
            self.unanswered_lines.append(line)
        if event in TRANSIENT_EVENTS:
            self.outage_open = True
        elif event in OUTAGE_CLOSERS or event == EV_WORKER_FAILED or stopping_failed:
            self.outage_open = False  # the store answered, the worker got ready, or it ended
        if event in (tl.STAGE_EVENT, tl.LATE_ANSWER, tl.CONTROL_RESULT_EVENT):
            self.interrupt_lines.append(line)
        if (event in NOTABLE_EVENTS or unanswered or stopping_failed) and len(self.notable) < MAX_NOTABLE:
            self.notable.append(line)


def scan_log_lines(lines: Iterable[LogLine]) -> LogScanResult:
    """Read every line once (streaming: only interrupt and notable lines are kept)."""
    scan = LogScanResult()
    for line in lines:
        scan.add(line)
    return scan


def _names_turn(line: LogLine, turn_id: str, control_id: str | None) -> bool:
    """R3.2: a line is evidence about a turn only when it names it (its turn_id or control_id field, or
    the id as a word of a plain line); a line naming another turn, or none, is not."""
    named_turn = line.text_of("turn_id")
    named_control = line.text_of("control_id")
    if named_turn is not None or named_control is not None:
        return named_turn == turn_id or (control_id is not None and named_control == control_id)
    return re.search(rf"(?<![\w.:-]){re.escape(turn_id)}(?![\w.:-])", line.text) is not None


def log_facts_from(
    scan: LogScanResult, *, turn_id: str | None = None, control_id: str | None = None
) -> tuple[Facts, LogEvidence]:
    """Facts and evidence from a scan. With ``turn_id`` (the outcome-unknown turn; ``control_id`` its
    control) the interrupt evidence is that turn's only — session_id · turn_id · control_id (R3.2):
    another turn's stages, control.result or unanswered line never explain it."""
    timelines = tl.build_timelines(scan.interrupt_lines)
    chosen = tl.select_timeline(timelines, turn_id, control_id)
    result = tl.select_control_result(tl.control_results(scan.interrupt_lines), chosen, turn_id, control_id)
    late = bool(chosen.late) if chosen is not None else False
    if turn_id is None:
        unanswered = scan.unanswered
    else:
        unanswered = any(_names_turn(line, turn_id, control_id) for line in scan.unanswered_lines)
    facts: Facts = {
        "logs.lines": scan.total,
        **{f"logs.{k}": v for k, v in scan.counts.items()},
        "logs.permanent_damage": scan.damage,
        "logs.likely_cause": scan.cause,
        "logs.interrupt_unanswered": unanswered,
        "logs.outage_ongoing": scan.outage_open,
        "logs.timeline_turn_id": chosen.turn_id if chosen else None,
        "logs.late_sdk_interrupt_answered": late,  # R3.4
        "logs.engine_terminal_timeout": chosen.engine_terminal_timeout if chosen else False,
        "logs.capture_timeout": chosen.capture_timeout if chosen else False,
        "logs.capture_failed": chosen.capture_failed if chosen else False,
        "logs.finalize_checkpoint_unavailable": chosen.finalize_checkpoint_unavailable if chosen else False,
        # No interrupt timeline at all: which stages are missing is unknown, not "all of them".
        "logs.missing_stages": ",".join(chosen.missing) if chosen else None,
        "logs.control_result_outcome": result.outcome if result else None,
        "logs.control_result_reason_code": result.reason_code if result else None,
    }
    evidence = LogEvidence(
        timeline=chosen,
        control_result=result,
        notable=list(scan.notable),
        lines_read=scan.total,
        truncated=scan.truncated,
    )
    return facts, evidence


def log_facts(
    lines: Iterable[LogLine], *, turn_id: str | None = None, control_id: str | None = None
) -> tuple[Facts, LogEvidence]:
    """Facts and evidence from the worker's log lines for one session (R2.5–R2.8, R2.13, R2.16, R3.1–R3.5)."""
    return log_facts_from(scan_log_lines(lines), turn_id=turn_id, control_id=control_id)


# -- reconciler -------------------------------------------------------------------------------------


def reconciler_facts(last_pass: str | None, last_pass_at: str | None) -> Facts:
    """Facts from the reconciler's last pass (R1.4); shape of the status file unknown, so only two facts."""
    at = parse_time(last_pass_at)
    return {
        "reconciler.last_pass": last_pass.lower() if last_pass else None,
        "reconciler.last_pass_at": isoformat(at) if at is not None else (last_pass_at or None),
    }
