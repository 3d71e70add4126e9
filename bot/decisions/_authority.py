"""The authority to send a decision, re-derived from the hash chain alone (docs/requests.md).

The ``decision_requests`` table is a cache: someone with the database file can set a row to
``approved`` or change its decision. So before anything is sent — on every path: approve, confirm,
``decide --yes``, the background finishing of an uncertain request, the replay after a restart — the
bot looks for its authority in the chain:

- the ``decision_requested`` step, by the requester, whose content hash the stored content matches;
- a policy at least as strict as the runbook's for that decision;
- for two-person decisions a ``decision_approved`` step by someone else, over that content hash,
  before the expiry, in an allowed channel, with the evidence that allowed the approver *as seen
  when they approved* (group look-ups are not repeated here); for the others a ``decision_confirmed``
  step by the requester;
- each of those steps matching its own hash and link (keyed, when the store has a key).

Anything missing is a refusal with a one-line reason; nothing is sent. :func:`check_request_table` is
the same reading for ``audit verify``: it names every cached row that differs from the chain.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clock import parse_time
from bot.controlhost import PURPOSE_DECISION, PURPOSE_RESUME, ReplayResult
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._requests import OPEN_STATES, DecisionRequest, content_hash
from bot.decisions._rules import ApproverDirectory, channel_allowed, person_of, same_person
from bot.errors import ControlHostError
from bot.messages import Mention, Message, Reply, Reporter
from bot.store import Step, Store
from bot.store.chain import KEYED_VERSION
from bot.vocab import Policy, RequestState

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
    actor: str, approvers: Sequence[str], directory: ApproverDirectory | None
) -> tuple[dict[str, Any] | None, str | None]:
    """What allows ``actor`` to approve now (RECOVER_APPROVERS), to be recorded with the approval.

    Returns (evidence, None) or (None, problem-or-None). Evidence kinds: ``any`` (no list is set),
    ``user`` (listed by id), ``group`` (a member of a listed user group, as read now).
    """
    if not approvers:
        return {"kind": "any"}, None
    if actor in approvers:
        return {"kind": "user", "id": actor}, None
    problem: str | None = None
    for group in (a for a in approvers if a.startswith("S")):
        if directory is None:
            problem = f"user group {group} cannot be resolved (no directory configured)"
            continue
        try:
            if actor in directory.members(group):
                return {"kind": "group", "id": group, "member": actor}, None
        except Exception as exc:  # noqa: BLE001 - any directory failure refuses, never allows
            problem = f"user group {group} could not be read: {type(exc).__name__}"
    return None, problem


def evidence_problem(actor: str, evidence: object, approvers: Sequence[str]) -> str | None:
    """Does the recorded evidence still allow ``actor`` under today's RECOVER_APPROVERS? No look-ups."""
    if not approvers:
        return None  # any other person may approve
    if not isinstance(evidence, Mapping):
        return "the approval records no evidence of what allowed the approver"
    kind, ident = evidence.get("kind"), evidence.get("id")
    if kind == "user" and ident == actor and actor in approvers:
        return None
    if kind == "group" and ident in approvers and evidence.get("member") == actor:
        return None
    # Readable, not a live mention: this reason is stored in the chain and the request table as it is.
    return f"the recorded evidence ({kind} {ident}) does not allow {Mention('@', actor)} under RECOVER_APPROVERS"


# -- reading the chain ------------------------------------------------------------------------------


def _request_steps(steps: Iterable[Step], request_id: str) -> list[Step]:
    out = []
    for s in steps:
        rid = (s.detail or {}).get("request_id") if s.step == REQUESTED else s.inputs.get("request_id")
        if rid == request_id:
            out.append(s)
    return out


def _intact(store: Store, step: Step, first_keyed: int | None) -> str | None:
    """The step matches its own hash, its link, and is keyed when the store was keyed before it."""
    if store.verify_step(step) is not True:
        return f"step {step.seq} ({step.step}) does not match its hash"
    prev = store.step_at(step.seq - 1) if step.seq > 1 else None
    if step.seq > 1 and (prev is None or prev.hash != step.prev_hash):
        return f"step {step.seq} ({step.step}) is not linked to the step before it"
    if store.keyed and step.v != KEYED_VERSION and first_keyed is not None and step.seq > first_keyed:
        return f"step {step.seq} ({step.step}) is not keyed although the chain was keyed before it"
    return None


