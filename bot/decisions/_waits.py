"""The two waits of the decisions core, both on the one bounded poll (bot/decisions/_poll.py).

R3.9: a decision the control host would refuse with 409 RECOVERY_REQUIRED (the previous worker not yet
confirmed gone) waits for the scheduler's confirmation, then is re-checked and submitted once per
confirmed-gone observation — a loop, never a recursion — and gives up at the runbook's limit.
R4.2: a resume answered 503 BACKEND_UNAVAILABLE (a workspace reclamation holds a claim) is re-sent,
same key and body, with a doubling pause until a definite answer or the runbook's limit.
Each wait is registered (``start_wait``/``end_wait``) so a restart and the hand-off see it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.clock import isoformat
from bot.controlhost import Receipt
from bot.decisions import _text as text
from bot.decisions._authority import Gate
from bot.decisions._context import DecisionContext
from bot.decisions._policy import WAITABLE
from bot.decisions._poll import Pace, poll
from bot.decisions._requests import DecisionRequest
from bot.errors import ControlHostError, RecoverError
from bot.messages import Message, Reply, Reporter
from bot.store import IdempotencyRecord
from bot.vocab import RequestState, Step

Interruptible = Callable[[str, str], AbstractContextManager[None]]


class Submit(Protocol):
    """Re-check fresh facts and send once (the execution room's ``check_and_send``)."""

    def __call__(
        self,
        req: DecisionRequest,
        actor: str,
        facts: Mapping[str, Any],
        turn_status: str | None,
        reporter: Reporter,
        *,
        from_state: str,
    ) -> Reply: ...


def observation(facts: Mapping[str, Any]) -> str | None:
    """Which confirmed-gone observation these facts show (None: the worker is not confirmed gone).

    The scheduler's ``confirmed_gone_at`` names a pass; without it the revision stands in (every
    pass that confirms a worker gone moves it). One submission per observation (R3.9).
    """
    if facts.get("execution.confirmed_gone") is not True:
        return None
    at = facts.get("execution.confirmed_gone_at")
    return str(at) if at else f"revision {facts.get('session.revision')}"


class WorkerGoneWait:
    """R3.9's wait for the scheduler's confirmation, one submission per confirmed-gone observation."""

    def __init__(self, ctx: DecisionContext, submit: Submit, interruptible: Interruptible) -> None:
        self.ctx = ctx
        self.submit = submit
        self.interruptible = interruptible

    def bounds(self, req: DecisionRequest) -> tuple[float, float]:
        ctx = self.ctx
        advice = ctx.policy(req.decision).advice(WAITABLE, {}, {}, ctx.runbooks)
        every = advice.every if advice and advice.every else ctx.limits.recovery_wait_poll
        up_to = advice.up_to if advice and advice.up_to else ctx.limits.recovery_wait_max
        return every, up_to

    def gone_now(self, sid: str) -> str | None:
        """The confirmed-gone observation the session shows now (None: not gone, or unreadable)."""
        try:
            session = self.ctx.client.get_session(sid)
        except ControlHostError:
            return None
        execution = session.execution
        if execution is None or execution.state != "gone":
            return None
        at = execution.confirmed_gone_at
        return isoformat(at) if at is not None else f"revision {session.revision}"

    def wait(self, request_id: str, actor: str, reporter: Reporter, deadline: datetime | None = None) -> Reply:
        """The wait; Ctrl-C during it withdraws the request (nothing uncertain was sent)."""
        with self.interruptible(request_id, actor):
            return self._wait(request_id, actor, reporter, deadline)

    def _wait(self, request_id: str, actor: str, reporter: Reporter, deadline: datetime | None) -> Reply:
        """Poll until the request leaves ``waiting`` or the deadline; it always ends with a message
        that says how. A second 409 after a pass is recorded and waits for the NEXT observation."""
        ctx = self.ctx
        found = ctx.requests.get(request_id)
        assert found is not None
        req: DecisionRequest = found
        sid = req.session_id
        every, up_to = self.bounds(req)
        until = deadline or ctx.now() + timedelta(seconds=up_to)
        wait_id = ctx.requests.start_wait(
            sid,
            "recovery_required",
            actor,
            ctx.iso(until),
            request_id=req.id,
            detail=f"{req.id} `{req.decision}`: the scheduler must confirm the worker gone",
        )
        started = ctx.iso()
        reporter.post(
            Message(
                headline=f"`{req.decision}` on `{sid}` waits for the scheduler to confirm the previous worker gone",
                level="progress",
                lines=[
                    f"Polling the session every {text.duration(every)} until {ctx.iso(until)}; on each new "
                    "confirmation the facts are re-checked and the decision is submitted once, as a new request "
                    "(new key, fresh expected_revision)."
                ],
                rules=["R3.9"],
                session_id=sid,
            )
        )
        replies: list[Message] = []
        submissions = 0

        def attempt() -> Reply | None:
            nonlocal req, submissions
            req = ctx.requests.get(request_id) or req
            if req.state != RequestState.WAITING:
                ctx.requests.end_wait(wait_id, "ended")
                return self.end(req, replies, f"the request is {req.state}")
            seen = self.gone_now(sid)
            if seen is None or seen == req.gone_seen_at:
                return None
            submissions += 1
            try:
                facts, turn_status = ctx.diagnose(sid, req.turn_id)
            except RecoverError as exc:
                facts, turn_status = {"source.session": f"unreadable ({exc.message})"}, None
            with ctx.store.write() as db:
                ctx.requests.mark(db, req.id, gone_seen_at=observation(facts) or seen)
            reporter.post(
                Message(
                    headline=f"The scheduler confirmed the worker of `{sid}` gone ({seen}): re-checking the facts",
                    level="progress",
                    rules=["R3.9"],
                    session_id=sid,
                )
            )
            reply = self.submit(req, actor, facts, turn_status, reporter, from_state=RequestState.WAITING)
            replies.extend(reply.messages)
            after = ctx.requests.get(request_id) or req
            if after.state != RequestState.WAITING:
                ctx.requests.end_wait(wait_id, "done")
                for message in reply.messages:
                    if message.kind == text.RECHECK_KIND:
                        reporter.post(message)  # asked in the case's thread (R3.10)
                return self.end(after, replies, f"after {submissions} confirmation(s)")
            reporter.post(
                Message(
                    headline=f"`{req.decision}` on `{sid}`: still RECOVERY_REQUIRED after the confirmation "
                    f"{seen}; no resubmission until the next one",
                    level="progress",
                    rules=["R3.9"],
                    session_id=sid,
                )
            )
            return None

        def waited() -> None:
            reporter.progress(
                Message(
                    headline=f"Still waiting for the scheduler to confirm the worker of `{sid}` gone (since {started}, "
                    f"until {ctx.iso(until)})",
                    level="progress",
                    rules=["R3.9"],
                    session_id=sid,
                )
            )

        ended = poll(ctx.clock, until, Pace(every), attempt, waited=waited)
        if ended is not None:
            return ended
        return self.give_up(req, actor, wait_id, until, replies, reporter)

    def give_up(
        self,
        req: DecisionRequest,
        actor: str,
        wait_id: int,
        until: datetime,
        replies: list[Message],
        reporter: Reporter,
    ) -> Reply:
        ctx = self.ctx
        sid = req.session_id
        ctx.requests.end_wait(wait_id, "gave_up")
        with ctx.store.write() as db:
            if ctx.requests.transition(
                db,
                req.id,
                (RequestState.WAITING,),
                RequestState.FAILED,
                actor=actor,
                error_code=WAITABLE,
                note="the worker was not confirmed gone in time",
            ):
                ctx.record(sid, actor, Step.DECISION_WAIT_GAVE_UP, {"request_id": req.id}, WAITABLE, db=db)
        sends = (ctx.requests.get(req.id) or req).sends
        # "again" only when something was submitted before: a request that never got a confirmed-gone
        # observation was never sent at all.
        how = "was not submitted again" if sends else "was not submitted"
        msg = text.refusal(
            f"`{req.decision}` on `{sid}` {how}: no new confirmation that the worker is gone by "
            f"{ctx.iso(until)} ({sends} submission(s) of request {req.id} in all)",
            "Check the scheduler (a reconciler pass does not remove containers, R1.5), then decide again.",
            rules=["R3.9", "R1.5"],
            session_id=sid,
        )
        reporter.post(msg)
        return Reply([*replies, msg], ok=False)

    @staticmethod
    def end(req: DecisionRequest, replies: list[Message], how: str) -> Reply:
        """The visible end of a wait: what became of the request."""
        ok = req.state in (RequestState.EXECUTED, RequestState.RECHECK)
        end = Message(
            headline=f"`{req.decision}` on `{req.session_id}` after the wait ({how}): {req.state}",
            level="ok" if ok else "error",
            session_id=req.session_id,
            lines=[m.headline for m in replies],
            rules=["R3.9"],
        )
        return Reply([*replies, end], ok=ok)


@dataclass(frozen=True)
class Reclaimed:
    """How a resume's ride through 503 BACKEND_UNAVAILABLE ended: a receipt, a definite error, or the
    last 503 when the limit passed (``gave_up``)."""

    receipt: Receipt | None = None
    error: ControlHostError | None = None
    gave_up: bool = False
    wait_id: int | None = None


class ReclamationWait:
    """R4.2: the same resume (same key, same body) re-sent with a doubling pause while 503 lasts."""

    def __init__(self, ctx: DecisionContext, gate: Gate) -> None:
        self.ctx = ctx
        self.gate = gate

    def ride_out(
        self,
        session_id: str,
        actor: str,
        record: IdempotencyRecord,
        backoff: tuple[float, float, float],
        reporter: Reporter,
    ) -> Reclaimed:
        """Send ``record`` until a definite answer or ``total`` seconds (the first 503 registers the wait)."""
        ctx = self.ctx
        initial, cap, total = backoff
        start = ctx.now()
        until = start + timedelta(seconds=total)
        wait_id: int | None = None
        last: ControlHostError | None = None

        def attempt() -> Reclaimed | None:
            nonlocal wait_id, last
            try:
                return Reclaimed(receipt=self.gate.send_resume(record), wait_id=wait_id)
            except ControlHostError as exc:
                if exc.code != "BACKEND_UNAVAILABLE":
                    return Reclaimed(error=exc, wait_id=wait_id)
                last = exc
            if wait_id is None:
                wait_id = ctx.requests.start_wait(
                    session_id,
                    "reclamation",
                    actor,
                    ctx.iso(until),
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
            return None

        def waited() -> None:
            reporter.progress(
                Message(
                    headline=f"Still waiting for reclamation on `{session_id}` "
                    f"({text.age(ctx.iso(start), ctx.now())} so far)",
                    level="progress",
                    rules=["R4.2"],
                    session_id=session_id,
                )
            )

        ended = poll(ctx.clock, until, Pace(initial, cap), attempt, waited=waited)
        if wait_id is not None:
            ctx.requests.end_wait(wait_id, "gave_up" if ended is None else "done")
        return ended or Reclaimed(error=last, gave_up=True, wait_id=wait_id)
