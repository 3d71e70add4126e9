"""Wording of the decisions core, in one place so it stays consistent and greppable.

Messages name decisions, error codes and runbook rule numbers verbatim (docs/commands.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bot.decisions._requests import DecisionRequest

# Defined in bot.format; kept reachable as ``text.duration`` etc. for this package's callers.
from bot.format import age as age
from bot.format import duration as duration
from bot.format import show as show
from bot.messages import Button, Message, approval_buttons, irreversible_click, ref
from bot.runbook.conditions import known_absent
from bot.runbook.usage import typed_line
from bot.vocab import Policy, RequestState

APPROVAL_KIND = "approval_request"
CONFIRM_KIND = "confirmation_request"
RECHECK_KIND = "recheck_request"


def fact_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    """A request's shown facts for people: a field of an absent object (no attention, no checkpoint,
    no outcome_unknown turn) is "none"; "unknown" is kept for what could not be read."""
    return [(name, fact_value(name, facts)) for name in facts]


def fact_value(name: str, facts: Mapping[str, Any]) -> str:
    """One fact for people: "none" for none (an absent object's field, a null retry_at), "unknown"
    only for what could not be read."""
    value = facts.get(name)
    return "none" if value is None and known_absent(name, facts) else show(value)


def request_lines(req: DecisionRequest, notes: Sequence[str] = ()) -> list[str]:
    """The request's exact content; ``notes`` (runbook warnings, what it drops) right after its reason."""
    lines = [  # the request id, decision and session are in every headline that shows these lines
        f"Requested by {ref(req.requester)} at {req.created_at}; expires at {req.expires_at}",
        # A flag left out is "none" (not "unknown": that word belongs to outcome_unknown and unread facts).
        f"Turn: {req.turn_id or 'none'}   Evidence: {req.evidence_ref or 'none'}",
        f"Reason: {req.reason}",
        *notes,
    ]
    if req.effects is not None:
        # R3.10: what the turn did outside, as the requester accounts for it.
        lines.append(f"External effects (requester's account, R3.10): {req.effects}")
    lines.extend(f"[!] {w}" for w in consequences(req.decision, repeated=req.repeated))
    lines.append(f"Content hash: {req.content_hash[:16]}")
    return lines


def consequences(
    decision: str, *, warning: str | None = None, drops: str | None = None, repeated: int = 0
) -> list[str]:
    """Each warning a person reads before a send, worded here once for a single decision and a batch's
    members alike (each shown as ``[!] …``): the runbook's warning for these facts (an incompatible
    checkpoint, R2.4, R5.3), what the decision drops (R2.11), a repeat without fixing the cause (R5.4)."""
    out = [w for w in (warning, f"This drops: {drops}" if drops else None) if w]
    if repeated > 0:
        out.append(
            f"`{decision}` was already executed {repeated} time(s) on this session without fixing the cause "
            "(R5.4): fix the cause before repeating it."
        )
    return out


def wire_lines(method: str, path: str, body: Mapping[str, Any]) -> list[str]:
    """Exactly what goes to the control host (secrets masked): the dry run and break-glass show it."""
    return [
        f"{method} {path}",
        "Authorization: Bearer ***",
        "Idempotency-Key: *** (a new uuid4, stored before the first send and reused on every retry)",
        "Content-Type: application/json",
        "",
        json.dumps(dict(body), indent=2, sort_keys=True),
    ]


def irreversible_line(decision: str) -> str:
    """Said in every message that asks to approve or send a decision the runbook marks ``irreversible``."""
    return f"[!] Irreversible: once the control host accepts `{decision}`, it cannot be undone (R5.4)."


def approval_request_message(
    req: DecisionRequest,
    mentions: list[str],
    rules: list[str],
    *,
    first: Sequence[str] = (),
    notes: Sequence[str] = (),
    irreversible: bool = False,
    first_showing: bool = False,
) -> Message:
    """The request a second person approves: exact content, both buttons, the typed equivalent.

    ``first``: what the reader must know before the content; ``notes``: the runbook's warnings;
    ``first_showing``: the request as first shown, said once (``said_once``) whoever offers it."""
    lines = [*first, *request_lines(req, notes)]
    if irreversible:
        lines.append(irreversible_line(req.decision))
    lines.append("A second person approves or rejects (the requester cannot approve their own request):")
    lines.append(typed_line("approve", req.id))
    lines.append(typed_line("reject", req.id, needs=("reason",)))
    return Message(
        headline=f"Approval needed: `{req.decision}` on `{req.session_id}` (request {req.id})",
        level="warn",
        lines=lines,
        facts=fact_rows(req.shown_facts),
        rules=rules,
        buttons=approval_buttons(req.id, req.decision, req.session_id, irreversible=irreversible),
        session_id=req.session_id,
        kind=APPROVAL_KIND,
        ref=req.id,
        mentions=list(mentions),
        said_once=first_showing,
    )


def confirmation_message(
    req: DecisionRequest,
    drops: str | None,
    rules: list[str],
    command: str,
    question: str | None = None,
    notes: Sequence[str] = (),
    *,
    irreversible: bool = False,
) -> Message:
    """A single-person decision waits for its explicit confirmation (R2.11, R5.3)."""
    lines = [*([question] if question else []), *request_lines(req, notes)]
    lines.extend(f"[!] {w}" for w in consequences(req.decision, drops=drops))
    if irreversible:
        lines.append(irreversible_line(req.decision))
    lines.append(f"Confirm with the button, or type: {command}")
    return Message(
        headline=f"Confirm `{req.decision}` on `{req.session_id}` (request {req.id})",
        level="warn",
        lines=lines,
        facts=fact_rows(req.shown_facts),
        rules=rules,
        buttons=[
            Button(
                f"Confirm {req.decision}",
                "confirm",
                req.id,
                command=command,
                style="danger",
                confirm=irreversible_click("Confirming", req.decision, req.session_id) if irreversible else None,
            )
        ],
        session_id=req.session_id,
        kind=CONFIRM_KIND,
        ref=req.id,
    )


def recheck_message(req: DecisionRequest, gone_at: object, *, irreversible: bool = False) -> Message:
    """R3.9 then R3.10: the worker is confirmed gone; the effects account written before that is
    re-checked (button, or the typed line) by the requester or the approver, and only then sent."""
    when = f" at {gone_at}" if gone_at else ""
    lines = [
        f"The scheduler confirmed the previous worker gone{when}, after this request was made "
        f"({req.created_at}): its effects account was written while the worker could still act.",
        "Check again what the turn's tools did outside (file writes, pushes, external calls are not undone).",
        *request_lines(req),
        *([irreversible_line(req.decision)] if irreversible else []),
        f"If the account still holds: the button, or {typed_line('confirm', req.id)}",
        f"If it changed: {typed_line('confirm', req.id, needs=('effects',))} (a new request; someone other than "
        "you approves it)",
        f"By {ref(req.requester)} (requester) or {ref(req.approved_by or '?')} (approver). Unanswered, it lapses "
        f"with the "
        f"request at {req.expires_at}; nothing is sent before.",
    ]
    return Message(
        headline=f"Effects re-check needed before `{req.decision}` on `{req.session_id}` is sent (request {req.id})",
        level="warn",
        lines=lines,
        facts=fact_rows(req.shown_facts),
        rules=["R3.9", "R3.10"],
        buttons=[
            Button(
                "Effects re-checked: send",
                "confirm",
                req.id,
                command=typed_line("confirm", req.id),
                style=None if irreversible else "primary",
                confirm=irreversible_click("Sending", req.decision, req.session_id) if irreversible else None,
            )
        ],
        session_id=req.session_id,
        kind=RECHECK_KIND,
        ref=req.id,
        mentions=[u for u in (req.requester, req.approved_by) if u],
    )


def updated_request_message(req: DecisionRequest, outcome: str, level: str = "info") -> Message:
    """The approval/confirmation message after it was decided: same kind and ref, no buttons."""
    kind = APPROVAL_KIND if req.policy == Policy.TWO_PERSON else CONFIRM_KIND
    return Message(
        headline=f"Request {req.id} (`{req.decision}` on `{req.session_id}`): {outcome}",
        level=level,  # type: ignore[arg-type]
        # One line: the outcome is the headline; the request's whole content is behind details.
        lines=[f"Requested by {ref(req.requester)} at {req.created_at}; reason: {req.reason}"],
        facts=fact_rows(req.shown_facts),
        session_id=req.session_id,
        kind=kind,
        ref=req.id,
    )


def state_text(req: DecisionRequest) -> str:
    """What became of a request that is no longer where an action expected it."""
    if req.state == RequestState.UNCERTAIN:
        return (
            f"request {req.id} is uncertain (sent, no definite answer): the bot re-sends it in the background "
            "with the same Idempotency-Key and body and posts the outcome in the case's thread"
        )
    by = req.decided_by or req.approved_by
    who = f" by {ref(by)}" if by else ""
    when = req.decided_at or req.approved_at or req.updated_at
    note = f" ({req.note})" if req.note else ""
    return f"request {req.id} is already {req.state}{who} at {when}{note}: nothing more to do"


def refusal(headline: str, *lines: str, rules: list[str] | None = None, session_id: str | None = None) -> Message:
    return Message(headline=headline, level="error", lines=list(lines), rules=list(rules or []), session_id=session_id)


def in_flight_elsewhere(request_id: str, *, deposed: bool = False) -> Message:
    """A stored send another bot holds (its send lease runs), or took over from this one: nothing is
    sent or recorded here; its outcome is that bot's (R0.3, one send per Idempotency-Key)."""
    if deposed:
        return Message(
            headline=f"Request {request_id}: another bot took its send over; its outcome stands, nothing recorded here",
            level="warn",
            lines=["This bot's lease on the send ran out while it waited for the answer (R0.3)."],
            rules=["R0.3"],
        )
    return Message(
        headline=f"Request {request_id} is being sent by another bot: its outcome is recorded there",
        lines=["Nothing was sent from here: the send's lease is held (same Idempotency-Key, R0.3)."],
        rules=["R0.3"],
    )
