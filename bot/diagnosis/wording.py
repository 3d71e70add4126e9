"""Every sentence ``diagnose`` says to a person, in one place (consistent, greppable, translatable).

The runbook YAML supplies the branch's own words (title, explanation, notes, next steps, reasons a
decision is refused); this module frames them and words what Python knows itself: sources that were
slow or unreachable, the interrupt-stage timeline (R3.2–R3.5) and the ``control.result`` line (R3.3).
Decision names, error codes and rule ids are printed verbatim so people can search the runbook for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bot.buttons import DecisionChoice
from bot.diagnosis import timeline as tl
from bot.diagnosis.cure import session_cure
from bot.diagnosis.model import Diagnosis
from bot.errors import ControlHostError, RecoverError
from bot.messages import Attachment, Button, Message
from bot.redact import redact
from bot.runbook.conditions import format_value, known_absent
from bot.runbook.evaluate import Evaluation
from bot.runbook.model import RunbookSet
from bot.runbook.suggest import did_you_mean
from bot.runbook.usage import decide_line, typed_line
from bot.vocab import Action

#: A timeline longer than this (in lines) goes to an attachment instead of the message body.
INLINE_TIMELINE_LINES = 12
DECIDE_ACTION = Action.DECIDE_FORM
RESUME_ACTION = Action.RESUME
_DEFAULT_FACTS = (
    "session.status",
    "session.admission_state",
    "attention.code",
    "attention.reason",
    "attention.failures",
    "attention.retry_at",
    "unknown_turn.id",
    "unknown_turn.terminal_reason",
    "execution.confirmed_gone",
)


# -- errors and sources ------------------------------------------------------------------------------


def bad_session_id(session_id: object) -> str:
    shown = redact(str(session_id))[:80]
    return f"'{shown}' is not a session id: ids are letters, digits and _ . : - (up to 128 characters), e.g. ses_01J9Z"


def source_slow(budget_seconds: float) -> str:
    return f"no answer within the diagnose budget of {budget_seconds:g} s; its facts are unknown"


def source_error(exc: BaseException) -> str:
    message = (exc.message if isinstance(exc, RecoverError) else None) or str(exc) or type(exc).__name__
    code = exc.code if isinstance(exc, ControlHostError) else None
    text = f"{code}: {message}" if code and code not in message else message
    return redact(text.splitlines()[0] if text else type(exc).__name__)[:300]


def source_not_configured(name: str) -> str:
    if name == "logs":
        return "no log source configured (set RECOVER_LOG_FILES or a Docker host)"
    if name == "reconciler":
        return "no reconciler status source configured (needs the Docker host)"
    return f"{name} is not configured"


def interrupt_attached(filename: str) -> str:
    return f"Interrupt timeline (R3.2) and log lines: see the attachment {filename}"


def source_line(name: str, state: str, detail: str | None) -> str:
    label = {"slow": "was slow", "unreachable": "was unreachable"}.get(state, state)
    return f"[!] Source {name} {label}: {detail}" if detail else f"[!] Source {name} {label}"


# -- the evaluation ------------------------------------------------------------------------------------


def fact_text(name: str, facts: Mapping[str, object]) -> str:
    """A fact for people: "none" for a field of an absent object (no attention, no checkpoint, no
    outcome_unknown turn), "unknown" only when it could not be read (never the same word for both)."""
    value = facts.get(name)
    if value is None and known_absent(name, facts):
        return "none"
    return format_value(value)


def invalid_decisions(evaluation: Evaluation) -> list[tuple[str, str]]:
    """(decision, why not now) for each decision not valid now, e.g. ("retry_restore", "409 … until …")."""
    return [(v.decision, v.text.removeprefix(f"{v.decision}: ")) for v in evaluation.invalid_decisions]


def decisive_facts(evaluation: Evaluation, facts: Mapping[str, object]) -> list[str]:
    """The branch's own facts to show, else the usual few that are known."""
    return list(evaluation.show_facts) or [n for n in _DEFAULT_FACTS if facts.get(n) is not None]


# -- decisions as buttons ------------------------------------------------------------------------------


