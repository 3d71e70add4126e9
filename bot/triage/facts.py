"""One session's facts for a triage: the API's facts only (detail, turns, events), no worker logs.

The same extraction functions as ``diagnose`` (bot.diagnosis.facts) and the same runbook evaluation
(bot.runbook.evaluate): a triage never classifies by a second set of rules. Worker logs are read for a
group's few examples only (see :func:`with_logs`): reading them for hundreds of sessions is what makes
a mass incident slow to understand.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from bot.clock import isoformat
from bot.controlhost import ControlHostClient, Session
from bot.diagnosis import facts as F
from bot.errors import ControlHostError
from bot.logs import LogSource
from bot.runbook.evaluate import Evaluation, evaluate
from bot.runbook.model import RunbookSet

FAILURE_EVENTS = ("checkpoint_restore_failed", "startup_failed")  # R2.5, R2.12
SOURCE_NOT_READ = "not_read"

# What a batch binds besides the revision: the facts a person looked at (bot.decisions' list) and
# the ones the decisions' preconditions read.
BOUND_FACTS = (
    "session.status",
    "session.admission_state",
    "session.revision",
    "attention.code",
    "attention.reason",
    "attention.failures",
    "attention.retry_at",
    "checkpoint.id",
    "checkpoint.covers_turn_id",
    "unknown_turn.id",
)


def session_only_facts(session: Session, now: datetime) -> F.Facts:
    """Facts from a session detail alone (a listing page or a GET): the re-check before a send."""
    facts = F.empty_facts(session.id, now)
    facts.update(F.session_facts(session))
    facts["source.session"] = F.SOURCE_OK
    return facts


def gather(client: ControlHostClient, session: Session, now: datetime) -> tuple[F.Facts, str | None]:
    """Facts of one listed session plus its turns and first events page; and its last failure time."""
    sid = session.id
    facts = session_only_facts(session, now)
    try:
        listed = client.list_turns(sid, status="outcome_unknown")
        head = F.pick_unknown_turn(listed)
        detail = client.get_turn(sid, head.id) if head is not None and head.id else None
        facts.update(F.turn_facts(head, detail))
        facts["source.turns"] = F.SOURCE_OK
    except ControlHostError:
        facts["source.turns"] = F.SOURCE_UNREACHABLE
    failed_at: str | None = None
    try:
        events = client.list_events(sid).events
        facts.update(F.event_facts(events))
        facts["source.events"] = F.SOURCE_OK
        times = [e.at for e in events if e.name in FAILURE_EVENTS and e.at is not None]
        failed_at = isoformat(max(times)) if times else None
    except ControlHostError:
        facts["source.events"] = F.SOURCE_UNREACHABLE
    facts["source.logs"] = SOURCE_NOT_READ
    F.link_facts(facts)
    return facts, failed_at


def with_logs(
    runbooks: RunbookSet,
    log_source: LogSource | None,
    facts: F.Facts,
    now: datetime,
    *,
    window: float,
    deadline: float,
) -> tuple[F.Facts, Evaluation]:
    """An example's facts completed with its worker log lines, and the runbook's evaluation of them."""
    out = dict(facts)
    if log_source is not None:
        sid = str(facts.get("session.id"))
        scan = F.LogScanResult()
        lines = log_source.lines_for_session(sid, since=now - timedelta(seconds=window))
        try:
            for n, line in enumerate(lines):
                scan.add(line)
                if n % 512 == 511 and time.monotonic() > deadline:
                    out["source.logs"] = F.SOURCE_SLOW
                    break
            else:
                out["source.logs"] = F.SOURCE_OK
        finally:
            close = getattr(lines, "close", None)
            if callable(close):
                close()
        turn = out.get("unknown_turn.id")
        log_facts, _ = F.log_facts_from(scan, turn_id=turn if isinstance(turn, str) else None)
        out.update(log_facts)
    return out, evaluate(runbooks, out)
