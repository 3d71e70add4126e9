"""The chain's proof of a request or a batch: the one reading the gate (bot/decisions/_authority.py) and
``audit verify`` rely on.

A cached row (a decision request, a batch) claims content, a requester, a policy and an expiry; only the
step log proves it: one intact request step whose content hash the row still hashes to, a policy at
least as strict as the runbook's, and an intact approval over that hash before the expiry — for a
two-person policy by a second, identifiable person (one identity function, ``person_of``) with the
evidence that allowed them when they approved (one approver rule), for the others a confirmation by
the requester. :func:`record_problem` and :func:`sending_step` compare a stored idempotency record with
the step that recorded it. Anything missing raises :class:`NoAuthority` with a one-line reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.channels import RecoveryChannels
from bot.clock import parse_time
from bot.decisions._context import DecisionContext
from bot.decisions._glassproof import glass_step
from bot.decisions._glassrule import GlassRule
from bot.decisions._requests import DecisionRequest, content_hash
from bot.decisions._rules import (
    ApproverDirectory,
    approver_evidence,
    console_login,
    person_of,
    same_person,
)
from bot.decisions._widening import widened_for
from bot.ids import DEFAULT_INSTALLATION, installation_of_id
from bot.messages import Mention
from bot.runbook.escalation import EscalationSpec
from bot.store import IdempotencyRecord, Step, Store, binding
from bot.store.chain import KEYED_VERSION
from bot.triage.engine import runbook_limit
from bot.vocab import Policy
from bot.vocab import Step as StepName

BOT_ACTOR = "recover-bot"
REQUESTED = "decision_requested"
APPROVED = "decision_approved"
CONFIRMED = "decision_confirmed"

# How strict each approval policy is: the request's recorded policy may never be weaker than the
# runbook's policy for its decision (a row changed to ``confirm`` on a ``close`` is refused).
_STRICTNESS: dict[str, int] = {Policy.NONE: 0, Policy.CONFIRM: 1, Policy.TWO_PERSON: 2}


class NoAuthority(Exception):
    """The chain does not authorise sending this request; ``reason`` says what is missing, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Authority:
    """What the chain says was requested and who allowed it."""

    request_id: str
    content_hash: str
    requester: str
    approver: str
    policy: str
    evidence: Mapping[str, Any]
    requested_seq: int
    approval_seq: int


# -- evidence when approving ----------------------------------------------------------------------


def approval_evidence(
    actor: str, approvers: Sequence[str], directory: ApproverDirectory | None, widened: Sequence[str] = ()
) -> tuple[dict[str, Any] | None, str | None]:
    """What allows ``actor`` to approve now, to be recorded with the approval: the one approver rule
    (:func:`approver_evidence`; ``widened``: the ids the request's ladder widened to by now)."""
    return approver_evidence(actor, approvers, directory, widened)


def approval_evidence_of(
    actor: str,
    approvers: Sequence[str],
    directory: ApproverDirectory | None,
    console_users: Mapping[str, str],
    widened: Sequence[str] = (),
) -> tuple[dict[str, Any] | None, str | None]:
    """:func:`approval_evidence` for the person behind ``actor`` (a console login through its mapping;
    an unmapped login is nobody and never approves). The console mapping is recorded with it."""
    person = person_of(actor, console_users)
    if person is None:
        return None, f"{actor} is not mapped to a Slack user id (RECOVER_CONSOLE_USERS)"
    evidence, problem = approval_evidence(person, approvers, directory, widened)
    if evidence is not None and person != actor:
        evidence = {**evidence, "person": person, "login": console_login(actor)}
    return evidence, problem


def evidence_problem(actor: str, evidence: object, approvers: Sequence[str], widened: Sequence[str] = ()) -> str | None:
    """Does the recorded evidence still allow ``actor`` under today's RECOVER_APPROVERS? No look-ups.
    ``widened``: the ids the chain's ``escalation_widened`` steps for the request named before the
    approval and that today's ladder makes due at the approval's time (:func:`widened_for`)."""
    if not approvers:
        return None  # any other person may approve
    if not isinstance(evidence, Mapping):
        return "the approval records no evidence of what allowed the approver"
    kind, ident = evidence.get("kind"), evidence.get("id")
    if kind == "user" and ident == actor and actor in approvers:
        return None
    if kind == "group" and ident in approvers and evidence.get("member") == actor:
        return None
    # A widened group allows its members; a widened user id allows only that person.
    widened_ok = str(ident).startswith("S") or ident == actor
    if kind == "widened" and ident in widened and evidence.get("member") == actor and widened_ok:
        return None
    # Readable, not a live mention: this reason is stored in the chain and the request table as it is.
    return f"the recorded evidence ({kind} {ident}) does not allow {Mention('@', actor)} under RECOVER_APPROVERS"


