"""The follow-up after the first answer: when the whole worker log adds evidence, say so once.

See :mod:`bot.diagnosis.logcoverage` for why diagnose answers before the whole log is read.
"""

from __future__ import annotations

from bot.clock import isoformat
from bot.diagnosis import facts as F
from bot.diagnosis import wording
from bot.diagnosis.logcoverage import FULL_SCAN_TIMEOUT_SECONDS, LogReadJob, new_evidence
from bot.diagnosis.model import Diagnosis, Evaluate
from bot.messages import Message, Reporter
from bot.runbook.model import RunbookSet
from bot.runbook.usage import typed_line
from bot.store import Store
from bot.vocab import Step


def follow_up(
    diagnosis: Diagnosis,
    job: LogReadJob,
    *,
    runbooks: RunbookSet,
    evaluate: Evaluate,
    store: Store,
    actor: str,
    reporter: Reporter,
    timeout: float = FULL_SCAN_TIMEOUT_SECONDS,
) -> Message | None:
    """Wait for the whole log; when it adds evidence, record a ``diagnose_followup`` step and post ONE
    message to the case's thread through ``reporter``. Returns that message (None: nothing new)."""
    first_snap = diagnosis.log_snapshot
    final_snap = job.final(timeout)
    if first_snap is None or final_snap is None:
        return None
    sid = diagnosis.session_id
    turn = diagnosis.facts.get("unknown_turn.id")
    turn_id = turn if isinstance(turn, str) else None
    control = diagnosis.facts.get("unknown_turn.control_id")
    control_id = control if isinstance(control, str) else None
    first_facts, _ = F.log_facts_from(first_snap.result, turn_id=turn_id, control_id=control_id)
    final_facts, final_evidence = F.log_facts_from(final_snap.result, turn_id=turn_id, control_id=control_id)
    found = new_evidence(first_facts, final_facts, first_snap, final_snap, turn_id)
    if not found:
        return None
    facts = dict(diagnosis.facts)
    facts.update(final_facts)
    evaluation = evaluate(runbooks, facts)
    before, after = diagnosis.evaluation.branch_id, evaluation.branch_id
    lines = [final_snap.describe(), "Found after the first answer: " + "; ".join(found) + "."]
    if final_evidence.timeline is not None:
        lines.extend(wording.timeline_lines(final_evidence.timeline))
    if final_evidence.control_result is not None:
        lines.append(wording.control_result_line(final_evidence.control_result))
    if after != before:
        lines.append(
            f"With these lines the runbook picks a different branch: {evaluation.title} "
            f"({after}, was {before}). Run `{typed_line('diagnose', sid)}` again before deciding."
        )
    else:
        lines.append(f"The runbook branch stays {before}; the decisions shown above still apply.")
    message = Message(
        headline=f"{sid}: the whole worker log adds evidence the first answer did not have",
        level="warn",
        lines=lines,
        rules=list(evaluation.rules),
        session_id=sid,
        kind="diagnosis_followup",
    )
    store.record_step(
        sid,
        actor,
        Step.DIAGNOSE_FOLLOWUP,
        {"session_id": sid, "first_answer_at": isoformat(diagnosis.gathered_at)},
        after or "unknown",
        detail={"found": found, "coverage": final_snap.describe(), **final_facts},
    )
    reporter.post(message)
    return message