def derive(
    store: Store,
    req: DecisionRequest,
    *,
    runbook_policy: str,
    approvers: Sequence[str],
    channels: Sequence[str],
    console_users: Mapping[str, str] | None = None,
) -> Authority:
    """The authority to send ``req``, from the chain alone; raises :class:`NoAuthority` with the reason."""
    console_users = console_users or {}
    steps = _request_steps(store.steps(session_id=req.session_id), req.id)
    requested = [s for s in steps if s.step == REQUESTED]
    if len(requested) != 1:
        raise NoAuthority(f"the chain has {len(requested)} request step(s) for {req.id}, not one")
    made = requested[0]
    chain_hash = (made.detail or {}).get("content_hash")
    if not chain_hash or content_hash(req.content()) != chain_hash or req.content_hash != chain_hash:
        raise NoAuthority(
            f"the stored request {req.id} differs from the content hash recorded in the chain (step {made.seq})"
        )
    if made.actor != req.requester or made.session_id != req.session_id:
        raise NoAuthority(
            f"the chain's request step {made.seq} was made by someone else or on another session"
        )
    if _STRICTNESS.get(req.policy, -1) < _STRICTNESS.get(runbook_policy, 2):
        raise NoAuthority(
            f"request {req.id} records the policy {req.policy!r}, weaker than the runbook's {runbook_policy!r} "
            f"for `{req.decision}`"
        )
    first_keyed = store.first_keyed_seq() if store.keyed else None
    problem = _intact(store, made, first_keyed)
    if problem:
        raise NoAuthority(problem)
    expires = parse_time(req.expires_at)
    two_person = req.policy == Policy.TWO_PERSON
    name = APPROVED if two_person else CONFIRMED
    reasons: list[str] = []
    for s in (s for s in steps if s.step == name):
        why = _approval_problem(s, made, req, chain_hash, expires, two_person, approvers, channels, console_users)
        why = why or _intact(store, s, first_keyed)
        if why is None:
            return Authority(
                request_id=req.id,
                content_hash=chain_hash,
                requester=made.actor,
                approver=s.actor,
                policy=req.policy,
                evidence=dict(s.inputs.get("allowed_by") or {}),
                requested_seq=made.seq,
                approval_seq=s.seq,
            )
        reasons.append(why)
    what = "approval by a second person" if two_person else "confirmation by its requester"
    if not reasons:
        raise NoAuthority(f"the chain records no {what} of {req.id}")
    raise NoAuthority(f"no valid {what} of {req.id} in the chain: {reasons[-1]}")


def _same_person_problem(s: Step, made: Step, console_users: Mapping[str, str]) -> str | None:
    """One person approving their own request under another name is refused, by the Slack ids the chain
    recorded (the requester's with the request, the approver's with the approval) and by today's
    RECOVER_CONSOLE_USERS; an approval by an unmapped console login is no approval."""
    if same_person(s.actor, made.actor, console_users):
        return f"step {s.seq} is the requester approving their own request"
    allowed_by = s.inputs.get("allowed_by")
    approver = allowed_by.get("person") if isinstance(allowed_by, Mapping) else None
    approver = approver or person_of(s.actor, console_users)
    if approver is None:
        return f"step {s.seq} is an approval by an unmapped console login ({s.actor})"
    requester = (made.detail or {}).get("person") or person_of(made.actor, console_users)
    if requester is not None and requester == approver:
        return f"step {s.seq} is the requester ({requester}) approving their own request under another name"
    return None