# -- reading the chain ------------------------------------------------------------------------------


def _steps_of(steps: Iterable[Step], field: str, ident: str, requested: str) -> list[Step]:
    """The steps about one request or batch (the request step names it in its detail, others in inputs)."""
    out = []
    for s in steps:
        named = (s.detail or {}).get(field) if s.step == requested and field == "request_id" else s.inputs.get(field)
        if named == ident:
            out.append(s)
    return out


def installation_problem(store: Store, what: str, owner: str | None) -> str | None:
    """The one installation rule: the gate relies only on what belongs to its store's installation, the
    one its client sends to (``owner`` None: recorded before installations were, the default's)."""
    why = binding.foreign(what, owner, store.installation)
    return f"{why} (this store's and client's)" if why else None


def _intact(store: Store, step: Step, first_keyed: int | None) -> str | None:
    """The step matches its own hash, its link, is keyed when the store was keyed before it, and is
    the store's installation's."""
    if store.verify_step(step) is not True:
        return f"step {step.seq} ({step.step}) does not match its hash"
    prev = store.step_at(step.seq - 1) if step.seq > 1 else None
    if step.seq > 1 and (prev is None or prev.hash != step.prev_hash):
        return f"step {step.seq} ({step.step}) is not linked to the step before it"
    if store.keyed and step.v != KEYED_VERSION and first_keyed is not None and step.seq > first_keyed:
        return f"step {step.seq} ({step.step}) is not keyed although the chain was keyed before it"
    return installation_problem(store, f"step {step.seq} ({step.step})", step.installation)


@dataclass(frozen=True)
class Claim:
    """What a cached row (a decision request, a batch) claims; only the chain can prove it."""

    what: str  # "request" | "batch", for the reasons' wording
    ident: str
    session_id: str | None
    requester: str
    policy: str
    expires_at: str
    stored_hash: str  # the content hash recomputed over the cached row(s) now
    row_hash: str  # the content hash the row says it has
    installation: str | None = None  # the row's own (a request's content); its id's suffix is checked too


@dataclass(frozen=True)
class _Names:
    field: str
    requested: str
    approved: str
    confirmed: str


_REQUEST = _Names("request_id", REQUESTED, APPROVED, CONFIRMED)
_BATCH = _Names("batch_id", StepName.BATCH_REQUESTED, StepName.BATCH_APPROVED, StepName.BATCH_CONFIRMED)


