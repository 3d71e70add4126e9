"""The effects re-check (R3.9 then R3.10): ``confirm`` on a request whose worker is now confirmed gone.

Why: an approved two-person decision whose effects account was written while the worker could still
act is not sent when the scheduler confirms the worker gone; its requester or approver re-checks the
account first. The same account (or none given) confirms it and it is sent once; a changed account is
new content: a new request (new id) that needs a new approval by someone other than its editor. The
approval's expiry still governs: an unanswered re-check lapses with the request.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._guards import Refusal, expire_if_due, moved, untampered
from bot.decisions._lifecycle import Execution, make_request, request_content
from bot.decisions._requests import DecisionRequest
from bot.errors import RecoverError
from bot.messages import Reply, Reporter, ref
from bot.vocab import RequestState, Step


class RecheckRoom:
    """``/recover confirm`` (with or without ``--effects``) on a request in ``recheck``."""

    def __init__(self, ctx: DecisionContext, execution: Execution) -> None:
        self.ctx = ctx
        self.execution = execution

    def confirm(
        self,
        req: DecisionRequest,
        actor: str,
        channel: str | None,
        effects: str | None,
        reporter: Reporter,
        inputs: Mapping[str, object],
    ) -> Reply:
        """Re-checked by a party to it (R3.10): the same account is sent once, a changed one superseded."""
        sid = req.session_id
        if actor not in (req.requester, req.approved_by):
            raise Refusal(
                f"only {ref(req.requester)} (requester) or {ref(req.approved_by or '?')} (approver) re-checks "
                f"the effects of request {req.id}",
                "They know what was checked; anyone else makes their own request with `/recover decide …`.",
                session_id=sid,
                rules=["R3.10"],
                code="not_party",
            )
        untampered(self.ctx, req, actor)
        expired = expire_if_due(self.ctx, req, actor)
        if expired is not None:
            raise Refusal(
                f"request {req.id} has expired: the effects re-check lapsed with it; nothing was sent",
                "Make a new request with `/recover decide …` if it is still needed.",
                session_id=sid,
                extra=[expired],
                rules=["R3.9"],
                code="expired",
            )
        if effects is not None and effects.strip() != (req.effects or "").strip():
            return self._supersede(req, actor, channel, effects.strip(), inputs)
        with self.ctx.store.write() as db:
            current = self.ctx.requests.get(req.id, db=db)
            still = current is not None and current.state == RequestState.RECHECK
            if still:
                self.ctx.requests.mark(db, req.id, rechecked_by=actor, rechecked_at=self.ctx.iso())
        if not still:
            moved(self.ctx, req)
        self.ctx.record(
            sid,
            actor,
            Step.DECISION_EFFECTS_RECHECKED,
            {"request_id": req.id, "effects": req.effects, "channel": channel},
            RequestState.RECHECK,
            detail={"content_hash": req.content_hash},
        )
        return self.execution.send_fresh(
            self.ctx.requests.get(req.id) or req,
            actor,
            reporter,
            from_state=RequestState.RECHECK,
            retry=f"`/recover confirm {req.id}` again in a moment.",
        )

    def _supersede(
        self, req: DecisionRequest, actor: str, channel: str | None, effects: str, inputs: Mapping[str, object]
    ) -> Reply:
        """A changed effects account: the old request is void, a new one (new id) waits for approval."""
        sid = req.session_id
        try:
            facts, turn_status = self.ctx.diagnose(sid, req.turn_id)
        except RecoverError as exc:
            raise Refusal(f"the session could not be read: {exc.message}", session_id=sid) from None
        content = request_content(
            self.ctx,
            self.ctx.policy(req.decision),
            session_id=sid,
            turn_id=req.turn_id,
            evidence_ref=req.evidence_ref,
            effects=effects,
            reason=req.reason,
            requester=actor,  # its editor: someone else must approve it
            channel=channel or req.channel,
            facts=facts,
            turn_status=turn_status,
            repeated=req.repeated,
        )
        content["policy"] = req.policy  # the approval the old request needed, whatever the runbook says now
        with self.ctx.store.write() as db:
            if not self.ctx.requests.transition(
                db,
                req.id,
                (RequestState.RECHECK,),
                RequestState.VOID,
                actor=actor,
                decided_by=actor,
                decided_at=content["created_at"],
                note=f"superseded by {content['id']}: the effects account changed",
            ):
                moved(self.ctx, req)
            new = make_request(
                self.ctx, db, content, {**inputs, "decision": req.decision, "supersedes": req.id}, supersedes=req.id
            )
            self.ctx.requests.mark(db, req.id, superseded_by=new.id)
        old = self.ctx.requests.get(req.id) or req
        first = (
            f"The effects account of {req.id} changed after the worker was confirmed gone: this is a new request; "
            f"it needs a new approval by someone other than {ref(actor)} (R3.10)."
        )
        return Reply(
            [
                text.updated_request_message(old, f"void: superseded by {new.id} (effects account changed)", "warn"),
                text.approval_request_message(
                    new,
                    self.ctx.mentions(),
                    ["R3.9", "R3.10"],
                    first=[first],
                    irreversible=self.ctx.irreversible(new.decision),
                ),
            ]
        )
