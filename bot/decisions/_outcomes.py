"""Settling a sent decision from the control host's answer: executed, failed, waiting or uncertain.

Why its own room: the answer to one stored request arrives on several paths — the first send, a
background re-send of an uncertain one, a restart's re-send — and each must settle it the same way:
a receipt moves ``sending``/``uncertain → executed`` and is verified (R5.1); a definite refusal moves
it to ``failed`` with the runbook's advice; 409 RECOVERY_REQUIRED moves it to ``waiting`` (R3.9);
no definite answer keeps its key and is finished in the background (R0.3). Every move is a
compare-and-set, so of two processes settling one request only one records it.
"""

from __future__ import annotations

from sqlite_utils import Database

from bot.controlhost import Receipt
from bot.decisions import _text as text
from bot.decisions._authority import Gate
from bot.decisions._context import BOT, DecisionContext
from bot.decisions._policy import WAITABLE, flags_of
from bot.decisions._requests import DecisionRequest
from bot.decisions._uncertain import UncertainSends, is_uncertain
from bot.decisions._verify import Verifier
from bot.errors import ControlHostError, RecoverError
from bot.messages import Message, Reply, Reporter, ref
from bot.vocab import Policy, RequestState, Step


class Outcomes:
    """What an answer (or its absence) does to a request; owns the background finishing of uncertain ones."""

    def __init__(self, ctx: DecisionContext, gate: Gate, verifier: Verifier) -> None:
        self.ctx = ctx
        self.verifier = verifier
        self.uncertain = UncertainSends(ctx, gate, self.on_accepted, self.on_error)

    def fenced(self, db: Database, req: DecisionRequest) -> None:
        """In the transaction that records the host's answer: LeaseLost unless this bot holds the send's
        lease (a deposed holder records nothing)."""
        if req.idem_key:
            self.ctx.sends.fence(db, req.idem_key)

    def on_accepted(self, req: DecisionRequest, actor: str, receipt: Receipt) -> Reply:
        ctx = self.ctx
        result = {
            "receipt_id": receipt.id,
            "status": receipt.status,
            "revision": receipt.session.revision if receipt.session else None,
            "resumable": receipt.resumable,
        }
        status = receipt.http_status or 200
        with ctx.store.write() as db:
            self.fenced(db, req)
            won = ctx.requests.transition(
                db,
                req.id,
                (RequestState.SENDING, RequestState.UNCERTAIN),
                RequestState.EXECUTED,
                actor=actor,
                receipt_id=receipt.id,
                http_status=status,
                result=result,
            )
            if won:
                ctx.record(
                    req.session_id,
                    actor,
                    Step.DECISION_EXECUTED,
                    {"request_id": req.id},
                    str(receipt.status or "accepted"),
                    detail=result,
                    http_status=status,
                    idempotency_key=req.idem_key,
                    receipt_id=receipt.id,
                    db=db,
                )
        fresh = ctx.requests.get(req.id) or req
        by = f"approved by {ref(fresh.approved_by or '?')}" if fresh.policy == Policy.TWO_PERSON else "confirmed"
        if fresh.policy == Policy.TWO_PERSON and fresh.approved_by == fresh.requester:
            by = f"sent by break-glass by {ref(fresh.requester)}, a review is open"  # the gate saw its step
        head = text.updated_request_message(fresh, f"executed ({by}); receipt {receipt.id}", "ok")
        if not won:
            return Reply.of(head)  # another process settled it and verified it
        verification = self.verifier.verify(
            req.session_id, actor, ctx.policy(req.decision), flags_of(req), receipt, request_id=req.id
        )
        return Reply([head, *verification.messages])

    def verify_left(self, req: DecisionRequest) -> Reply | None:
        """R5.1 for an executed request whose verification never ran: the bot that sent it stopped between
        recording the host's answer and reading the session again. Verified now from its stored receipt,
        under its send lease (the sending bot holds it until its own verification is recorded, so a
        live one is never doubled). None when it was verified, or another bot holds the lease."""
        ctx = self.ctx
        executed = verified = 0
        for step in ctx.store.steps(session_id=req.session_id):
            if step.step == Step.DECISION_EXECUTED and step.inputs.get("request_id") == req.id:
                executed = step.seq
            elif step.step == Step.VERIFICATION:
                verified = step.seq
        record = ctx.store.get_request(req.idem_key) if req.idem_key else None
        if not executed or verified > executed or record is None or record.pending:
            return None
        # The host's stored answer, as batch verification reads it (bot/batch/verifying.py).
        receipt = Receipt.parse(record.response, http_status=record.http_status, idempotency_key=record.key)
        with ctx.sends.hold(record.key) as holding:
            if holding is None:
                return None
            return self.verifier.verify(
                req.session_id, BOT, ctx.policy(req.decision), flags_of(req), receipt, request_id=req.id
            )

    def on_error(self, req: DecisionRequest, actor: str, exc: ControlHostError, reporter: Reporter) -> Reply:
        ctx = self.ctx
        sid = req.session_id
        status = exc.status
        if is_uncertain(exc):
            # Uncertain: the stored key and body are re-sent in the background, never a new key (R0.3).
            return self.uncertain.start(req, actor, exc, reporter)
        if exc.code == WAITABLE:
            return self.to_waiting(req, actor, exc)
        policy = ctx.policy(req.decision)
        flags = flags_of(req)
        try:
            facts, _ = ctx.diagnose(sid, req.turn_id)
        except RecoverError:
            facts = {}
        advice = policy.advice(exc.code, facts, flags, ctx.runbooks)
        lines = [exc.message]
        rules = list(advice.rules) if advice else list(policy.rules)
        if advice:
            lines.append(advice.text)
        if exc.code == "REQUEST_STALE":
            # Which state would make it valid: the runbook's acceptance checks, and the one failing now.
            now = ctx.verdict(policy, facts, flags) if facts else None
            lines.append("It is accepted when: " + ", ".join(policy.accepted_when()) + ".")
            if now is not None and not now.ok:
                lines.append(f"Now failing: {now.reason} ({now.code}).")
            elif now is not None:
                lines.append(
                    "The facts look valid again: the revision moved; decide anew for a fresh expected_revision."
                )
        if exc.code == "CHECKPOINT_UNAVAILABLE":
            lines.append(
                f"No committed checkpoint covers turn {req.turn_id or 'unknown'}: consider `abandon` "
                "(after checking the turn's external effects, R3.10), or `close`."
            )
        with ctx.store.write() as db:
            self.fenced(db, req)
            if ctx.requests.transition(
                db,
                req.id,
                (RequestState.SENDING, RequestState.UNCERTAIN),
                RequestState.FAILED,
                actor=actor,
                http_status=status,
                error_code=exc.code,
                note=exc.code,
            ):
                ctx.record(
                    sid,
                    actor,
                    Step.DECISION_REFUSED_BY_API,
                    {"request_id": req.id},
                    exc.code,
                    detail={"message": exc.message, "advice": lines[1:]},
                    http_status=status,
                    idempotency_key=req.idem_key,
                    db=db,
                )
        fresh = ctx.requests.get(req.id) or req
        return Reply(
            [
                text.updated_request_message(fresh, f"refused by the control host: {exc.code}", "error"),
                Message(
                    headline=f"The control host refused `{req.decision}` on `{sid}`: {status} {exc.code}",
                    level="error",
                    lines=lines,
                    rules=rules,
                    session_id=sid,
                ),
            ],
            ok=False,
        )

    def to_waiting(self, req: DecisionRequest, actor: str, exc: ControlHostError) -> Reply:
        """R3.9: 409 RECOVERY_REQUIRED ends this logical request; the next is made after the next pass.

        Only a state change: whoever started the execution runs the (one, bounded) wait loop.
        """
        ctx = self.ctx
        sid = req.session_id
        with ctx.store.write() as db:
            self.fenced(db, req)
            ctx.requests.transition(
                db,
                req.id,
                (RequestState.SENDING, RequestState.UNCERTAIN),
                RequestState.WAITING,
                actor=actor,
                http_status=exc.status,
                error_code=exc.code,
            )
            ctx.record(
                sid,
                actor,
                Step.DECISION_REFUSED_BY_API,
                {"request_id": req.id},
                exc.code,
                detail={"message": exc.message, "next": "wait for the next confirmed-gone observation"},
                http_status=exc.status,
                idempotency_key=req.idem_key,
                db=db,
            )
        return Reply.of(
            Message(
                headline=f"`{req.decision}` on `{sid}`: 409 RECOVERY_REQUIRED — the previous worker is not yet "
                "confirmed gone",
                level="progress",
                lines=[exc.message],
                rules=["R3.9"],
                session_id=sid,
            )
        )