def _prove(
    store: Store,
    claim: Claim,
    names: _Names,
    steps: Iterable[Step],
    *,
    runbook_policy: str,
    approvers: Sequence[str],
    channels: RecoveryChannels,
    console_users: Mapping[str, str],
    escalation: EscalationSpec | None = None,
    glass: GlassRule | None = None,
) -> Authority:
    """The one reading of the chain for a request or a batch; raises :class:`NoAuthority`.
    ``escalation``: the runbook's ladder, whose recorded ``widen`` steps widen a request's approvers.

    With ``glass`` (a single request's decision), a verified break-glass step stands in for the second
    person's approval when no approval holds (bot/decisions/_glassproof.py); nothing else does.
    """
    for owner in (installation_of_id(claim.ident), claim.installation):
        wrong = installation_problem(store, f"{claim.what} {claim.ident}", owner) if owner else None
        if wrong:
            raise NoAuthority(wrong)
    mine = _steps_of(steps, names.field, claim.ident, names.requested)
    requested = [s for s in mine if s.step == names.requested]
    if len(requested) != 1:
        raise NoAuthority(f"the chain has {len(requested)} request step(s) for {claim.ident}, not one")
    made = requested[0]
    chain_hash = (made.detail or {}).get("content_hash")
    if not chain_hash or claim.stored_hash != chain_hash or claim.row_hash != chain_hash:
        raise NoAuthority(
            f"the stored {claim.what} {claim.ident} differs from the content hash recorded in the chain (step "
            f"{made.seq})"
        )
    if made.actor != claim.requester or made.session_id != claim.session_id:
        raise NoAuthority(f"the chain's request step {made.seq} was made by someone else or on another session")
    if _STRICTNESS.get(claim.policy, -1) < _STRICTNESS.get(runbook_policy, 2):
        raise NoAuthority(
            f"{claim.what} {claim.ident} records the policy {claim.policy!r}, weaker than the runbook's "
            f"{runbook_policy!r}"
        )
    first_keyed = store.first_keyed_seq() if store.keyed else None
    problem = _intact(store, made, first_keyed)
    if problem:
        raise NoAuthority(problem)
    expires = parse_time(claim.expires_at)
    two_person = claim.policy == Policy.TWO_PERSON
    name = names.approved if two_person else names.confirmed
    reasons: list[str] = []
    for s in (s for s in mine if s.step == name):
        widened = widened_for(
            escalation,
            made,
            mine,
            parse_time(s.at),
            before_seq=s.seq,
            intact=lambda w: _intact(store, w, first_keyed) is None,
        )
        why = _approval_problem(
            s, made, claim, chain_hash, expires, two_person, approvers, channels, console_users, widened
        )
        why = why or _intact(store, s, first_keyed)
        if why is None:
            return Authority(
                request_id=claim.ident,
                content_hash=chain_hash,
                requester=made.actor,
                approver=s.actor,
                policy=claim.policy,
                evidence=dict(s.inputs.get("allowed_by") or {}),
                requested_seq=made.seq,
                approval_seq=s.seq,
            )
        reasons.append(why)
    if two_person and glass is not None:
        found, refused = glass_step(
            mine,
            made,
            chain_hash,
            expires,
            glass,
            lambda s: _intact(store, s, first_keyed),
            approvers=approvers,
            channels=channels,
            console_users=console_users,
        )
        if found is not None:
            return Authority(
                request_id=claim.ident,
                content_hash=chain_hash,
                requester=made.actor,
                approver=found.actor,
                policy=claim.policy,
                evidence={"kind": "break_glass", "incident": found.inputs.get("incident")},
                requested_seq=made.seq,
                approval_seq=found.seq,
            )
        reasons.extend(refused)
    what = "approval by a second person" if two_person else "confirmation by its requester"
    if not reasons:
        raise NoAuthority(f"the chain records no {what} of {claim.ident}")
    raise NoAuthority(f"no valid {what} of {claim.ident} in the chain: {reasons[-1]}")


def request_claim(req: DecisionRequest) -> Claim:
    """What a ``decision_requests`` row claims (its content re-hashed now)."""
    return Claim(
        what="request",
        ident=req.id,
        session_id=req.session_id,
        requester=req.requester,
        policy=req.policy,
        expires_at=req.expires_at,
        stored_hash=content_hash(req.content()),
        row_hash=req.content_hash,
        installation=req.installation or DEFAULT_INSTALLATION,
    )


def derive(
    store: Store,
    req: DecisionRequest,
    *,
    runbook_policy: str,
    approvers: Sequence[str],
    channels: RecoveryChannels,
    console_users: Mapping[str, str] | None = None,
    escalation: EscalationSpec | None = None,
) -> Authority:
    """The authority to send ``req``, from the chain alone; raises :class:`NoAuthority` with the reason.

    ``escalation`` (the runbook's ladder) lets a verified break-glass step stand in for the approval."""
    return _prove(
        store,
        request_claim(req),
        _REQUEST,
        store.steps(session_id=req.session_id),
        runbook_policy=runbook_policy,
        approvers=approvers,
        channels=channels,
        console_users=console_users or {},
        escalation=escalation,
        glass=GlassRule(escalation, req.decision),
    )