def decide_command(session_id: str, decision: str, runbooks: RunbookSet, facts: Mapping[str, object]) -> str:
    """The typed equivalent of a decision button (docs/commands.md), flags filled from facts where the runbook
    says so (``diagnose_flags``, e.g. ``--turn`` from ``unknown_turn.id``), placeholders for the rest: the
    runbook's required flags and the ``--cause-fixed`` an incurable cause asks for (R2.3, R2.8, R5.3)."""
    spec = runbooks.decisions.get(decision)
    if spec is not None and not spec.decidable:
        return f"/recover {spec.command or decision} {session_id}"
    from_facts: Mapping[str, str] = spec.diagnose_flags if spec is not None else {}
    values = {flag: None if facts.get(fact) is None else str(facts.get(fact)) for flag, fact in from_facts.items()}
    return decide_line(session_id, decision, values, needs=decision_needs(decision, runbooks, facts))


def decision_needs(decision: str, runbooks: RunbookSet, facts: Mapping[str, object]) -> list[str]:
    """The flags a valid ``decision`` still needs from the person, beyond those diagnose fills in."""
    spec = runbooks.decisions.get(decision)
    if spec is None:
        return []
    needs = [f for f in runbooks.required_flags(decision) if f != "reason"]
    if session_cure(decision, facts) is not None:
        needs.append("cause-fixed")
    return needs


def needs_said(decision: str, runbooks: RunbookSet, facts: Mapping[str, object]) -> str | None:
    """What a valid decision still needs, in words for the list of valid decisions (None: just a reason)."""
    spec = runbooks.decisions.get(decision)
    filled = set(spec.diagnose_flags) if spec is not None else set()
    flags = [f"--{f}" for f in decision_needs(decision, runbooks, facts) if f not in filled]
    if not flags:
        return None
    cure = session_cure(decision, facts)
    why = f": {cure[0]} ({cure[1]})" if cure else ""
    return "needs " + ", ".join(flags) + why


def decision_button(session_id: str, decision: str, runbooks: RunbookSet, facts: Mapping[str, object]) -> Button:
    spec = runbooks.decisions.get(decision)
    command = decide_command(session_id, decision, runbooks, facts)
    if spec is not None and not spec.decidable:
        return Button(label=decision, action=RESUME_ACTION, value=session_id, command=command, style="primary")
    return Button(
        label=decision,
        action=DECIDE_ACTION,
        value=DecisionChoice(session_id, decision).encode(),
        command=command,
        style="danger" if spec is not None and spec.irreversible else None,  # R5.4
    )


# -- timeline ------------------------------------------------------------------------------------------


_READINGS = {
    tl.READ_ENGINE_TERMINAL_TIMEOUT: (
        "engine_terminal outcome=timeout: no SDK/engine terminal within the 5 s grace (R3.5)"
    ),
    tl.READ_CAPTURE_FAILED: ("capture_finished outcome=failed{reason}: the checkpoint capture itself failed (R3.5)"),
    tl.READ_FINALIZE_CHECKPOINT_UNAVAILABLE: (
        "finalize_finished outcome=failed CHECKPOINT_UNAVAILABLE after a finished capture: the API "
        "refused the manifest or its ref — not a capture timeout and not an S3 failure (R3.5)"
    ),
    tl.READ_FINALIZE_FAILED: "finalize_finished outcome=failed{reason}: the checkpoint was not committed",
}


def reading(code: str, entry: tl.StageEntry) -> str:
    if code == tl.READ_CAPTURE_TIMEOUT:
        budget = f" with budget_ms={entry.budget_ms}" if entry.budget_ms is not None else ""
        return f"capture_finished outcome=timeout{budget}: the checkpoint capture budget ran out (R3.5)"
    reason = f" reason={entry.reason}" if entry.reason else ""
    return _READINGS.get(code, code).format(reason=reason)


def _ms(value: int | None) -> str:
    return f"{value} ms" if value is not None else "? ms"


def timeline_lines(timeline: tl.InterruptTimeline) -> list[str]:
    """The R3.2 timeline for people: one stage a line with elapsed_ms, then missing, late and readings."""
    out = [
        f"Interrupt timeline (R3.2) turn {format_value(timeline.turn_id)}, control {format_value(timeline.control_id)}:"
    ]
    for entry in timeline.stages:
        pairs = (("outcome", entry.outcome), ("reason", entry.reason), ("budget_ms", entry.budget_ms))
        extra = " ".join(f"{k}={v}" for k, v in pairs if v is not None)
        out.append(f"  {_ms(entry.elapsed_ms):>10}  {entry.stage}{'  ' + extra if extra else ''}")
    if timeline.missing:
        out.append("  missing stages: " + ", ".join(timeline.missing))
    for entry in timeline.late:
        out.append(f"  late (R3.4, not in the sequence): late_sdk_interrupt_answered at {_ms(entry.elapsed_ms)}")
    for code, entry in timeline.readings():
        out.append("  reading: " + reading(code, entry))
    return out


