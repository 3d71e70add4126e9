"""Restart recovery: finish what a previous process left, each request once, each send with its own key.

Why its own room: after a crash (or at the console's ``/recover replay``) the store holds requests
at every stage. Each is finished the one safe way: named first; a stored resume the chain vouches
for is re-sent with its key and body; a ``sending``/``uncertain`` decision is settled from its
stored record through the client's ``send`` (the recorded answer, or a re-send with the same key and
body — never a new key, never a re-run turn, R0.3); an ``approved`` one is executed once on fresh
facts; a ``waiting`` one resumes its R3.9 wait until its stored deadline; a ``recheck`` one is
asked again. Nothing here makes a new logical request for an old one.
"""

from __future__ import annotations

import functools
import logging
from datetime import timedelta

from bot.clock import parse_time
from bot.controlhost import PURPOSE_RESUME
from bot.decisions import _text as text
from bot.decisions._authority import Gate
from bot.decisions._context import BOT, DecisionContext
from bot.decisions._execution import ExecutionRoom
from bot.decisions._guards import Refusal, expire_if_due, refusing
from bot.decisions._requests import IN_FLIGHT_STATES, DecisionRequest
from bot.decisions._resume import ResumeRoom
from bot.decisions._unfinished import UnfinishedRoom
from bot.messages import Message, Reply, Reporter
from bot.store import IdempotencyRecord
from bot.vocab import RequestState, Step

log = logging.getLogger(__name__)


#: How far back the periodic job looks for an executed request its sender never verified: a bot that
#: stopped longer ago than this is a start-up's business, and a storm's requests are read once each.
VERIFY_LEFT_WITHIN = timedelta(hours=1)