def _same_person_problem(s: Step, made: Step, console_users: Mapping[str, str]) -> str | None:
    """One person approving their own request under another name is refused, by the Slack ids the chain
    recorded (the requester's with the request, the approver's with the approval) and by today's
    RECOVER_CONSOLE_USERS; an approval by, or of a request by, an unmapped console login is none."""
    if same_person(s.actor, made.actor, console_users):
        return f"step {s.seq} is the requester approving their own request"
    allowed_by = s.inputs.get("allowed_by")
    approver = allowed_by.get("person") if isinstance(allowed_by, Mapping) else None
    approver = approver or person_of(s.actor, console_users)
    if approver is None:
        return f"step {s.seq} is an approval by an unmapped console login ({s.actor})"
    requester = (made.detail or {}).get("person") or person_of(made.actor, console_users)
    if requester is None:
        # Nobody can say who asked, so nobody can be shown to be a second person.
        return f"step {made.seq} is a two-person request by an unmapped console login ({made.actor})"
    if requester == approver:
        return f"step {s.seq} is the requester ({requester}) approving their own request under another name"
    return None


def _approval_problem(
    s: Step,
    made: Step,
    claim: Claim,
    chain_hash: str,
    expires: datetime | None,
    two_person: bool,
    approvers: Sequence[str],
    channels: RecoveryChannels,
    console_users: Mapping[str, str],
    widened: Sequence[str] = (),
) -> str | None:
    recorded_hash = s.inputs.get("content_hash")
    if recorded_hash is not None and recorded_hash != chain_hash:
        return f"step {s.seq} approved other content"
    if two_person and recorded_hash is None:
        return f"step {s.seq} does not name the content it approved"
    at = parse_time(s.at)
    if expires is None or at is None or at > expires:  # the one expiry rule
        return f"step {s.seq} was recorded after the {claim.what} expired ({claim.expires_at})"
    if two_person:
        who = _same_person_problem(s, made, console_users)
        if who:
            return who
        allowed_by = s.inputs.get("allowed_by")
        person = allowed_by.get("person", s.actor) if isinstance(allowed_by, Mapping) else s.actor
        evidence = evidence_problem(person, allowed_by, approvers, widened)
        if evidence:
            return f"step {s.seq}: {evidence}"
    elif not same_person(s.actor, claim.requester, console_users):  # the approvals' own identity rule
        return f"step {s.seq} is a confirmation by someone other than the requester"
    if not channels.allows(s.inputs.get("channel")):
        return f"step {s.seq} was given outside the recovery channels"
    return None


# -- the stored record against the chain's sending step ----------------------------------------------


def _body_of(record: IdempotencyRecord) -> object:
    try:
        return json.loads(record.body)
    except ValueError:
        return None


def record_problem(record: IdempotencyRecord, method: object, path: object, body: object, *, where: str) -> str | None:
    """Is the stored record exactly the request the chain authorised (method, path, body)?"""
    if record.method != method or record.path != path or _body_of(record) != body:
        return (
            f"the stored request {record.key} ({record.method} {record.path}) is not the one {where} "
            f"recorded ({method} {path}): the idempotency table was edited"
        )
    return None


def sending_step(
    store: Store, session_id: str | None, key: str, name: str, first_keyed: int | None
) -> tuple[Step, Mapping[str, Any]]:
    """The one intact step of ``name`` that recorded the record ``key`` when it was stored."""
    found = [s for s in store.steps(session_id=session_id) if s.idempotency_key == key and s.step == name]
    if len(found) != 1:
        raise NoAuthority(f"the chain has {len(found)} {name} step(s) for the stored request {key}, not one")
    problem = _intact(store, found[0], first_keyed)
    if problem:
        raise NoAuthority(problem)
    return found[0], found[0].inputs


# -- batches ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchClaim:
    """A batch as its rows say it is; ``members`` maps each session to the facts it was bound with."""

    claim: Claim
    decision: str
    reason: str
    members: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class BatchGrant:
    """A batch the chain authorises (made by :meth:`Gate.batch_grant` only); members are sent with it."""

    batch: BatchClaim
    authority: Authority


def batch_policy(ctx: DecisionContext, decision: str, members: int) -> str:
    """The one rule for a batch's approval: two people for an irreversible decision (R5.4) or more
    members than the runbook's ``batch_approval_threshold``; otherwise its requester's confirmation."""
    threshold = int(runbook_limit(ctx.runbooks, "batch_approval_threshold"))
    two = ctx.irreversible(decision) or members > threshold
    return Policy.TWO_PERSON if two else Policy.CONFIRM