def control_result_line(result: tl.ControlResult) -> str:
    """R3.3: the control.result line, with what its special values mean."""
    base = (
        f"control.result (R3.3): operation={format_value(result.operation)} "
        f"outcome={format_value(result.outcome)} reason_code={format_value(result.reason_code)} "
        f"effect_ms={format_value(result.effect_ms)}"
    )
    if result.deadline_exceeded:
        return base + " — the interrupt receipt did not finish by its deadline"
    if result.no_op:
        return base + " — a no-op: the turn had already ended"
    return base


# -- the whole message ---------------------------------------------------------------------------------


def render(diagnosis: Diagnosis, runbooks: RunbookSet, *, near: Sequence[str] = ()) -> list[Message]:
    """The diagnose answer: one message (the timeline as an attachment when long). ``near``: for a
    session the host does not have, the known ids it was probably meant to be."""
    ev = diagnosis.evaluation
    facts = diagnosis.facts
    sid = diagnosis.session_id
    valid = list(ev.valid_decisions)
    invalid = invalid_decisions(ev)
    lines: list[str] = [ev.explanation, *ev.notes]
    if valid:
        said = ev.consequences
        valid_said = []
        for n in valid:
            notes = [w for w in (needs_said(n, runbooks, facts), said.get(n)) if w]
            valid_said.append(f"{n} ({'; '.join(notes)})" if notes else n)
        lines.append("Valid now: " + ", ".join(valid_said))
    reasons = {reason for _, reason in invalid}
    if invalid and not valid and len(invalid) > 1 and len(reasons) == 1:
        # One cause refuses everything (e.g. an unknown session): say it once.
        lines.append(f"No decision is valid now ({', '.join(n for n, _ in invalid)}): {reasons.pop()}")
    elif invalid:
        lines.append("Not valid now:")
        lines.extend(f"  • {name}: {reason}" for name, reason in invalid)
    unknown_session = diagnosis.facts.get("session.found") is False
    if unknown_session:  # the id to copy, never the mistyped one as if it were valid
        lines.extend(did_you_mean(*(typed_line("diagnose", sid) for sid in near)))
    steps = ev.next_steps
    if steps:
        lines.append("Next:")
        lines.extend(f"  {i}. {step}" for i, step in enumerate(steps, 1))
    for source in diagnosis.degraded_sources:
        if unknown_session and "NOT_FOUND" in (source.detail or ""):
            continue  # the same 404 as the session itself: already said above
        lines.append(source_line(source.name, source.state, source.detail))
    coverage = diagnosis.evidence.log_coverage
    if coverage and not unknown_session:  # a log read for a session that does not exist says nothing
        # What of the worker log this answer rests on (diagnosis.logcoverage); partial is a warning.
        lines.append(("[!] " if diagnosis.evidence.logs_truncated else "") + coverage)
    elif diagnosis.evidence.logs_truncated:
        lines.append("[!] The log scan stopped at its byte budget: log facts may miss lines.")

    detail: list[str] = []
    if diagnosis.evidence.timeline is not None:
        detail.extend(timeline_lines(diagnosis.evidence.timeline))
    if diagnosis.evidence.control_result is not None:
        detail.append(control_result_line(diagnosis.evidence.control_result))
    attachment = None
    if len(detail) > INLINE_TIMELINE_LINES:
        notable = [redact(line.text) for line in diagnosis.evidence.log_lines]
        text = "\n".join([*detail, "", "Log lines:", *notable] if notable else detail)
        attachment = Attachment(filename=f"diagnose-{sid}-timeline.txt", text=text)
        lines.append(interrupt_attached(attachment.filename))
    else:
        lines.extend(detail)

    # An unknown session has no facts to detail: no Details button naming the mistyped id.
    shown = [] if unknown_session else [(name, fact_text(name, facts)) for name in decisive_facts(ev, facts)]
    has_decisions = bool(valid or invalid)
    message = Message(
        headline=f"{sid}: {ev.title}",
        level="warn" if has_decisions or diagnosis.degraded_sources else "info",
        lines=lines,
        facts=shown,
        rules=list(ev.rules),
        buttons=[decision_button(sid, name, runbooks, facts) for name in valid],
        attachment=attachment,
        session_id=sid,
        kind="diagnosis",
        ref=sid,
    )
    return [message]
