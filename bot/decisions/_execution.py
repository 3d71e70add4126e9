"""Execution: an approved request re-checked on fresh facts and sent exactly once.

Why its own room: every path that sends a decision — approval, confirmation, the effects re-check,
the R3.9 wait, a restart — ends here, so the last checks live in one place: the decisive facts are
compared again (a change voids the approval), the runbook must still expect acceptance, the chain
must authorise the send, and ``expected_revision`` comes from that same fresh diagnosis. The move
``→ sending``, the idempotency record (the client's ``begin``: new key, exact body) and the step
commit together; only then does the client's ``send`` post it. The answer is settled by
:class:`bot.decisions._outcomes.Outcomes`; a request left ``waiting`` gets the R3.9 wait.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bot.clock import parse_time
from bot.controlhost import PURPOSE_DECISION
from bot.decisions import _text as text
from bot.decisions._authority import Gate
from bot.decisions._context import DecisionContext
from bot.decisions._outcomes import Outcomes
from bot.decisions._policy import WAITABLE, flags_of
from bot.decisions._requests import DecisionRequest
from bot.decisions._rules import changed_facts, decisive_facts
from bot.decisions._waits import Interruptible, WorkerGoneWait, observation
from bot.decisions._watch import BEFORE, before_send
from bot.errors import ControlHostError, RecoverError, StoreError
from bot.messages import Message, Reply, Reporter
from bot.runbook.usage import typed_line
from bot.store import IdempotencyRecord
from bot.store.leases import LeaseLost
from bot.vocab import RequestState, Step

log = logging.getLogger("bot.decisions")


class ExecutionRoom:
    """Send once: what the lifecycle rooms call once a request is approved (their ``Execution``)."""

    def __init__(self, ctx: DecisionContext, gate: Gate, outcomes: Outcomes, interruptible: Interruptible) -> None:
        self.ctx = ctx
        self.gate = gate
        self.outcomes = outcomes
        self.interruptible = interruptible
        self.waits = WorkerGoneWait(ctx, self.check_and_send, interruptible)

    def execute(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        """``approved → sending``; Ctrl-C on the way withdraws it unless a send is in doubt."""
        with self.interruptible(request_id, actor):
            req = self.ctx.requests.get(request_id)
            if req is None or req.state != RequestState.APPROVED:
                return Reply.of(text.refusal(text.state_text(req) if req else f"no request {request_id}"), ok=False)
            return self.send_fresh(
                req,
                actor,
                reporter,
                from_state=RequestState.APPROVED,
                retry=f"`{typed_line('approve', req.id)}` retries; a restarted bot also finishes it.",
            )

    def send_fresh(self, req: DecisionRequest, actor: str, reporter: Reporter, *, from_state: str, retry: str) -> Reply:
        """A fresh diagnosis, then check-and-send from ``from_state`` (the approval and the effects
        re-check both end here); an unreadable session sends nothing and says how to ``retry``."""
        sid = req.session_id
        try:
            facts, turn_status = self.ctx.diagnose(sid, req.turn_id)
        except RecoverError as exc:
            return Reply.of(
                text.refusal(
                    f"request {req.id} is {from_state} but the session could not be read: {exc.message}",
                    f"Nothing was sent. {retry}",
                    session_id=sid,
                ),
                ok=False,
            )
        reply = self.check_and_send(req, actor, facts, turn_status, reporter, from_state=from_state)
        return self.after_submit(req.id, actor, reply, reporter)

    def after_submit(self, request_id: str, actor: str, reply: Reply, reporter: Reporter) -> Reply:
        """A request left ``waiting`` (the worker is not confirmed gone, R3.9) gets the bounded wait.

        Called only from the top of an execution path, never from inside a send: the wait is a loop,
        not a recursion (a second RECOVERY_REQUIRED goes back to the same loop).
        """
        req = self.ctx.requests.get(request_id)
        if req is None or req.state != RequestState.WAITING:
            return reply
        waited = self.waits.wait(request_id, actor, reporter)
        return Reply([*reply.messages, *waited.messages], ok=waited.ok)

    def needs_recheck(self, req: DecisionRequest, facts: Mapping[str, Any]) -> bool:
        """R3.9 then R3.10: an effects account written while the worker could still act is re-checked
        once the worker is confirmed gone, before anything is sent."""
        if not self.ctx.policy(req.decision).spec.effects_recheck:
            return False
        if facts.get("execution.confirmed_gone") is not True:
            return False
        account_at = parse_time(req.rechecked_at or req.created_at)
        gone_at = parse_time(facts.get("execution.confirmed_gone_at"))
        written_after_gone = req.rechecked_at is not None or req.shown_facts.get("execution.confirmed_gone") is True
        if not written_after_gone:
            return True
        return gone_at is not None and account_at is not None and gone_at > account_at

    def check_and_send(
        self,
        req: DecisionRequest,
        actor: str,
        facts: Mapping[str, Any],
        turn_status: str | None,
        reporter: Reporter,
        *,
        from_state: str,
    ) -> Reply:
        """The last checks on fresh facts; void, wait (R3.9), ask the effects re-check (R3.10), or send."""
        ctx = self.ctx
        sid = req.session_id
        policy = ctx.policy(req.decision)
        flags = flags_of(req)
        changes = changed_facts(req.facts, decisive_facts(facts, turn_status))
        verdict = ctx.verdict(policy, facts, flags)
        revision = facts.get("session.revision")
        why: list[str] = []
        if changes:
            why = ["The session's decisive facts changed since the request:", *(f"  {c}" for c in changes)]
        elif not verdict.ok and verdict.code != WAITABLE:
            why = [f"The runbook no longer expects it to be accepted: {verdict.reason} ({verdict.code})"]
        elif not isinstance(revision, int):
            why = [
                f"The session's revision is unknown (source.session {facts.get('source.session')}): "
                "expected_revision cannot be set."
            ]
        if why:
            return self.void(req, actor, from_state, changes, why)
        if verdict.code == WAITABLE:
            # R3.9: the runbook already says 409 RECOVERY_REQUIRED: nothing is sent; wait for the pass.
            if from_state != RequestState.WAITING:
                with ctx.store.write() as db:
                    ctx.requests.transition(
                        db,
                        req.id,
                        (from_state,),
                        RequestState.WAITING,
                        actor=actor,
                        error_code=WAITABLE,
                        note=verdict.reason,
                    )
            return Reply.of(
                Message(
                    headline=f"`{req.decision}` on `{sid}` waits: {verdict.reason}",
                    level="progress",
                    lines=["Nothing was sent: the control host would answer 409 RECOVERY_REQUIRED (R3.9)."],
                    rules=["R3.9"],
                    session_id=sid,
                )
            )
        if self.needs_recheck(req, facts):
            return self.ask_recheck(req, actor, facts, from_state)
        method, path, body = policy.request(sid, facts, flags)
        return self.send(
            req, actor, method, path, body, reporter, from_state=from_state, seen=observation(facts), before=facts
        )

    def void(self, req: DecisionRequest, actor: str, from_state: str, changes: list[str], why: list[str]) -> Reply:
        """The approval no longer holds: ``→ void`` with every reason; nothing is sent."""
        ctx = self.ctx
        sid = req.session_id
        with ctx.store.write() as db:
            if ctx.requests.transition(
                db,
                req.id,
                (from_state,),
                RequestState.VOID,
                decided_by=actor,
                decided_at=ctx.iso(),
                note="; ".join(why),
            ):
                ctx.record(
                    sid,
                    actor,
                    Step.DECISION_VOID,
                    {"request_id": req.id},
                    RequestState.VOID,
                    detail={"changes": changes, "why": why},
                    db=db,
                )
        fresh = ctx.requests.get(req.id) or req
        msg = text.refusal(
            f"the approval of {req.id} is void: nothing was sent",
            *why,
            f"Look again (`{typed_line('diagnose', sid)}`) and make a new request.",
            session_id=sid,
        )
        # Every changed fact, not only the first line: the approver must see all that moved.
        outcome = "void: facts changed: " + "; ".join(changes) if changes else "void: " + why[0]
        return Reply([text.updated_request_message(fresh, outcome, "error"), msg], ok=False)

    def ask_recheck(self, req: DecisionRequest, actor: str, facts: Mapping[str, Any], from_state: str) -> Reply:
        """R3.9/R3.10: the worker is gone now; ask in the case thread for the effects re-check."""
        ctx = self.ctx
        with ctx.store.write() as db:
            won = ctx.requests.transition(
                db, req.id, (from_state,), RequestState.RECHECK, actor=actor, note="effects re-check asked"
            )
            if won:
                ctx.requests.mark(db, req.id, gone_seen_at=observation(facts))
        fresh = ctx.requests.get(req.id) or req
        if not won:
            return Reply.of(text.refusal(text.state_text(fresh)), ok=False)
        gone_at = facts.get("execution.confirmed_gone_at")
        return Reply.of(text.recheck_message(fresh, gone_at, irreversible=ctx.irreversible(fresh.decision)))

    def send(
        self,
        req: DecisionRequest,
        actor: str,
        method: str,
        path: str,
        body: Mapping[str, Any],
        reporter: Reporter,
        *,
        from_state: str,
        seen: str | None = None,
        before: Mapping[str, Any] | None = None,
    ) -> Reply:
        """Compare-and-set to sending together with the idempotency record and the step; then send.

        ``seen`` is the confirmed-gone observation this submission is made for (R3.9): a 409
        RECOVERY_REQUIRED on it waits for the next one instead of re-submitting. ``before``: the read
        the send is made on; what verification judges later reads against is kept with the step (R5.1).
        """
        ctx = self.ctx
        refused = self.gate.authorise(req, actor, reporter)
        if refused is not None:
            return refused
        # One commit: the move to sending, the record (the client's key rule: new key, exact body,
        # stored before any send) and the step; a crash leaves all of them or none.
        with ctx.store.write() as db:
            current = ctx.requests.get(req.id, db=db)
            record: IdempotencyRecord | None = None
            if current is not None and current.state == from_state:
                record = ctx.client.begin(method, path, body, PURPOSE_DECISION, session_id=req.session_id, db=db)
                ctx.sends.take(db, record.key)  # held from the commit that stores the key
                if not ctx.requests.transition(
                    db, req.id, (from_state,), RequestState.SENDING, actor=actor, idem_key=record.key, body=record.body
                ):
                    raise StoreError(f"request {req.id} moved inside its own write transaction")
                ctx.requests.count_sends(db, req.id)
                if seen is not None:
                    ctx.requests.mark(db, req.id, gone_seen_at=seen)
                ctx.record(
                    req.session_id,
                    actor,
                    Step.DECISION_SENDING,
                    {"request_id": req.id, "method": method, "path": path, "body": dict(body)},
                    RequestState.SENDING,
                    detail={BEFORE: before_send(before)} if before is not None else None,
                    idempotency_key=record.key,
                    db=db,
                )
        if record is None:
            return Reply.of(text.refusal(text.state_text(ctx.requests.get(req.id) or req)), ok=False)
        return self.deliver(req.id, actor, record, reporter)

    def deliver(self, request_id: str, actor: str, record: IdempotencyRecord, reporter: Reporter) -> Reply:
        """Send a stored request (same key, same body) through the gate and settle the request from the
        answer; the gate sends it only when the chain authorises the request and exactly this record.

        The whole delivery holds the record's send lease, so the answer is recorded under it (fenced):
        a live send at another bot is not sent again here, and a holder deposed while it waited records
        nothing (the new holder's result stands)."""
        try:
            with self.ctx.sends.hold(record.key) as holding:
                if holding is None:
                    return Reply.of(text.in_flight_elsewhere(request_id))
                req = self.ctx.requests.get(request_id)
                assert req is not None
                try:
                    sent = self.gate.send_decision(req, actor, record, reporter)
                except ControlHostError as exc:
                    return self.outcomes.on_error(req, actor, exc, reporter)
                if isinstance(sent, Reply):
                    return sent
                return self.outcomes.on_accepted(req, actor, sent)
        except LeaseLost as exc:
            log.warning("request %s: %s", request_id, exc.message)
            return Reply.of(text.in_flight_elsewhere(request_id, deposed=True))
