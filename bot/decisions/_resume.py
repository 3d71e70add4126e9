"""Resume (R4.2): one logical request, one Idempotency-Key, ridden through 503 BACKEND_UNAVAILABLE.

Why its own room: a resume is not a decision request (no approval, no request row) but it is a POST
with the same key rule: the record (the client's ``begin``) commits with the ``resume_requested``
step that vouches for it at a restart; the stored record is re-sent, never re-created, while a
workspace reclamation holds a claim (bot/decisions/_waits.py); a 503 keeps nothing, so giving up
ends the request; a resume left unanswered by an earlier run is settled here after its replay.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.controlhost import PURPOSE_RESUME, Receipt, ReplayResult
from bot.decisions import _text as text
from bot.decisions._authority import Gate, NoAuthority
from bot.decisions._context import DecisionContext
from bot.decisions._guards import Refusal, refusing
from bot.decisions._policy import DecisionPolicy
from bot.decisions._rules import ID_RE
from bot.decisions._unfinished import UnfinishedRoom
from bot.decisions._verify import Verifier
from bot.decisions._waits import ReclamationWait
from bot.decisions._watch import BEFORE, before_send
from bot.errors import ControlHostError, Interrupted
from bot.messages import Message, Reply, Reporter
from bot.runbook.usage import typed_line
from bot.store import IdempotencyRecord
from bot.vocab import Step

Facts = dict[str, object]


class ResumeRoom:
    """``/recover resume`` and the settling of a resume replayed at start."""

    def __init__(self, ctx: DecisionContext, gate: Gate, verifier: Verifier, unfinished: UnfinishedRoom) -> None:
        self.ctx = ctx
        self.verifier = verifier
        self.unfinished = unfinished
        self.reclamation = ReclamationWait(ctx, gate)

    def resume(self, actor: str, channel: str | None, session_id: str, reporter: Reporter) -> Reply:
        """Resume, riding through 503 BACKEND_UNAVAILABLE with backoff (R4.2), one key throughout."""
        inputs = {"session_id": session_id, "channel": channel}
        return refusing(
            self.ctx, actor, "resume", inputs, lambda: self._resume(actor, channel, session_id, inputs, reporter)
        )

    def _resume(
        self, actor: str, channel: str | None, session_id: str, inputs: dict[str, str | None], reporter: Reporter
    ) -> Reply:
        ctx = self.ctx
        if not ID_RE.match(session_id):
            raise Refusal(f"invalid session id {session_id!r}")
        policy = ctx.policy("resume")
        flags: dict[str, object] = {"reason": f"resume requested by {actor} via recover-bot"}
        facts, _ = ctx.diagnose(session_id, None)
        verdict = ctx.verdict(policy, facts, flags)
        if verdict.code == "NOT_FOUND":  # a mistyped id: resume on the ids it may mean, recorded outside
            raise Refusal(
                f"resume was not sent: {verdict.reason}",
                *ctx.unknown_session_lines(session_id, lambda near: typed_line("resume", near)),
                code="NOT_FOUND",
            )
        if not verdict.ok:
            advice = policy.advice(verdict.code or "", facts, flags, ctx.runbooks)
            raise Refusal(
                f"resume of `{session_id}` will not be accepted: {verdict.reason}",
                f"The control host would answer {verdict.code}. Nothing was sent.",
                *([advice.text] if advice else []),
                session_id=session_id,
                rules=list(verdict.rules or policy.rules),
                code=verdict.code or "refused",
            )
        case = ctx.store.open_case(session_id, actor, channel)
        if case.owner is None:
            ctx.store.set_owner(case.id, actor)
        method, path, body = policy.request(session_id, facts, flags)
        # The record (the client's key rule) and the step that vouches for it at a restart: one commit.
        with ctx.store.write() as db:
            record = ctx.client.begin(method, path, body, PURPOSE_RESUME, session_id=session_id, db=db)
            # The step records the exact request: the gate sends the record only while they agree.
            vouched = {**inputs, "method": method, "path": path, "body": dict(body)}
            ctx.record(
                session_id,
                actor,
                Step.RESUME_REQUESTED,
                vouched,
                "sending",
                detail={BEFORE: before_send(facts)},  # what verification judges later reads against
                idempotency_key=record.key,
                db=db,
            )
        advice = policy.advice("BACKEND_UNAVAILABLE", facts, flags, ctx.runbooks)
        initial = advice.every if advice and advice.every else ctx.limits.resume_backoff_initial
        cap = advice.max_every if advice and advice.max_every else ctx.limits.resume_backoff_max
        total = advice.up_to if advice and advice.up_to else ctx.limits.resume_backoff_total
        try:
            return self._send(actor, session_id, record, policy, facts, flags, inputs, (initial, cap, total), reporter)
        except NoAuthority as exc:
            raise Refusal(
                f"Resume of `{session_id}` was not sent: the step log does not vouch for its stored request",
                exc.reason,
                "Check the step store with `recover-bot audit verify`.",
                session_id=session_id,
                code="no_authority",
            ) from None
        except Interrupted:
            raise
        except KeyboardInterrupt:
            wait_id = next((w.id for w in ctx.requests.active_waits(session_id) if w.kind == "reclamation"), None)
            raise Interrupted(self.unfinished.resume_interrupted(actor, session_id, record, wait_id)) from None

    def _send(
        self,
        actor: str,
        session_id: str,
        record: IdempotencyRecord,
        policy: DecisionPolicy,
        facts: Facts,
        flags: Facts,
        inputs: dict[str, str | None],
        backoff: tuple[float, float, float],
        reporter: Reporter,
    ) -> Reply:
        """Send the stored resume until a definite answer; 503 BACKEND_UNAVAILABLE is waited out (R4.2)."""
        ctx = self.ctx
        start = ctx.now()
        ended = self.reclamation.ride_out(session_id, actor, record, backoff, reporter)
        if ended.gave_up:
            exc = ended.error
            code = exc.code if exc else "BACKEND_UNAVAILABLE"
            status = exc.status if exc and exc.status else 503
            # R4.2: a 503 leaves no receipt and no record, so ending this logical request is safe.
            ctx.store.finish_request(record.key, status, {"error": {"code": code}})
            ctx.record(
                session_id, actor, Step.RESUME_GAVE_UP, inputs, code, http_status=status, idempotency_key=record.key
            )
            elapsed = (ctx.now() - start).total_seconds()
            return Reply.of(
                text.refusal(
                    f"Resume of `{session_id}` gave up: still BACKEND_UNAVAILABLE after {text.duration(elapsed)}",
                    "Reclamation is still running; try `/recover resume` later.",
                    rules=["R4.2"],
                    session_id=session_id,
                ),
                ok=False,
            )
        if ended.receipt is None:
            assert ended.error is not None
            return self.refused(actor, session_id, record, ended.error, policy, facts, flags)
        receipt = ended.receipt
        self._record_accepted(session_id, actor, inputs, record, receipt)
        verification = self.verifier.verify(session_id, actor, policy, flags, receipt)
        reminder = Message(
            headline=f"Resumed `{session_id}` (receipt {receipt.id})",
            level="ok",
            lines=["Check separately that the new turn picked up the checkpoint's context (R5.2)."],
            rules=["R5.2", "R5.1"],
            session_id=session_id,
        )
        return Reply([reminder, *verification.messages])

    def refused(
        self,
        actor: str,
        session_id: str,
        record: IdempotencyRecord,
        exc: ControlHostError,
        policy: DecisionPolicy,
        facts: Facts,
        flags: Facts,
    ) -> Reply:
        self.ctx.record(
            session_id,
            actor,
            Step.RESUME_REFUSED,
            {"session_id": session_id},
            exc.code,
            http_status=exc.status,
            idempotency_key=record.key,
        )
        advice = policy.advice(exc.code, facts, flags, self.ctx.runbooks)
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

    def settle_replayed(self, result: ReplayResult, actor: str) -> Reply:
        """Record the outcome of a resume re-sent with its stored key, about its session (R4.2)."""
        ctx = self.ctx
        record = result.record
        sid = record.session_id or "?"
        inputs = {"session_id": sid, "replayed": True}
        if result.receipt is not None:
            receipt = result.receipt
            self._record_accepted(sid, actor, inputs, record, receipt)
            verification = self.verifier.verify(sid, actor, ctx.policy("resume"), {"reason": "replayed"}, receipt)
            head = Message(
                headline=f"Finished the resume of `{sid}` left by an earlier run: accepted "
                f"(receipt {receipt.id}, same Idempotency-Key)",
                level="ok",
                session_id=sid,
                rules=["R4.2", "R5.1"],
            )
            return Reply([head, *verification.messages])
        exc = result.error
        code = exc.code if exc else "?"
        if result.still_pending:
            ctx.record(sid, actor, Step.RESUME_UNCERTAIN, inputs, code, idempotency_key=record.key)
            return Reply.of(
                text.refusal(
                    f"The resume of `{sid}` left by an earlier run is still without a definite answer ({code})",
                    "It keeps its Idempotency-Key; it is re-sent with it on the next replay or start.",
                    session_id=sid,
                    rules=["R4.2"],
                ),
                ok=False,
            )
        ctx.record(
            sid,
            actor,
            Step.RESUME_REFUSED,
            inputs,
            exc.code if exc else "refused",
            http_status=exc.status if exc else None,
            idempotency_key=record.key,
        )
        return Reply.of(
            text.refusal(
                f"The resume of `{sid}` left by an earlier run was refused: {code}",
                *([exc.message] if exc else []),
                f"Check it: `{typed_line('diagnose', sid)}`.",
                session_id=sid,
            ),
            ok=False,
        )

    def _record_accepted(
        self, session_id: str, actor: str, inputs: Mapping[str, object], record: IdempotencyRecord, receipt: Receipt
    ) -> None:
        """The accepted resume's step, sent now or replayed at start: its receipt and the key it went with."""
        self.ctx.record(
            session_id,
            actor,
            Step.RESUME_ACCEPTED,
            inputs,
            str(receipt.status or "accepted"),
            http_status=receipt.http_status or 200,
            idempotency_key=record.key,
            receipt_id=receipt.id,
        )
