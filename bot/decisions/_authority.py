"""THE gate: every POST to the control host passes here, with its authority re-derived from the chain.

Every path that sends — a decision's approval or confirmation, ``decide --yes``, the effects re-check,
the R3.9 wait, the background finishing of an uncertain send, a restart's replay, a resume and its
R4.2 ride-out, each member of a batch — calls :class:`Gate`, and only the gate calls the client's
``send`` (tests/gate/test_one_gate.py holds every other module to that). Nothing a table says is
taken on trust (docs/requests.md, "What the gate trusts"):


- the ``decision_requested`` step, by the requester, whose content hash the stored content matches;
- a policy at least as strict as the runbook's for that decision;
- for two-person decisions a ``decision_approved`` step by someone else, over that content hash,
  before the expiry, in an allowed channel, with the evidence that allowed the approver *as seen
  when they approved* (group look-ups are not repeated here) — or, in its place and nothing else, a
  verified ``break_glass`` step by the requester preceded by its ``break_glass_announced`` step
  (bot/decisions/_glassproof.py); for the others a ``decision_confirmed`` step by the requester;
- each of those steps matching its own hash and link (keyed, when the store has a key), and the store
  still keyed when it has a key (bot/store/keymark.py);
- the store's installation binding equal to the client's host right now (bot/store/binding.py), and
  every step, the request and the stored record's key of the store's installation;
- the stored idempotency record (method, path, body, key) equal to what the chain's sending step
  recorded for that key (``decision_sending``, ``resume_requested``), or for a batch member to the
  request rebuilt from the batch's chain-authorised content.

People are derived by one identity function (``person_of``: a Slack id, a console login's mapped id,
an unmapped login is nobody), approvers by one rule (:func:`evidence_problem`), expiry by one rule.

The reading of the chain itself is in bot/decisions/_proof.py. Anything missing is a refusal with a
one-line reason; nothing is sent. :func:`check_request_table` is the same reading for ``audit verify``:
it names every cached row that differs from the chain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from bot.controlhost import PURPOSE_DECISION, PURPOSE_RESUME, Permit, Receipt, ReplayResult

# The gate alone holds the seal that makes a Permit, the one value the client's send accepts.
from bot.controlhost._permit import _GATE_SEAL
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._ladder_rows import fence
from bot.decisions._proof import (
    _BATCH,
    APPROVED,
    BOT_ACTOR,
    CONFIRMED,
    REQUESTED,
    Authority,
    BatchClaim,
    BatchGrant,
    Claim,
    NoAuthority,
    _prove,
    approval_evidence,
    approval_evidence_of,
    batch_policy,
    derive,
    evidence_problem,
    installation_problem,
    record_problem,
    request_claim,
    sending_step,
)
from bot.decisions._requests import OPEN_STATES, DecisionRequest
from bot.decisions._sendlease import SendInFlight
from bot.errors import ControlHostError
from bot.ids import installation_of_id
from bot.messages import Message, Reply, Reporter
from bot.store import IdempotencyRecord, Step, binding
from bot.store.leases import LeaseLost
from bot.vocab import RequestState
from bot.vocab import Step as StepName

__all__ = [
    "APPROVED",
    "BOT_ACTOR",
    "CONFIRMED",
    "REQUESTED",
    "Authority",
    "AuthorityGuard",
    "BatchClaim",
    "BatchGrant",
    "Claim",
    "Gate",
    "NoAuthority",
    "approval_evidence",
    "approval_evidence_of",
    "batch_policy",
    "derive",
    "evidence_problem",
    "record_problem",
    "request_claim",
    "sending_step",
]

# -- the gate ---------------------------------------------------------------------------------------

log = logging.getLogger("bot.decisions")


class Gate:
    """The one way to the control host's POSTs: each ``send_*`` proves, then sends; nothing else sends.

    ``authorise`` is the same proof before a new record is stored (the decision's fresh send);
    ``batch_grant`` proves a batch once per chunk, ``send_member`` checks each member's record against
    it; ``replay_vouched`` re-sends at start only what a resume step of the chain recorded.
    """

    def __init__(self, ctx: DecisionContext) -> None:
        self.ctx = ctx

    # -- proofs --------------------------------------------------------------------------------

    def _still_keyed(self) -> None:
        """The store is still keyed (when it has a key) and still bound to this client's host."""
        why = self.ctx.store.keyed_problem() or self._unbound()
        if why is not None:
            raise NoAuthority(why)

    def _unbound(self, record: IdempotencyRecord | None = None) -> str | None:
        """The store's binding is not the client's host right now (bot/store/binding.py), or the stored
        record's key is another installation's."""
        identity = self.ctx.client.identity
        why = binding.problem(self.ctx.store, identity.base_url, identity.key_sha256)
        if why is None and record is not None:
            why = installation_problem(
                self.ctx.store, f"the stored request {record.key}", installation_of_id(record.key)
            )
        return why

    def _first_keyed(self) -> int | None:
        return self.ctx.store.first_keyed_seq() if self.ctx.store.keyed else None

    def prove_request(self, req: DecisionRequest, record: IdempotencyRecord | None = None) -> Authority:
        """The chain's authority for ``req`` (and, given, for exactly this stored record)."""
        ctx = self.ctx
        self._still_keyed()
        authority = derive(
            ctx.store,
            req,
            runbook_policy=ctx.policy(req.decision).approval,
            approvers=ctx.approvers,
            channels=ctx.channels,
            console_users=ctx.console_users,
            escalation=ctx.runbooks.escalation,
        )
        if record is not None:
            if record.purpose != PURPOSE_DECISION or record.session_id != req.session_id or record.key != req.idem_key:
                raise NoAuthority(f"the stored request {record.key} is not the one request {req.id} is sent with")
            step, inputs = sending_step(
                ctx.store, req.session_id, record.key, StepName.DECISION_SENDING, self._first_keyed()
            )
            if inputs.get("request_id") != req.id or step.seq < authority.approval_seq:
                raise NoAuthority(f"the sending step {step.seq} does not follow the approval of {req.id}")
            self._vouched(record, step, inputs, req.decision, req.session_id)
            why = self._unbound(record)
            if why:
                raise NoAuthority(why)
        return authority

    def _vouched(
        self, record: IdempotencyRecord, step: Step, inputs: Mapping[str, Any], decision: str, session_id: str
    ) -> None:
        """The record is what ``step`` recorded, and that is the runbook's method and path for it."""
        if not {"method", "path", "body"} <= set(inputs):
            raise NoAuthority(f"step {step.seq} ({step.step}) does not record the request it was stored with")
        problem = record_problem(record, inputs["method"], inputs["path"], inputs["body"], where=f"step {step.seq}")
        method, path = self._shape(decision, session_id)
        if problem is None and (inputs["method"], inputs["path"]) != (method, path):
            problem = f"step {step.seq} records {inputs['method']} {inputs['path']}, not the runbook's {method} {path}"
        if problem:
            raise NoAuthority(problem)

    def _shape(self, decision: str, session_id: str) -> tuple[str, str]:
        """The method and path the runbook gives ``decision`` on ``session_id``."""
        spec = self.ctx.policy(decision).spec.request
        return spec.method, spec.path.replace("{session_id}", session_id)

    def batch_grant(self, batch: BatchClaim) -> BatchGrant:
        """The chain's authority for a batch (its members bound as requested); raises NoAuthority."""
        ctx = self.ctx
        self._still_keyed()
        required = batch_policy(ctx, batch.decision, len(batch.members))
        authority = _prove(
            ctx.store,
            batch.claim,
            _BATCH,
            ctx.store.steps(),
            runbook_policy=required,
            approvers=ctx.approvers,
            channels=ctx.channels,
            console_users=ctx.console_users,
        )
        return BatchGrant(batch, authority)

    # -- sends ---------------------------------------------------------------------------------

    def _post(self, record: IdempotencyRecord) -> Receipt:
        """The only call of the client's ``send`` in the bot: a record the caller just proved, under
        the permit only the gate can make, while this bot holds the record's send lease (the caller's,
        when it holds it already). Raises :class:`SendInFlight` when another bot's
        send of it is live: nothing is sent. The client records the answer fenced by that lease."""
        sends = self.ctx.sends
        with sends.hold(record.key) as holding:
            if holding is None:
                raise SendInFlight(f"the stored request {record.key} is being sent by another bot: not sent here")
            return self.ctx.client.send(Permit(record, _GATE_SEAL, fence=sends.fencer(record.key)))

    def send_decision(
        self, req: DecisionRequest, actor: str, record: IdempotencyRecord, reporter: Reporter
    ) -> Receipt | Reply:
        """Send a decision's stored record if the chain authorises exactly it; else void, say, send nothing.

        Raises the client's ControlHostError when sent without a definite answer or refused."""
        try:
            self.prove_request(req, record)
        except NoAuthority as exc:
            return self.refuse(req, actor, reporter, exc.reason)
        return self._post(record)

    def send_resume(self, record: IdempotencyRecord) -> Receipt:
        """Send a stored resume the chain's ``resume_requested`` step recorded (same key, method, path,
        body); raises NoAuthority otherwise. A resume needs no approval (its policy is none)."""
        self._still_keyed()
        if record.purpose != PURPOSE_RESUME or not record.session_id:
            raise NoAuthority(f"the stored request {record.key} is not a resume")
        step, inputs = sending_step(
            self.ctx.store, record.session_id, record.key, StepName.RESUME_REQUESTED, self._first_keyed()
        )
        self._vouched(record, step, inputs, "resume", record.session_id)
        why = self._unbound(record)
        if why:
            raise NoAuthority(why)
        return self._post(record)

    def send_member(self, grant: BatchGrant, session_id: str, record: IdempotencyRecord) -> Receipt:
        """Send one member's stored record if it is exactly the request its bound facts give; raises
        NoAuthority otherwise (a member, a body or a path the approved batch never named)."""
        batch = grant.batch
        facts = batch.members.get(session_id)
        if facts is None or record.session_id != session_id or record.purpose != PURPOSE_DECISION:
            raise NoAuthority(f"{session_id} is not a member of batch {batch.claim.ident}")
        method, path, body = self.ctx.policy(batch.decision).request(session_id, facts, {"reason": batch.reason})
        problem = record_problem(record, method, path, body, where=f"batch {batch.claim.ident}'s approved content")
        problem = problem or self._unbound(record)  # the grant is per chunk; the binding is checked per member
        if problem:
            raise NoAuthority(problem)
        return self._post(record)

    # -- refusals ------------------------------------------------------------------------------

    def authorise(self, req: DecisionRequest, actor: str, reporter: Reporter) -> Reply | None:
        """None when the chain authorises sending ``req``; otherwise void it, say why, send nothing."""
        try:
            self.prove_request(req)
            return None
        except NoAuthority as exc:
            return self.refuse(req, actor, reporter, exc.reason)

    def refuse(self, req: DecisionRequest, actor: str, reporter: Reporter, reason: str) -> Reply:
        """``→ void`` with a recorded refusal; posted and returned."""
        log.warning("refused to send %s (%s on %s): %s", req.id, req.decision, req.session_id, reason)
        fence(self.ctx.store, self.ctx.clock, req.id)  # no ladder step after the void
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

    def replay_vouched(
        self, only: Callable[[IdempotencyRecord], bool] | None = None
    ) -> tuple[list[ReplayResult], list[Message]]:
        """Re-send stored resume requests the chain recorded (``only`` those it accepts: the periodic
        job's left ones); decisions go through their own request (``_resend``, with the authority
        check). A record no step vouches for is never sent."""
        sent: list[ReplayResult] = []
        refused: list[Message] = []
        for record in self.ctx.store.unfinished_requests():
            if record.purpose == PURPOSE_DECISION or (only is not None and not only(record)):
                continue
            try:
                sent.append(ReplayResult(record, receipt=self.send_resume(record)))
            except NoAuthority as exc:
                log.warning("not re-sending %s %s (%s): %s", record.method, record.path, record.key, exc.reason)
                refused.append(
                    text.refusal(
                        f"A stored {record.purpose} request on `{record.session_id}` was not re-sent: "
                        "no step of the log records it as stored",
                        exc.reason,
                        "Check the step store with `recover-bot audit verify`.",
                        session_id=record.session_id,
                    )
                )
            except ControlHostError as exc:
                log.info("re-sending %s: %s", record.key, exc.code)
                sent.append(ReplayResult(record, error=exc))
            except LeaseLost as exc:  # its sender is alive (or took it over): its result stands
                log.info("not re-sending %s: %s", record.key, exc.message)
        return sent, refused


# Kept for callers that name the guard.
AuthorityGuard = Gate