class RestartRoom:
    """``recover_after_restart`` (the Slack app at start) and ``replay`` (the console, on request)."""

    def __init__(
        self,
        ctx: DecisionContext,
        authority: Gate,
        execution: ExecutionRoom,
        resume: ResumeRoom,
        unfinished: UnfinishedRoom,
    ) -> None:
        self.ctx = ctx
        self.authority = authority
        self.execution = execution
        self.resume = resume
        self.unfinished = unfinished
        self._verified: set[str] = set()  # executed requests this process saw verified (looked at once)

    def replay(self, actor: str, channel: str | None, reporter: Reporter) -> Reply:
        """The console's `/recover replay`: finish what earlier runs left (same keys, never anew)."""

        def attempt() -> Reply:
            if not self.ctx.channels.allows(channel):
                raise Refusal(
                    f"`replay` is refused outside the recovery channels ({self.ctx.channels.source})",
                    self.ctx.channels.hint(channel),
                )
            return self.recover(reporter, actor=actor)

        return refusing(self.ctx, actor, "replay", {"channel": channel}, attempt)

    def recover(self, reporter: Reporter, *, actor: str | None = None) -> Reply:
        """Finish what a previous process left: in-flight requests re-sent, approved ones executed once.

        First names every unfinished request it found (session, decision, since when); each outcome
        is a message about its session, so the Slack app posts it in the case's thread.
        """
        ctx = self.ctx
        who = actor or BOT
        messages: list[Message] = []
        found = self.unfinished.unfinished()
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
            ctx.record(
                None,
                who,
                Step.UNFINISHED_FOUND,
                {},
                f"{len(found)} found",
                detail={"requests": [u.line() for u in found]},
            )
        # Stored requests whose answer never arrived are re-sent first, each with its own key and body,
        # when a step of the chain vouches for them (decisions: through their request, below).
        replayed, refused = self.authority.replay_vouched()
        messages.extend(refused)
        ok = not refused
        if replayed:
            messages.append(
                Message(headline=f"Re-sent {len(replayed)} unfinished request(s) with their original Idempotency-Keys")
            )
        replies: list[Reply] = []
        for result in replayed:
            if result.record.purpose == PURPOSE_RESUME:
                replies.append(self.resume.settle_replayed(result, who))
        for req in ctx.requests.find(states=(RequestState.SENDING, RequestState.UNCERTAIN)):
            replies.append(self.resend(req, reporter))
        for req in ctx.requests.find(states=(RequestState.APPROVED,)):
            replies.append(self.execution.execute(req.id, req.approved_by or BOT, reporter))
        for req in ctx.requests.find(states=(RequestState.WAITING,)):
            waits = [w for w in ctx.requests.active_waits(req.session_id) if w.request_id == req.id]
            for w in waits:
                ctx.requests.end_wait(w.id, "interrupted")
            deadline = parse_time(waits[-1].deadline) if waits else None
            replies.append(self.execution.waits.wait(req.id, BOT, reporter, deadline=deadline))
        for reply in replies:
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in ctx.requests.find(states=(RequestState.RECHECK,)):
            # Still waiting for a person's effects re-check (R3.10): ask again, send nothing.
            expired = expire_if_due(ctx, req, BOT)
            messages.append(expired or text.recheck_message(req, None, irreversible=ctx.irreversible(req.decision)))
        for w in ctx.requests.active_waits():
            if w.kind == "reclamation":
                ctx.requests.end_wait(w.id, "interrupted")
        ctx.record(
            None, who, Step.RECOVER_AFTER_RESTART, {}, "done", detail={"messages": [m.headline for m in messages]}
        )
        if not messages:
            messages.append(Message(headline="Nothing to recover: no approved or in-flight decisions."))
        return Reply(messages, ok=ok)

    def sweep(self, reporter: Reporter) -> Reply:
        """The periodic job's share of the decisions (the caller holds the lease
        ``replay:<installation>``): finish what a bot that stopped left, while other bots serve. The
        same functions as :meth:`recover`, over only what no live bot is doing:

        - a ``sending`` request whose send lease ran out (its holder died) or was never taken is
          settled from its stored record (:meth:`resend`: same key, same body; the gate holds the lease);
        - an ``uncertain`` one is handed to the one background finishing of uncertain sends when the bot
          finishing it stopped (its ``finish:`` lease ran out unreleased, or was never taken); one given
          up past ``uncertain_retry_for`` waits for a start or ``/recover replay``, as the runbook says;
        - an ``approved`` one nothing was sent for, unchanged for longer than a send lease (its approver
          stopped before sending), is executed once on fresh facts (:meth:`ExecutionRoom.execute`);
        - an ``executed`` one whose verification never ran (its sender stopped after recording the
          answer) is verified now from its stored receipt (R5.1: acceptance is not recovery);
        - a stored resume, older than its own ride-out (R4.2) and whose send lease ran out, is re-sent
          with its key by the gate's replay.

        Never a new key, never a re-run turn (R0.3); nothing is dropped. Waits (R3.9) and re-checks
        (R3.10) stay with whoever runs them (a start finishes those). Says nothing when nothing was left.
        """
        ctx = self.ctx
        sends = ctx.sends
        uncertain = self.execution.outcomes.uncertain
        ttl = sends.ttl()
        stale = ctx.iso(ctx.now() - timedelta(seconds=ttl))
        replies: list[Reply] = []
        found: list[str] = []
        for req in ctx.requests.find(states=(RequestState.SENDING,)):
            if req.idem_key and sends.running(req.idem_key):
                continue  # a live send (here or at another bot): its holder records the answer
            found.append(f"{req.id} ({req.state})")
            replies.append(self.resend(req, reporter))
        for req in ctx.requests.find(states=(RequestState.UNCERTAIN,)):
            if uncertain.finisher.running(req.id) or (req.idem_key and sends.running(req.idem_key)):
                continue
            if not sends.finisher_died(req.id):
                continue  # finished by a live bot, or given up past the limit (a start re-sends it)
            if uncertain.finisher.start(req.id, functools.partial(uncertain.finish, req.id, reporter)):
                found.append(f"{req.id} ({req.state})")
        for req in ctx.requests.find(states=(RequestState.APPROVED,)):
            if (req.updated_at or req.created_at) > stale:
                continue  # its approver's bot is on its way to sending it
            found.append(f"{req.id} ({req.state})")
            replies.append(self.execution.execute(req.id, req.approved_by or BOT, reporter))
        since = ctx.iso(ctx.now() - VERIFY_LEFT_WITHIN)
        for req in ctx.requests.find(states=(RequestState.EXECUTED,), updated_since=since):
            if req.id in self._verified or (req.updated_at or req.created_at) > stale:
                continue
            if req.idem_key and sends.running(req.idem_key):
                continue  # its sender verifies it under the lease
            self._verified.add(req.id)
            verified = self.execution.outcomes.verify_left(req)
            if verified is not None:
                found.append(f"{req.id} (executed, not verified)")
                replies.append(verified)
        resume_for = ctx.runbooks.limit("resume_retry_for")
        old_resume = ctx.iso(ctx.now() - timedelta(seconds=resume_for + ttl))

        def left(record: IdempotencyRecord) -> bool:
            return record.created_at <= old_resume and not sends.running(record.key)

        replayed, refused = self.authority.replay_vouched(only=left)
        for result in replayed:
            if result.record.purpose == PURPOSE_RESUME:
                found.append(f"resume {result.record.key}")
                replies.append(self.resume.settle_replayed(result, BOT))
        messages = [*refused]
        for reply in replies:
            messages.extend(reply.messages)
        if found:
            log.info("the periodic job finished what stopped bots left: %s", ", ".join(found))
            ctx.record(
                None,
                BOT,
                Step.UNFINISHED_FOUND,
                {"periodic": True},
                f"{len(found)} finished",
                detail={"requests": found},
            )
        return Reply(messages, ok=not refused and all(r.ok for r in replies))

    def resend(self, req: DecisionRequest, reporter: Reporter) -> Reply:
        """A ``sending`` or ``uncertain`` request: settled from its stored record, same key and body."""
        with self.unfinished.interruptible(req.id, BOT):
            if not req.idem_key or not req.body:
                return Reply.of(text.refusal(f"request {req.id} is in flight without a stored key or body"), ok=False)
            record = self.ctx.store.get_request(req.idem_key)
            if record is None:
                # The record commits with the move to sending and before any send: without one, nothing
                # was ever sent for it (a store written before that rule), so it is withdrawn, never sent.
                return self.unfinished.withdraw_one(
                    req,
                    BOT,
                    "withdrawn: in flight without an idempotency record, so nothing was sent",
                    step_inputs={"request_id": req.id, "restart": True},
                    from_states=IN_FLIGHT_STATES,
                )
            # send() returns the recorded receipt (or raises the recorded refusal) for an answered record,
            # and re-sends a pending one with its stored key and body: the API applies it at most once.
            return self.execution.deliver(req.id, BOT, record, reporter)