def _approval_problem(
    s: Step,
    made: Step,
    req: DecisionRequest,
    chain_hash: str,
    expires: datetime | None,
    two_person: bool,
    approvers: Sequence[str],
    channels: Sequence[str],
    console_users: Mapping[str, str],
) -> str | None:
    recorded_hash = s.inputs.get("content_hash")
    if recorded_hash is not None and recorded_hash != chain_hash:
        return f"step {s.seq} approved other content"
    if two_person and recorded_hash is None:
        return f"step {s.seq} does not name the content it approved"
    at = parse_time(s.at)
    if expires is None or at is None or at > expires:
        return f"step {s.seq} was recorded after the request expired ({req.expires_at})"
    if two_person:
        who = _same_person_problem(s, made, console_users)
        if who:
            return who
        allowed_by = s.inputs.get("allowed_by")
        person = allowed_by.get("person", s.actor) if isinstance(allowed_by, Mapping) else s.actor
        evidence = evidence_problem(person, allowed_by, approvers)
        if evidence:
            return f"step {s.seq}: {evidence}"
    elif s.actor != req.requester:
        return f"step {s.seq} is a confirmation by someone other than the requester"
    if not channel_allowed(s.inputs.get("channel"), channels):
        return f"step {s.seq} was given outside the recovery channels"
    return None


# -- the guard before every send ---------------------------------------------------------------------

log = logging.getLogger("bot.decisions")


class AuthorityGuard:
    """``authorise`` before every send; ``replay_vouched`` instead of a blind start-up replay."""

    def __init__(self, ctx: DecisionContext) -> None:
        self.ctx = ctx

    def authorise(self, req: DecisionRequest, actor: str, reporter: Reporter) -> Reply | None:
        """None when the chain authorises sending ``req``; otherwise void it, say why, send nothing."""
        try:
            derive(
                self.ctx.store,
                req,
                runbook_policy=self.ctx.policy(req.decision).approval,
                approvers=self.ctx.approvers,
                channels=self.ctx.channels,
                console_users=self.ctx.console_users,
            )
            return None
        except NoAuthority as exc:
            reason = exc.reason
        log.warning("refused to send %s (%s on %s): %s", req.id, req.decision, req.session_id, reason)
        with self.ctx.store.write() as db:
            self.ctx.requests.transition(
                db,
                req.id,
                tuple(s for s in OPEN_STATES if s != RequestState.VOID),
                RequestState.VOID,
                actor=BOT_ACTOR,
                decided_by=BOT_ACTOR,
                decided_at=self.ctx.iso(),
                note=f"no authority in the chain: {reason}",
            )
            self.ctx.store.record_step(
                req.session_id,
                BOT_ACTOR,
                "decision_refused_no_authority",
                {"request_id": req.id, "by": actor},
                "refused",
                detail={"why": reason},
                db=db,
            )
        msg = text.refusal(
            f"`{req.decision}` on `{req.session_id}` was not sent: the step log does not authorise {req.id}",
            reason,
            "The request tables may have been edited by hand: run `recover-bot audit verify`, "
            "then make a new request if it is still needed.",
            session_id=req.session_id,
        )
        reporter.post(msg)
        return Reply.of(msg, ok=False)

    def replay_vouched(self) -> tuple[list[ReplayResult], list[Message]]:
        """Re-send stored resume requests the chain recorded; decisions go through their own request
        (``_resend``, with the authority check). A record no step vouches for is never sent."""
        sent: list[ReplayResult] = []
        refused: list[Message] = []
        for record in self.ctx.store.unfinished_requests():
            if record.purpose == PURPOSE_DECISION:
                continue
            step = next(
                (
                    s
                    for s in self.ctx.store.steps(session_id=record.session_id)
                    if s.idempotency_key == record.key
                ),
                None,
            )
            if record.purpose != PURPOSE_RESUME or step is None or self.ctx.store.verify_step(step) is not True:
                log.warning(
                    "not re-sending %s %s (%s): no intact step records it",
                    record.method,
                    record.path,
                    record.key,
                )
                refused.append(
                    text.refusal(
                        f"A stored {record.purpose} request on `{record.session_id}` was not re-sent: "
                        "no step of the log records it",
                        "Check the step store with `recover-bot audit verify`.",
                        session_id=record.session_id,
                    )
                )
                continue
            try:
                sent.append(ReplayResult(record, receipt=self.ctx.client.send(record)))
            except ControlHostError as exc:
                log.info("re-sending %s: %s", record.key, exc.code)
                sent.append(ReplayResult(record, error=exc))
        return sent, refused
