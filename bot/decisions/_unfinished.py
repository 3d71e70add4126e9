"""No silent side effects: unfinished requests named at start, withdrawal, the Ctrl-C rules.

A request nothing was sent for (pending, approved, waiting for the scheduler, awaiting the effects
re-check) can be taken back: ``withdraw`` by its requester, or Ctrl-C during its wait. It is then
recorded as ``withdrawn`` and no process ever sends it. A request whose send never got an answer is
*uncertain*: it keeps its Idempotency-Key and is finished — re-sent with that key — never dropped;
the Slack app does that at start, the console only on ``/recover replay``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from bot.controlhost import PURPOSE_RESUME
from bot.decisions import _ladder_rows as ladder_rows
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._guards import Refusal, in_recovery_channel, is_requester, load, refusing
from bot.decisions._requests import IN_FLIGHT_STATES, OPEN_STATES, WITHDRAWABLE_STATES, DecisionRequest
from bot.errors import ControlHostError, Interrupted
from bot.messages import Message, Reply, ref
from bot.runbook.usage import typed_line
from bot.store import IdempotencyRecord
from bot.vocab import Policy, RequestState, Step

MarkUncertain = Callable[[DecisionRequest, str, ControlHostError], None]


@dataclass(frozen=True)
class Unfinished:
    """One unfinished request found in the store: what, where, since when, and whether it is uncertain."""

    session_id: str | None
    what: str  # the decision, or "resume"
    state: str
    since: str
    request_id: str | None = None
    key: str | None = None
    uncertain: bool = False

    def line(self) -> str:
        ref = f" {self.request_id}" if self.request_id else ""
        return f"`{self.session_id or '?'}` `{self.what}`{ref}: {self.state} since {self.since}"


class UnfinishedRoom:
    """withdraw, the Ctrl-C rules and the start-up listing; ``mark_uncertain`` is the uncertain sends'."""

    def __init__(self, ctx: DecisionContext, mark_uncertain: MarkUncertain) -> None:
        self.ctx = ctx
        self.mark_uncertain = mark_uncertain

    # == what is unfinished =======================================================================

    def unfinished(self) -> list[Unfinished]:
        """Every open decision request and every stored send without an answer, oldest first."""
        found: list[Unfinished] = []
        keys: set[str] = set()
        for req in self.ctx.requests.find(states=OPEN_STATES):
            record = self.ctx.store.get_request(req.idem_key) if req.idem_key else None
            uncertain = req.state in IN_FLIGHT_STATES and (record is None or record.pending)
            if req.idem_key:
                keys.add(req.idem_key)
            labels: dict[str, str] = {
                RequestState.REQUESTED: "waiting for approval"
                if req.policy == Policy.TWO_PERSON
                else "waiting for confirmation",
                RequestState.APPROVED: "approved, not sent",
                RequestState.SENDING: "sent, no definite answer (uncertain)" if uncertain else "answered, not recorded",
                RequestState.UNCERTAIN: "sent, no definite answer (uncertain)",
                RequestState.WAITING: "waiting for the scheduler to confirm the worker gone (R3.9)",
                RequestState.RECHECK: "waiting for the effects re-check (R3.10)",
            }
            state = labels.get(req.state, req.state)
            found.append(
                Unfinished(
                    req.session_id,
                    req.decision,
                    state,
                    req.updated_at or req.created_at,
                    req.id,
                    req.idem_key,
                    uncertain,
                )
            )
        for record in self.ctx.store.unfinished_requests():
            if record.key in keys:
                continue
            what = "resume" if record.purpose == PURPOSE_RESUME else record.purpose
            sent = (
                f"sent {record.attempts} time(s), no definite answer (uncertain)"
                if record.attempts
                else "stored, never sent"
            )
            found.append(Unfinished(record.session_id, what, sent, record.created_at, None, record.key, True))
        return found

    def unfinished_report(self, *, console: bool) -> Reply:
        """Names every unfinished request (session, decision, since when); sends nothing."""
        found = self.unfinished()
        if not found:
            return Reply.of(Message(headline="No unfinished requests."))
        lines = [u.line() for u in found]
        if console:
            if any(u.uncertain or u.request_id for u in found):
                lines.append(
                    "Nothing was sent. `/recover replay` finishes these (uncertain sends with their own "
                    "Idempotency-Keys); `/recover withdraw <request_id>` takes back one of yours nothing was sent for."
                )
        else:
            lines.append(
                "Finishing the uncertain ones with their own Idempotency-Keys; each outcome goes to its case's thread."
            )
        return Reply.of(Message(headline=f"Found {len(found)} unfinished request(s)", level="warn", lines=lines))

    # == withdraw =================================================================================

    def withdraw(self, actor: str, channel: str | None, request_id: str) -> Reply:
        """The requester takes back a request nothing was sent for; it is never sent after that."""
        inputs = {"request_id": request_id, "channel": channel}

        def attempt() -> Reply:
            req = load(self.ctx, request_id)
            sid = req.session_id
            in_recovery_channel(self.ctx, channel, "withdrawals are", sid)
            if not is_requester(self.ctx, actor, req):
                raise Refusal(
                    f"only {ref(req.requester)}, who asked for it, withdraws request {req.id}",
                    f"To refuse it, an approver runs `{typed_line('reject', req.id)}`.",
                    session_id=sid,
                )
            if req.state in IN_FLIGHT_STATES:
                raise Refusal(
                    f"request {req.id} was sent and its answer never came: it cannot be withdrawn",
                    "Its outcome is finished with its own Idempotency-Key: `/recover replay` in the console; "
                    "the Slack app does it at start.",
                    session_id=sid,
                    code="uncertain",
                )
            if req.state not in WITHDRAWABLE_STATES:
                raise Refusal(f"request {req.id} is already {req.state}: nothing to withdraw", session_id=sid)
            return self.withdraw_one(req, actor, "withdrawn by its requester", step_inputs=inputs)

        return refusing(self.ctx, actor, Step.WITHDRAW, inputs, attempt)

    def withdraw_one(
        self,
        req: DecisionRequest,
        actor: str,
        why: str,
        *,
        step_inputs: Mapping[str, object],
        from_states: Sequence[str] = WITHDRAWABLE_STATES,
    ) -> Reply:
        ladder_rows.fence(self.ctx.store, self.ctx.clock, req.id)  # no ladder step after the withdrawal
        with self.ctx.store.write() as db:
            won = self.ctx.requests.transition(
                db,
                req.id,
                tuple(from_states),
                RequestState.WITHDRAWN,
                decided_by=actor,
                decided_at=self.ctx.iso(),
                note=why,
            )
            if won:
                self.ctx.store.record_step(
                    req.session_id,
                    actor,
                    Step.DECISION_WITHDRAWN,
                    dict(step_inputs),
                    RequestState.WITHDRAWN,
                    detail={"was": req.state, "why": why},
                    db=db,
                )
        fresh = self.ctx.requests.get(req.id) or req
        if not won:
            return Reply.of(
                text.refusal(
                    f"request {req.id} is already {fresh.state}: nothing withdrawn", session_id=req.session_id
                ),
                ok=False,
            )
        for wait in self.ctx.requests.active_waits(req.session_id):
            if wait.request_id == req.id:
                self.ctx.requests.end_wait(wait.id, "withdrawn")
        if req.idem_key:
            self.ctx.store.withdraw_request(req.idem_key, actor, why)
        return Reply.of(text.updated_request_message(fresh, f"{why}; nothing was sent and it never will be", "warn"))

    def pending_of(self, actor: str, since: str) -> list[DecisionRequest]:
        """What ``actor`` requested since ``since`` that still waits and nothing was sent for: what a
        console run's Ctrl-C withdraws, and what leaving it otherwise leaves waiting."""
        return [
            req
            for req in self.ctx.requests.find(states=WITHDRAWABLE_STATES)
            if req.requester == actor and req.created_at >= since
        ]

    def left_waiting(self, actor: str, since: str) -> Reply:
        """Leaving the console without Ctrl-C: this run's requests that stay waiting, said once, with
        the line that takes each back (none: nothing is said)."""
        waiting = self.pending_of(actor, since)
        if not waiting:
            return Reply()
        said = ", ".join(f"{req.id} (`{req.decision}` on `{req.session_id}`)" for req in waiting)
        return Reply.of(
            Message(
                headline=f"Left waiting: {len(waiting)} request(s) of this run, for someone else to act on: {said}",
                level="warn",
                lines=[
                    "Each stays pending until approved, rejected or expired; to take one back: "
                    + ", ".join(f"`{typed_line('withdraw', req.id)}`" for req in waiting)
                ],
            )
        )

    def withdraw_pending_of(self, actor: str, since: str) -> Reply:
        """Ctrl-C at the console: withdraw what ``actor`` requested since ``since`` and nothing was sent for."""
        messages: list[Message] = []
        for req in self.pending_of(actor, since):
            messages.extend(
                self.withdraw_one(
                    req,
                    actor,
                    "withdrawn: interrupted (Ctrl-C)",
                    step_inputs={"request_id": req.id, "interrupted": True},
                ).messages
            )
        return Reply(messages)

    # == Ctrl-C ===================================================================================

    @contextmanager
    def interruptible(self, request_id: str, actor: str) -> Iterator[None]:
        """Ctrl-C inside a request's execution or wait: withdraw it if nothing uncertain was sent."""
        try:
            yield
        except Interrupted:
            raise
        except KeyboardInterrupt:
            raise Interrupted(self.request_interrupted(request_id, actor)) from None

    def request_interrupted(self, request_id: str, actor: str) -> Reply:
        req = self.ctx.requests.get(request_id)
        if req is None:
            return Reply.of(Message(headline="Interrupted: nothing was sent.", level="warn"), ok=False)
        inputs = {"request_id": req.id, "interrupted": True}
        if req.state in WITHDRAWABLE_STATES:
            reply = self.withdraw_one(req, actor, "withdrawn: interrupted (Ctrl-C)", step_inputs=inputs)
            return Reply(reply.messages, ok=False)
        if req.state in IN_FLIGHT_STATES:
            record = self.ctx.store.get_request(req.idem_key) if req.idem_key else None
            if record is None or (record.pending and not self.ctx.client.in_doubt(record.key)):
                reply = self.withdraw_one(
                    req,
                    actor,
                    "withdrawn: interrupted (Ctrl-C) before anything was sent",
                    step_inputs=inputs,
                    from_states=IN_FLIGHT_STATES,
                )
                return Reply(reply.messages, ok=False)
            if record.pending:
                # Sent, the answer never read: uncertain with its key (finished by replay or at start).
                self.mark_uncertain(
                    req, actor, ControlHostError("interrupted (Ctrl-C) before the answer", code="INTERRUPTED")
                )
                return Reply.of(self.uncertain_message(req.session_id, f"`{req.decision}` ({req.id})"), ok=False)
        return Reply.of(
            Message(
                headline=f"Interrupted: request {req.id} is {req.state}",
                level="warn",
                lines=[f"See `{typed_line('history', req.session_id)}`."],
                session_id=req.session_id,
            ),
            ok=False,
        )

    def resume_interrupted(self, actor: str, session_id: str, record: IdempotencyRecord, wait_id: int | None) -> Reply:
        """Ctrl-C during a resume (R4.2): withdrawn when every answer was a 503, else kept uncertain."""
        if wait_id is not None:
            self.ctx.requests.end_wait(wait_id, "withdrawn")
        inputs = {"session_id": session_id, "interrupted": True}
        current = self.ctx.store.get_request(record.key) or record
        if current.pending and not self.ctx.client.in_doubt(record.key):
            self.ctx.store.withdraw_request(record.key, actor, "interrupted (Ctrl-C)")
            self.ctx.record(session_id, actor, Step.RESUME_WITHDRAWN, inputs, "withdrawn", idempotency_key=record.key)
            return Reply.of(
                Message(
                    headline=f"Resume of `{session_id}` withdrawn (interrupted)",
                    level="warn",
                    lines=[
                        "Every answer so far was 503 BACKEND_UNAVAILABLE, which keeps nothing (R4.2): nothing "
                        "took effect, and it will never be re-sent. Run `/recover resume` again when you want it."
                    ],
                    rules=["R4.2"],
                    session_id=session_id,
                ),
                ok=False,
            )
        if current.pending:
            self.ctx.record(session_id, actor, Step.RESUME_UNCERTAIN, inputs, "uncertain", idempotency_key=record.key)
            return Reply.of(self.uncertain_message(session_id, "resume"), ok=False)
        return Reply.of(
            Message(
                headline=f"Interrupted: the resume of `{session_id}` had already been answered",
                level="warn",
                lines=[f"See `{typed_line('history', session_id)}`; `/recover replay` records its outcome."],
                session_id=session_id,
            ),
            ok=False,
        )

    @staticmethod
    def uncertain_message(session_id: str, what: str) -> Message:
        return Message(
            headline=f"Interrupted while {what} on `{session_id}` was on its way: its outcome is uncertain",
            level="warn",
            lines=[
                "It keeps its Idempotency-Key and is finished with it, never dropped and never sent anew: "
                "`/recover replay` in the console; the Slack app does it at start (R0.3)."
            ],
            rules=["R0.3"],
            session_id=session_id,
        )
