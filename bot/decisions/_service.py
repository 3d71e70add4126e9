"""DecisionService: decide, the two-person rule, execution exactly once, verification, resume, cases.

Plain Python, no Slack: the Slack app and the console both reach it through the router, so no front
end can skip a rule. Every method returns a :class:`bot.messages.Reply`; slow work (waits, resume)
reports through a :class:`bot.messages.Reporter`. Time comes from the injected clock only.

Exactly once, whatever happens to the network or the process:
- approval is a compare-and-set ``pending → approved`` in the database (one winner across processes);
- execution is a second compare-and-set ``approved → sending`` that stores the Idempotency-Key and
  the exact body *before* the idempotency record is written and anything is sent; ``expected_revision``
  comes from the same fresh diagnosis that compared the decisive facts;
- after a crash :meth:`recover_after_restart` finishes ``approved`` requests (fresh facts check) and
  re-sends ``sending``/``uncertain`` ones with their stored key and body, so the API sees one logical request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from bot.clock import Clock, isoformat, parse_time
from bot.controlhost import PURPOSE_DECISION, PURPOSE_RESUME, ControlHostClient, ReplayResult
from bot.decisions import _text as text
from bot.decisions._approvals import ApprovalRoom
from bot.decisions._authority import AuthorityGuard
from bot.decisions._cases import CaseBook
from bot.decisions._context import BOT as BOT_ACTOR
from bot.decisions._context import DecisionContext
from bot.decisions._decide import DecideRoom
from bot.decisions._guards import expire_if_due, is_requester
from bot.decisions._policy import WAITABLE, DecisionPolicy, Limits
from bot.decisions._policy import flags_of as _flags
from bot.decisions._requests import IN_FLIGHT_STATES, DecisionRequest
from bot.decisions._rules import ID_RE, ApproverDirectory, changed_facts, decisive_facts, settled_reason
from bot.decisions._uncertain import UncertainMixin, is_uncertain
from bot.decisions._unfinished import UnfinishedMixin
from bot.diagnosis import Diagnoser
from bot.errors import ControlHostError, Interrupted, RecoverError, StoreError
from bot.messages import Message, Reply, Reporter, ref
from bot.runbook.evaluate import DecisionVerdict
from bot.runbook.model import RunbookSet
from bot.store import Store

log = logging.getLogger(__name__)

# R5.1: always reported after a decision, besides what the runbook's verify.report adds.
VERIFY_FACTS = ("session.revision", "session.status", "session.admission_state", "session.resumable")


BOT = BOT_ACTOR


def _attr(obj: Any, *path: str) -> Any:
    """Tolerant field access on client models or dicts (missing → None, shown as unknown)."""
    for name in path:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return obj


class _ExecutionHalf:
    """The execution half as the lifecycle rooms see it (see :class:`Execution`)."""

    def __init__(self, service: DecisionService) -> None:
        self.service = service

    def execute(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        return self.service._execute(request_id, actor, reporter)

    def send_fresh(
        self, req: DecisionRequest, actor: str, reporter: Reporter, *, from_state: str, retry: str
    ) -> Reply:
        return self.service._send_fresh(req, actor, reporter, from_state=from_state, retry=retry)


class DecisionService(UnfinishedMixin, UncertainMixin):
    """The decisions core as the router calls it: each method hands over to the room that owns it.

    Cheap to construct: all state lives in the store's SQLite file.
    """

    def __init__(
        self,
        *,
        store: Store,
        client: ControlHostClient,
        runbooks: RunbookSet,
        diagnoser: Diagnoser,
        clock: Clock,
        approvers: tuple[str, ...] = (),
        channels: tuple[str, ...] = (),
        directory: ApproverDirectory | None = None,
        console_users: Mapping[str, str] | None = None,
    ) -> None:
        self.ctx = ctx = DecisionContext(
            store=store,
            client=client,
            runbooks=runbooks,
            diagnoser=diagnoser,
            clock=clock,
            approvers=tuple(approvers),
            channels=tuple(channels),
            directory=directory,
            console_users=dict(console_users or {}),
        )
        # The execution half still reads these by name; the rooms take ``ctx``.
        self.store = store
        self.client = client
        self.runbooks = runbooks
        self.diagnoser = diagnoser
        self.clock = clock
        self.directory = directory
        self.approvers = ctx.approvers
        self.channels = ctx.channels
        self.console_users = ctx.console_users
        self.requests = ctx.requests
        self.limits: Limits = ctx.limits
        self.authority = AuthorityGuard(ctx)
        self.casebook = CaseBook(ctx)
        execution = _ExecutionHalf(self)
        self.deciding = DecideRoom(ctx, execution)
        self.approvals = ApprovalRoom(ctx, execution)

    # == the lifecycle: decide, the two-person rule, expiry ========================================

    def decide(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None = None,
        evidence: str | None = None,
        effects: str | None = None,
        reason: str,
        yes: bool = False,
        reporter: Reporter,
    ) -> Reply:
        """Check a decision against a fresh diagnosis; then ask for approval, confirmation, or send it."""
        return self.deciding.decide(
            actor, channel, session_id, decision, turn=turn, evidence=evidence, effects=effects,
            reason=reason, yes=yes, reporter=reporter,
        )

    def dryrun_decide(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None = None,
        evidence: str | None = None,
        effects: str | None = None,
        reason: str,
        yes: bool = False,
        reporter: Reporter,
    ) -> Reply:
        """Show exactly what ``decide`` would send and what is expected back; send nothing."""
        return self.deciding.dryrun(
            actor, channel, session_id, decision, turn=turn, evidence=evidence, effects=effects,
            reason=reason, yes=yes,
        )

    def approve(self, actor: str, channel: str | None, request_id: str, reporter: Reporter) -> Reply:
        """A second, allowed person approves (R3.10); then it executes once."""
        return self.approvals.approve(actor, channel, request_id, reporter)

    def confirm(
        self, actor: str, channel: str | None, request_id: str, reporter: Reporter, effects: str | None = None
    ) -> Reply:
        """The requester's confirmation, or the effects re-check once the worker is gone (R3.9, R3.10)."""
        return self.approvals.confirm(actor, channel, request_id, reporter, effects)

    def reject(self, actor: str, channel: str | None, request_id: str, reason: str | None = None) -> Reply:
        """An allowed approver rejects; the requester may withdraw their own request."""
        return self.approvals.reject(actor, channel, request_id, reason)

    def expire_due(self) -> list[Message]:
        """Expire every pending request past its expiry; returns the updated messages to show."""
        return self.approvals.expire_due()

    def repeated(self, session_id: str, decision: str, facts: Mapping[str, object]) -> int:
        """R5.4: how often this decision already ran here without fixing the cause."""
        return self.deciding.repeated(session_id, decision, facts)

    # == cases and hand-offs =========================================================================

    def cases(self, actor: str | None = None) -> Reply:
        return self.casebook.cases(actor)

    def history(self, session_id: str, actor: str | None = None) -> Reply:
        return self.casebook.history(session_id, actor)

    def take(self, actor: str, session_id: str) -> Reply:
        return self.casebook.take(actor, session_id)

    def note(self, actor: str, session_id: str, note_text: str) -> Reply:
        return self.casebook.note(actor, session_id, note_text)

    def done(self, actor: str, session_id: str, reason: str | None = None) -> Reply:
        return self.casebook.done(actor, session_id, reason)

    def handoff(self, actor: str) -> Reply:
        return self.casebook.handoff(actor)

    def close_if_settled(
        self, session_id: str, actor: str, facts: Mapping[str, object], found_by: str
    ) -> list[Message]:
        return self.casebook.close_if_settled(session_id, actor, facts, found_by)

    # == the shared helpers, under the names the execution half still calls ========================

    def _now(self) -> datetime:
        return self.ctx.now()

    def _iso(self, when: datetime | None = None) -> str:
        return self.ctx.iso(when)

    def _policy(self, decision: str) -> DecisionPolicy:
        return self.ctx.policy(decision)

    def _record(
        self, session_id: str | None, actor: str, step: str, inputs: Any, outcome: str, **kw: Any
    ) -> None:
        self.ctx.record(session_id, actor, step, inputs, outcome, **kw)

    def _refuse(
        self,
        actor: str,
        session_id: str | None,
        step: str,
        inputs: Mapping[str, Any],
        headline: str,
        *lines: str,
        rules: Sequence[str] = (),
        extra: Sequence[Message] = (),
        code: str = "refused",
    ) -> Reply:
        return self.ctx.refuse(actor, session_id, step, inputs, headline, *lines, rules=rules, extra=extra, code=code)

    def _diagnose(self, session_id: str, turn_id: str | None) -> tuple[dict[str, Any], str | None]:
        return self.ctx.diagnose(session_id, turn_id)

    def _verdict(
        self, policy: DecisionPolicy, facts: Mapping[str, Any], flags: Mapping[str, Any]
    ) -> DecisionVerdict:
        return self.ctx.verdict(policy, facts, flags)

    def _is_requester(self, actor: str, req: DecisionRequest) -> bool:
        return is_requester(self.ctx, actor, req)

    def _expire_if_due(self, req: DecisionRequest, actor: str) -> Message | None:
        return expire_if_due(self.ctx, req, actor)

    def _ensure_owner(self, session_id: str, actor: str, channel: str | None) -> None:
        case = self.store.open_case(session_id, actor, channel)
        if case.owner is None:
            self.store.set_owner(case.id, actor)

    def _authorise(self, req: DecisionRequest, actor: str, reporter: Reporter) -> Reply | None:
        return self.authority.authorise(req, actor, reporter)

    def _replay_vouched(self) -> tuple[list[ReplayResult], list[Message]]:
        return self.authority.replay_vouched()

    _state_text = staticmethod(text.state_text)

    # == execution ================================================================================

    def _execute(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        """approved → sending; Ctrl-C on the way withdraws it unless a send is in doubt."""
        with self._interruptible(request_id, actor):
            return self._execute_now(request_id, actor, reporter)

    def _execute_now(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        """approved → sending: facts re-checked, expected_revision read in that same check, then sent."""
        req = self.requests.get(request_id)
        if req is None or req.state != "approved":
            return Reply.of(
                text.refusal(self._state_text(req) if req else f"no request {request_id}"), ok=False
            )
        return self._send_fresh(
            req,
            actor,
            reporter,
            from_state="approved",
            retry=f"`/recover approve {req.id}` retries; a restarted bot also finishes it.",
        )

    def _send_fresh(
        self, req: DecisionRequest, actor: str, reporter: Reporter, *, from_state: str, retry: str
    ) -> Reply:
        """A fresh diagnosis, then check-and-send from ``from_state`` (the approval and the effects
        re-check both end here); an unreadable session sends nothing and says how to ``retry``."""
        sid = req.session_id
        try:
            facts, turn_status = self._diagnose(sid, req.turn_id)
        except RecoverError as exc:
            return Reply.of(
                text.refusal(
                    f"request {req.id} is {from_state} but the session could not be read: {exc.message}",
                    f"Nothing was sent. {retry}",
                    session_id=sid,
                ),
                ok=False,
            )
        reply = self._check_and_send(req, actor, facts, turn_status, reporter, from_state=from_state)
        return self._after_submit(req.id, actor, reply, reporter)

    def _after_submit(self, request_id: str, actor: str, reply: Reply, reporter: Reporter) -> Reply:
        """A request left ``waiting`` (the worker is not confirmed gone, R3.9) gets the bounded wait.

        Called only from the top of an execution path, never from inside a send: the wait is a loop,
        not a recursion (a second RECOVERY_REQUIRED goes back to the same loop).
        """
        req = self.requests.get(request_id)
        if req is None or req.state != "waiting":
            return reply
        waited = self._wait_for_gone(request_id, actor, reporter)
        return Reply([*reply.messages, *waited.messages], ok=waited.ok)

    @staticmethod
    def _observation(facts: Mapping[str, Any]) -> str | None:
        """Which confirmed-gone observation these facts show (None: the worker is not confirmed gone).

        The scheduler's ``confirmed_gone_at`` names a pass; without it the revision stands in (every
        pass that confirms a worker gone moves it). One submission per observation (R3.9).
        """
        if facts.get("execution.confirmed_gone") is not True:
            return None
        at = facts.get("execution.confirmed_gone_at")
        return str(at) if at else f"revision {facts.get('session.revision')}"

    def _needs_recheck(self, req: DecisionRequest, facts: Mapping[str, Any]) -> bool:
        """R3.9 then R3.10: an effects account written while the worker could still act is re-checked
        once the worker is confirmed gone, before anything is sent."""
        if not getattr(self._policy(req.decision).spec, "effects_recheck", False):
            return False
        if facts.get("execution.confirmed_gone") is not True:
            return False
        account_at = parse_time(req.rechecked_at or req.created_at)
        gone_at = parse_time(facts.get("execution.confirmed_gone_at"))
        written_after_gone = req.rechecked_at is not None or req.shown_facts.get("execution.confirmed_gone") is True
        if not written_after_gone:
            return True
        return gone_at is not None and account_at is not None and gone_at > account_at

    def _check_and_send(
        self,
        req: DecisionRequest,
        actor: str,
        facts: Mapping[str, Any],
        turn_status: str | None,
        reporter: Reporter,
        *,
        from_state: str,
    ) -> Reply:
        sid = req.session_id
        policy = self._policy(req.decision)
        flags = _flags(req)
        changes = changed_facts(req.facts, decisive_facts(facts, turn_status))
        verdict = self._verdict(policy, facts, flags)
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
            with self.store.write() as db:
                if self.requests.transition(
                    db,
                    req.id,
                    (from_state,),
                    "void",
                    decided_by=actor,
                    decided_at=self._iso(),
                    note="; ".join(why),
                ):
                    self.store.record_step(
                        sid,
                        actor,
                        "decision_void",
                        {"request_id": req.id},
                        "void",
                        detail={"changes": changes, "why": why},
                        db=db,
                    )
            fresh = self.requests.get(req.id) or req
            msg = text.refusal(
                f"the approval of {req.id} is void: nothing was sent",
                *why,
                f"Look again (`/recover diagnose {sid}`) and make a new request.",
                session_id=sid,
            )
            # Every changed fact, not only the first line: the approver must see all that moved.
            outcome = "void: facts changed: " + "; ".join(changes) if changes else "void: " + why[0]
            return Reply([text.updated_request_message(fresh, outcome, "error"), msg], ok=False)
        if verdict.code == WAITABLE:
            # R3.9: the runbook already says 409 RECOVERY_REQUIRED: nothing is sent; wait for the pass.
            if from_state != "waiting":
                with self.store.write() as db:
                    self.requests.transition(
                        db, req.id, (from_state,), "waiting", actor=actor, error_code=WAITABLE, note=verdict.reason
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
        if self._needs_recheck(req, facts):
            return self._ask_recheck(req, actor, facts, from_state)
        method, path, body = policy.request(sid, facts, flags)
        return self._send(
            req, actor, method, path, body, reporter, from_state=from_state, seen=self._observation(facts)
        )

    def _ask_recheck(self, req: DecisionRequest, actor: str, facts: Mapping[str, Any], from_state: str) -> Reply:
        """R3.9/R3.10: the worker is gone now; ask in the case thread for the effects re-check."""
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, (from_state,), "recheck", actor=actor, note="effects re-check asked"
            )
            if won:
                self.requests.mark(db, req.id, gone_seen_at=self._observation(facts))
        fresh = self.requests.get(req.id) or req
        if not won:
            return Reply.of(text.refusal(self._state_text(fresh)), ok=False)
        gone_at = facts.get("execution.confirmed_gone_at")
        return Reply.of(text.recheck_message(fresh, gone_at, irreversible=self.ctx.irreversible(fresh.decision)))

    def _send(
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
    ) -> Reply:
        """Compare-and-set to sending with a new key and the exact body; commit the record; send.

        ``seen`` is the confirmed-gone observation this submission is made for (R3.9): a 409
        RECOVERY_REQUIRED on it waits for the next one instead of re-submitting.
        """
        refused = self._authorise(req, actor, reporter)
        if refused is not None:
            return refused
        # One commit: the compare-and-set to sending, the idempotency record (the client's key rule:
        # new key, exact body, stored before any send) and the step; a crash leaves all or none.
        with self.store.write() as db:
            current = self.requests.get(req.id, db=db)
            won = current is not None and current.state == from_state
            if won:
                record = self.client.begin(method, path, body, PURPOSE_DECISION, session_id=req.session_id, db=db)
                if not self.requests.transition(
                    db, req.id, (from_state,), "sending", actor=actor, idem_key=record.key, body=record.body
                ):
                    raise StoreError(f"request {req.id} moved inside its own write transaction")
                self.requests.count_sends(db, req.id)
                if seen is not None:
                    self.requests.mark(db, req.id, gone_seen_at=seen)
                self.store.record_step(
                    req.session_id,
                    actor,
                    "decision_sending",
                    {"request_id": req.id, "method": method, "path": path, "body": dict(body)},
                    "sending",
                    idempotency_key=record.key,
                    db=db,
                )
        if not won:
            return Reply.of(text.refusal(self._state_text(self.requests.get(req.id) or req)), ok=False)
        return self._deliver(req.id, actor, record, reporter)

    def _deliver(self, request_id: str, actor: str, record: Any, reporter: Reporter) -> Reply:
        """Send a stored request (same key, same body) and settle the request from the answer."""
        req = self.requests.get(request_id)
        assert req is not None
        refused = self._authorise(req, actor, reporter)
        if refused is not None:
            return refused
        try:
            receipt = self.client.send(record)
        except ControlHostError as exc:
            return self._on_error(req, actor, exc, reporter)
        return self._on_accepted(req, actor, receipt)

    def _on_accepted(self, req: DecisionRequest, actor: str, receipt: Any) -> Reply:
        receipt_id = _attr(receipt, "id")
        result = {
            "receipt_id": receipt_id,
            "status": _attr(receipt, "status"),
            "revision": _attr(receipt, "session", "revision"),
            "resumable": _attr(receipt, "resumable"),
        }
        status = _attr(receipt, "http_status") or 200
        with self.store.write() as db:
            won = self.requests.transition(
                db,
                req.id,
                ("sending", "uncertain"),
                "executed",
                actor=actor,
                receipt_id=receipt_id,
                http_status=status,
                result=result,
            )
            if won:
                self.store.record_step(
                    req.session_id,
                    actor,
                    "decision_executed",
                    {"request_id": req.id},
                    str(result["status"] or "accepted"),
                    detail=result,
                    http_status=status,
                    idempotency_key=req.idem_key,
                    receipt_id=receipt_id,
                    db=db,
                )
        fresh = self.requests.get(req.id) or req
        by = f"approved by {ref(fresh.approved_by or '?')}" if fresh.policy == "two_person" else "confirmed"
        head = text.updated_request_message(fresh, f"executed ({by}); receipt {receipt_id}", "ok")
        if not won:
            return Reply.of(head)  # another process settled it and verified it
        verification = self._verify(req.session_id, actor, self._policy(req.decision), _flags(req), receipt)
        return Reply([head, *verification.messages])

    def _on_error(self, req: DecisionRequest, actor: str, exc: ControlHostError, reporter: Reporter) -> Reply:
        sid = req.session_id
        status = exc.status
        if is_uncertain(exc):
            # Uncertain: the stored key and body are re-sent in the background, never a new key (R0.3).
            return self._uncertain(req, actor, exc, reporter)
        policy = self._policy(req.decision)
        flags = _flags(req)
        if exc.code == WAITABLE:
            return self._to_waiting(req, actor, exc)
        try:
            facts, _ = self._diagnose(sid, req.turn_id)
        except RecoverError:
            facts = {}
        advice = policy.advice(exc.code, facts, flags, self.runbooks)
        lines = [exc.message]
        rules = list(advice.rules) if advice else list(policy.rules)
        if advice:
            lines.append(advice.text)
        if exc.code == "REQUEST_STALE":
            # Which state would make it valid: the runbook's acceptance checks, and the one failing now.
            now = self._verdict(policy, facts, flags) if facts else None
            lines.append("It is accepted when: " + ", ".join(policy.accepted_when()) + ".")
            if now is not None and not now.ok:
                lines.append(f"Now failing: {now.reason} ({now.code}).")
            elif now is not None:
                lines.append(
                    "The facts look valid again: the revision moved; decide anew for a fresh "
                    "expected_revision."
                )
        if exc.code == "CHECKPOINT_UNAVAILABLE":
            lines.append(
                f"No committed checkpoint covers turn {req.turn_id or 'unknown'}: consider `abandon` "
                "(after checking the turn's external effects, R3.10), or `close`."
            )
        with self.store.write() as db:
            if self.requests.transition(
                db,
                req.id,
                ("sending", "uncertain"),
                "failed",
                actor=actor,
                http_status=status,
                error_code=exc.code,
                note=exc.code,
            ):
                self.store.record_step(
                    sid,
                    actor,
                    "decision_refused_by_api",
                    {"request_id": req.id},
                    exc.code,
                    detail={"message": exc.message, "advice": lines[1:]},
                    http_status=status,
                    idempotency_key=req.idem_key,
                    db=db,
                )
        fresh = self.requests.get(req.id) or req
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

    def _to_waiting(self, req: DecisionRequest, actor: str, exc: ControlHostError) -> Reply:
        """R3.9: 409 RECOVERY_REQUIRED ends this logical request; the next is made after the next pass.

        Only a state change: whoever started the execution runs the (one, bounded) wait loop.
        """
        sid = req.session_id
        with self.store.write() as db:
            self.requests.transition(
                db,
                req.id,
                ("sending", "uncertain"),
                "waiting",
                actor=actor,
                http_status=exc.status,
                error_code=exc.code,
            )
            self.store.record_step(
                sid,
                actor,
                "decision_refused_by_api",
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

    def _wait_bounds(self, req: DecisionRequest) -> tuple[float, float]:
        advice = self._policy(req.decision).advice(WAITABLE, {}, {}, self.runbooks)
        every = advice.every if advice and advice.every else self.limits.recovery_wait_poll
        up_to = advice.up_to if advice and advice.up_to else self.limits.recovery_wait_max
        return every, up_to

    def _gone_now(self, sid: str) -> str | None:
        """The confirmed-gone observation the session shows now (None: not gone, or unreadable)."""
        try:
            session = self.client.get_session(sid)
        except ControlHostError:
            return None
        if _attr(session, "execution", "state") != "gone":
            return None
        at = _attr(session, "execution", "confirmed_gone_at")
        return isoformat(at) if isinstance(at, datetime) else f"revision {_attr(session, 'revision')}"

    def _wait_for_gone(
        self, request_id: str, actor: str, reporter: Reporter, deadline: datetime | None = None
    ) -> Reply:
        """R3.9's wait; Ctrl-C during it withdraws the request (nothing uncertain was sent)."""
        with self._interruptible(request_id, actor):
            return self._wait_for_gone_now(request_id, actor, reporter, deadline)

    def _wait_for_gone_now(
        self, request_id: str, actor: str, reporter: Reporter, deadline: datetime | None = None
    ) -> Reply:
        """R3.9: wait for the scheduler's confirmation, then submit once per confirmed-gone observation.

        A bounded loop (the runbook's poll interval and limit), never a recursion: a second 409
        RECOVERY_REQUIRED after a pass is recorded and the loop waits for the NEXT observation (a new
        ``confirmed_gone_at``) before the next submission. It always ends with a message that says how.
        """
        req = self.requests.get(request_id)
        assert req is not None
        sid = req.session_id
        poll, up_to = self._wait_bounds(req)
        deadline = deadline or self._now() + timedelta(seconds=up_to)
        wait_id = self.requests.start_wait(
            sid,
            "recovery_required",
            actor,
            self._iso(deadline),
            request_id=req.id,
            detail=f"{req.id} `{req.decision}`: the scheduler must confirm the worker gone",
        )
        started = self._iso()
        reporter.post(
            Message(
                headline=f"`{req.decision}` on `{sid}` waits for the scheduler to confirm the previous worker gone",
                level="progress",
                lines=[
                    f"Polling the session every {text.duration(poll)} until {self._iso(deadline)}; on each new "
                    "confirmation the facts are re-checked and the decision is submitted once, as a new request "
                    "(new key, fresh expected_revision)."
                ],
                rules=["R3.9"],
                session_id=sid,
            )
        )
        replies: list[Message] = []
        submissions = 0
        while True:
            req = self.requests.get(request_id) or req
            if req.state != "waiting":
                self.requests.end_wait(wait_id, "ended")
                return self._wait_end(req, replies, f"the request is {req.state}")
            seen = self._gone_now(sid)
            if seen is not None and seen != req.gone_seen_at:
                submissions += 1
                try:
                    facts, turn_status = self._diagnose(sid, req.turn_id)
                except RecoverError as exc:
                    facts, turn_status = {"source.session": f"unreadable ({exc.message})"}, None
                with self.store.write() as db:
                    self.requests.mark(db, req.id, gone_seen_at=self._observation(facts) or seen)
                reporter.post(
                    Message(
                        headline=f"The scheduler confirmed the worker of `{sid}` gone ({seen}): re-checking the facts",
                        level="progress",
                        rules=["R3.9"],
                        session_id=sid,
                    )
                )
                reply = self._check_and_send(req, actor, facts, turn_status, reporter, from_state="waiting")
                replies.extend(reply.messages)
                after = self.requests.get(request_id) or req
                if after.state != "waiting":
                    self.requests.end_wait(wait_id, "done")
                    for message in reply.messages:
                        if message.kind == text.RECHECK_KIND:
                            reporter.post(message)  # asked in the case's thread (R3.10)
                    return self._wait_end(after, replies, f"after {submissions} confirmation(s)")
                reporter.post(
                    Message(
                        headline=f"`{req.decision}` on `{sid}`: still RECOVERY_REQUIRED after the confirmation "
                        f"{seen}; no resubmission until the next one",
                        level="progress",
                        rules=["R3.9"],
                        session_id=sid,
                    )
                )
            if self._now() >= deadline:
                break
            self.clock.sleep(min(poll, max(0.0, (deadline - self._now()).total_seconds())))
            reporter.progress(
                Message(
                    headline=f"Still waiting for the scheduler to confirm the worker of `{sid}` gone (since {started}, "
                    f"until {self._iso(deadline)})",
                    level="progress",
                    rules=["R3.9"],
                    session_id=sid,
                )
            )
        self.requests.end_wait(wait_id, "gave_up")
        with self.store.write() as db:
            if self.requests.transition(
                db,
                req.id,
                ("waiting",),
                "failed",
                actor=actor,
                error_code=WAITABLE,
                note="the worker was not confirmed gone in time",
            ):
                self.store.record_step(sid, actor, "decision_wait_gave_up", {"request_id": req.id}, WAITABLE, db=db)
        sends = (self.requests.get(request_id) or req).sends
        msg = text.refusal(
            f"`{req.decision}` on `{sid}` was not submitted again: no new confirmation that the worker is gone by "
            f"{self._iso(deadline)} ({sends} submission(s) of request {req.id} in all)",
            "Check the scheduler (a reconciler pass does not remove containers, R1.5), then decide again.",
            rules=["R3.9", "R1.5"],
            session_id=sid,
        )
        reporter.post(msg)
        return Reply([*replies, msg], ok=False)

    def _wait_end(self, req: DecisionRequest, replies: list[Message], how: str) -> Reply:
        """The visible end of a wait: what became of the request."""
        ok = req.state in ("executed", "recheck")
        end = Message(
            headline=f"`{req.decision}` on `{req.session_id}` after the wait ({how}): {req.state}",
            level="ok" if ok else "error",
            session_id=req.session_id,
            lines=[m.headline for m in replies],
            rules=["R3.9"],
        )
        return Reply([*replies, end], ok=ok)

    # == verification & resume ====================================================================

    def _verify(
        self, session_id: str, actor: str, policy: DecisionPolicy, flags: Mapping[str, Any], receipt: Any
    ) -> Reply:
        """R5.1/R3.12: re-read the session; report revision, status, admission, resumable and the next step."""
        try:
            facts, _ = self._diagnose(session_id, None)
        except RecoverError as exc:
            facts = {"source.session": f"unreadable ({exc.message})"}
        if facts.get("session.resumable") is None and _attr(receipt, "resumable") is not None:
            facts["session.resumable"] = _attr(receipt, "resumable")
        names = list(dict.fromkeys([*VERIFY_FACTS, *policy.report()]))
        step = policy.next_step(facts, flags)
        next_text = step.say if step else f"Check it: `/recover diagnose {session_id}`."
        detail: dict[str, Any] = {
            "decision": policy.name,
            "receipt_id": _attr(receipt, "id"),
            **{n: facts.get(n) for n in names},
            "next": next_text,
        }
        self._record(session_id, actor, "verification", {"decision": policy.name}, "checked", detail=detail)
        lines = [
            f"Receipt {_attr(receipt, 'id')}: {_attr(receipt, 'status') or 'unknown'}. "
            "Acceptance is not the same as the worker being gone, nor as a successful resume (R5.1).",
            f"Next: {next_text}",
        ]
        why = settled_reason(facts)
        case = self.store.get_open_case(session_id) if why else None
        if case is not None:
            self.store.close_case(case.id, actor, f"verification: {why}")
            lines.append(f"Case closed: {why}.")
        return Reply.of(
            Message(
                headline=f"Verified `{session_id}` after `{policy.name}`",
                level="ok",
                facts=[(n, text.show(facts.get(n))) for n in names],
                lines=lines,
                rules=list(step.rules if step and step.rules else policy.spec.verify.rules),
                session_id=session_id,
            )
        )

    def resume(self, actor: str, channel: str | None, session_id: str, reporter: Reporter) -> Reply:
        """Resume, riding through 503 BACKEND_UNAVAILABLE with backoff (R4.2), one key throughout."""
        inputs = {"session_id": session_id, "channel": channel}
        if not ID_RE.match(session_id):
            return self._refuse(actor, None, "resume", inputs, f"invalid session id {session_id!r}")
        policy = self._policy("resume")
        flags: dict[str, Any] = {"reason": f"resume requested by {actor} via recover-bot"}
        facts, _ = self._diagnose(session_id, None)
        verdict = self._verdict(policy, facts, flags)
        if not verdict.ok:
            advice = policy.advice(verdict.code or "", facts, flags, self.runbooks)
            return self._refuse(
                actor,
                session_id,
                "resume",
                inputs,
                f"resume of `{session_id}` will not be accepted: {verdict.reason}",
                f"The control host would answer {verdict.code}. Nothing was sent.",
                *([advice.text] if advice else []),
                rules=list(verdict.rules or policy.rules),
                code=verdict.code or "refused",
            )
        self._ensure_owner(session_id, actor, channel)
        method, path, body = policy.request(session_id, facts, flags)
        # The record (the client's key rule) and the step that vouches for it at a restart: one commit.
        with self.store.write() as db:
            record = self.client.begin(method, path, body, PURPOSE_RESUME, session_id=session_id, db=db)
            self.store.record_step(
                session_id, actor, "resume_requested", dict(inputs), "sending", idempotency_key=record.key, db=db
            )
        advice = policy.advice("BACKEND_UNAVAILABLE", facts, flags, self.runbooks)
        initial = advice.every if advice and advice.every else self.limits.resume_backoff_initial
        cap = advice.max_every if advice and advice.max_every else self.limits.resume_backoff_max
        total = advice.up_to if advice and advice.up_to else self.limits.resume_backoff_total
        start = self._now()
        try:
            return self._resume_loop(actor, session_id, record, policy, facts, flags, inputs, reporter,
                                     (initial, cap, total), start)
        except Interrupted:
            raise
        except KeyboardInterrupt:
            wait_id = next(
                (w.id for w in self.requests.active_waits(session_id) if w.kind == "reclamation"), None
            )
            raise Interrupted(self._resume_interrupted(actor, session_id, record, wait_id)) from None

    def _resume_loop(
        self,
        actor: str,
        session_id: str,
        record: Any,
        policy: DecisionPolicy,
        facts: Mapping[str, Any],
        flags: Mapping[str, Any],
        inputs: Mapping[str, Any],
        reporter: Reporter,
        backoff: tuple[float, float, float],
        start: datetime,
    ) -> Reply:
        """Send the stored resume until a definite answer; 503 BACKEND_UNAVAILABLE is waited out (R4.2)."""
        initial, cap, total = backoff
        delay = initial
        wait_id: int | None = None
        while True:
            try:
                receipt = self.client.send(record)
                break
            except ControlHostError as exc:
                if exc.code != "BACKEND_UNAVAILABLE":
                    if wait_id is not None:
                        self.requests.end_wait(wait_id, "done")
                    return self._resume_refused(actor, session_id, record, exc, policy, facts, flags)
                if wait_id is None:
                    wait_id = self.requests.start_wait(
                        session_id,
                        "reclamation",
                        actor,
                        self._iso(start + timedelta(seconds=total)),
                        detail="resume: waiting for the workspace reclamation to end (R4.2)",
                    )
                    reporter.post(
                        Message(
                            headline=f"Resume of `{session_id}`: 503 BACKEND_UNAVAILABLE — waiting for reclamation",
                            level="progress",
                            lines=[
                                f"A workspace-reclamation claim is held; the same request (same key) is retried "
                                f"with backoff: {text.duration(initial)} doubling to {text.duration(cap)}, for up "
                                f"to {text.duration(total)} (R4.2)."
                            ],
                            rules=["R4.2"],
                            session_id=session_id,
                        )
                    )
                elapsed = (self._now() - start).total_seconds()
                if elapsed >= total:
                    self.requests.end_wait(wait_id, "gave_up")
                    # R4.2: a 503 leaves no receipt and no record, so ending this logical request is safe.
                    self.store.finish_request(record.key, exc.status or 503, {"error": {"code": exc.code}})
                    self._record(
                        session_id,
                        actor,
                        "resume_gave_up",
                        inputs,
                        exc.code,
                        http_status=exc.status,
                        idempotency_key=record.key,
                    )
                    return Reply.of(
                        text.refusal(
                            f"Resume of `{session_id}` gave up: still BACKEND_UNAVAILABLE after "
                            f"{text.duration(elapsed)}",
                            "Reclamation is still running; try `/recover resume` later.",
                            rules=["R4.2"],
                            session_id=session_id,
                        ),
                        ok=False,
                    )
                self.clock.sleep(min(delay, max(0.0, total - elapsed)))
                reporter.progress(
                    Message(
                        headline=f"Still waiting for reclamation on `{session_id}` "
                        f"({text.age(self._iso(start), self._now())} so far)",
                        level="progress",
                        rules=["R4.2"],
                        session_id=session_id,
                    )
                )
                delay = min(delay * 2, cap)
        if wait_id is not None:
            self.requests.end_wait(wait_id, "done")
        receipt_id = _attr(receipt, "id")
        self._record(
            session_id,
            actor,
            "resume_accepted",
            inputs,
            str(_attr(receipt, "status") or "accepted"),
            http_status=_attr(receipt, "http_status") or 200,
            idempotency_key=record.key,
            receipt_id=receipt_id,
        )
        verification = self._verify(session_id, actor, policy, flags, receipt)
        reminder = Message(
            headline=f"Resumed `{session_id}` (receipt {receipt_id})",
            level="ok",
            lines=["Check separately that the new turn picked up the checkpoint's context (R5.2)."],
            rules=["R5.2", "R5.1"],
            session_id=session_id,
        )
        return Reply([reminder, *verification.messages])

    def _resume_refused(
        self,
        actor: str,
        session_id: str,
        record: Any,
        exc: ControlHostError,
        policy: DecisionPolicy,
        facts: Mapping[str, Any],
        flags: Mapping[str, Any],
    ) -> Reply:
        self._record(
            session_id,
            actor,
            "resume_refused",
            {"session_id": session_id},
            exc.code,
            http_status=exc.status,
            idempotency_key=record.key,
        )
        advice = policy.advice(exc.code, facts, flags, self.runbooks)
        lines = [exc.message, *([advice.text] if advice else [])]
        if exc.status is None or exc.status >= 500:
            lines.append("No definite answer: the request is kept and re-sent with the same key on restart.")
        return Reply.of(
            text.refusal(
                f"Resume of `{session_id}` refused: {exc.code}",
                *lines,
                rules=list(advice.rules) if advice else list(policy.rules),
                session_id=session_id,
            ),
            ok=False,
        )

    # == restart ==================================================================================

    def recover_after_restart(self, reporter: Reporter, *, actor: str | None = None) -> Reply:
        """Finish what a previous process left: in-flight requests re-sent, approved ones executed once.

        First names every unfinished request it found (session, decision, since when); each outcome
        is a message about its session, so the Slack app posts it in the case's thread.
        """
        who = actor or BOT
        messages: list[Message] = []
        ok = True
        found = self.unfinished()
        for item in found:
            log.info("unfinished request found: %s", item.line())
            reporter.post(
                Message(
                    headline=f"Unfinished request found: {item.line()}",
                    level="warn",
                    lines=[
                        "Finishing it now with its own Idempotency-Key."
                        if item.uncertain
                        else "Nothing uncertain was sent for it; it continues where it stopped."
                    ],
                    session_id=item.session_id,
                )
            )
        if found:
            self._record(
                None, who, "unfinished_found", {}, f"{len(found)} found", detail={"requests": [u.line() for u in found]}
            )
        # Stored requests whose answer never arrived are re-sent first, each with its own key and body,
        # when a step of the chain vouches for them (decisions: through their request, below).
        replayed, refused = self._replay_vouched()
        messages.extend(refused)
        ok = not refused
        if replayed:
            messages.append(
                Message(
                    headline=f"Re-sent {len(replayed)} unfinished request(s) with their original Idempotency-Keys"
                )
            )
        for result in replayed:
            if result.record.purpose == PURPOSE_RESUME:
                reply = self._settle_replayed_resume(result, who)
                messages.extend(reply.messages)
                ok = ok and reply.ok
        for req in self.requests.find(states=("sending", "uncertain")):
            reply = self._resend(req, reporter)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("approved",)):
            reply = self._execute(req.id, req.approved_by or BOT, reporter)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("waiting",)):
            waits = [w for w in self.requests.active_waits(req.session_id) if w.request_id == req.id]
            for w in waits:
                self.requests.end_wait(w.id, "interrupted")
            deadline = parse_time(waits[-1].deadline) if waits else None
            reply = self._wait_for_gone(req.id, BOT, reporter, deadline=deadline)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("recheck",)):
            # Still waiting for a person's effects re-check (R3.10): ask again, send nothing.
            expired = self._expire_if_due(req, BOT)
            messages.append(expired or text.recheck_message(req, None, irreversible=self.ctx.irreversible(req.decision)))
        for w in self.requests.active_waits():
            if w.kind == "reclamation":
                self.requests.end_wait(w.id, "interrupted")
        self._record(
            None,
            who,
            "recover_after_restart",
            {},
            "done",
            detail={"messages": [m.headline for m in messages]},
        )
        if not messages:
            messages.append(Message(headline="Nothing to recover: no approved or in-flight decisions."))
        return Reply(messages, ok=ok)

    def _settle_replayed_resume(self, result: Any, actor: str) -> Reply:
        """Record the outcome of a resume re-sent with its stored key, about its session (R4.2)."""
        record = result.record
        sid = record.session_id or "?"
        inputs = {"session_id": sid, "replayed": True}
        if result.receipt is not None:
            receipt = result.receipt
            self._record(sid, actor, "resume_accepted", inputs, str(_attr(receipt, "status") or "accepted"),
                         http_status=_attr(receipt, "http_status") or 200, idempotency_key=record.key,
                         receipt_id=_attr(receipt, "id"))
            policy = self._policy("resume")
            verification = self._verify(sid, actor, policy, {"reason": "replayed"}, receipt)
            head = Message(headline=f"Finished the resume of `{sid}` left by an earlier run: accepted "
                           f"(receipt {_attr(receipt, 'id')}, same Idempotency-Key)", level="ok", session_id=sid,
                           rules=["R4.2", "R5.1"])
            return Reply([head, *verification.messages])
        exc = result.error
        if result.still_pending:
            self._record(sid, actor, "resume_uncertain", inputs, exc.code if exc else "uncertain",
                         idempotency_key=record.key)
            return Reply.of(text.refusal(
                f"The resume of `{sid}` left by an earlier run is still without a definite answer ({exc.code if exc else '?'})",
                "It keeps its Idempotency-Key; it is re-sent with it on the next replay or start.",
                session_id=sid, rules=["R4.2"]), ok=False)
        self._record(sid, actor, "resume_refused", inputs, exc.code if exc else "refused",
                     http_status=exc.status if exc else None, idempotency_key=record.key)
        return Reply.of(text.refusal(
            f"The resume of `{sid}` left by an earlier run was refused: {exc.code if exc else '?'}",
            *([exc.message] if exc else []), f"Check it: `/recover diagnose {sid}`.", session_id=sid), ok=False)

    def _resend(self, req: DecisionRequest, reporter: Reporter) -> Reply:
        """A ``sending`` or ``uncertain`` request: settle it from its stored idempotency record, same key and body."""
        with self._interruptible(req.id, BOT):
            return self._resend_now(req, reporter)

    def _resend_now(self, req: DecisionRequest, reporter: Reporter) -> Reply:
        if not req.idem_key or not req.body:
            return Reply.of(
                text.refusal(f"request {req.id} is in flight without a stored key or body"), ok=False
            )
        record = self.store.get_request(req.idem_key)
        if record is None:
            # The record commits with the move to sending and before any send: without one, nothing was
            # ever sent for this request (a store written before that rule), so it is withdrawn, never sent.
            return self._withdraw(
                req,
                BOT,
                "withdrawn: in flight without an idempotency record, so nothing was sent",
                step_inputs={"request_id": req.id, "restart": True},
                from_states=IN_FLIGHT_STATES,
            )
        # send() returns the recorded receipt (or raises the recorded refusal) for an answered record,
        # and re-sends a pending one with its stored key and body: the API applies it at most once.
        return self._deliver(req.id, BOT, record, reporter)
