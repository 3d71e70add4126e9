"""approve, confirm, reject and expiry: the two-person rule and the requester's confirmation.

Why in the core: the Slack button, the typed ``/recover approve`` and the console all end here, so no
front end can skip the rule. A two-person decision is approved by a second, allowed, identifiable
person (R3.10; people compared by Slack id, RECOVER_APPROVERS, RECOVER_CHANNELS); a single-person one
is confirmed by its requester (R2.11, R5.3). Either way the win is a compare-and-set
``requested → approved`` (one winner across processes), and then it executes once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from datetime import timedelta

from bot.decisions import _ladder_rows as ladder_rows
from bot.decisions import _text as text
from bot.decisions._context import BOT, DecisionContext
from bot.decisions._guards import (
    Refusal,
    allowed_approver,
    expire_if_due,
    in_recovery_channel,
    in_state,
    is_requester,
    load,
    moved,
    not_expired,
    refusing,
    second_person,
    untampered,
)
from bot.decisions._lifecycle import Execution, grant
from bot.decisions._recheck import RecheckRoom
from bot.decisions._requests import DecisionRequest
from bot.messages import Message, Reply, Reporter, ref
from bot.runbook.usage import typed_line
from bot.vocab import Policy, RequestState, Step

AGAIN = "Make a new request with `/recover decide …` if it is still needed."


def first_shown(ctx: DecisionContext, req: DecisionRequest) -> Message:
    """The request's approval message as first shown (kept in the store before it was posted); a
    request shown before it was kept is rendered again from its stored content."""
    shown = ladder_rows.shown_message(ctx.store, req.id)
    if shown is not None:
        return shown
    return text.approval_request_message(
        req, ctx.mentions(), list(ctx.policy(req.decision).rules), irreversible=ctx.irreversible(req.decision)
    )


def approvals_unshown(
    ctx: DecisionContext, older_than: timedelta, within: timedelta, skip: Collection[str] = ()
) -> list[tuple[str | None, Message]]:
    """Two-person requests waiting for their approval, made in the last ``within`` and at least
    ``older_than`` ago, but those in ``skip`` (offered already): (the channel it was asked in, the
    request as first shown, said once). What a front whose process died between recording a request
    and posting it never showed the second person."""
    now = ctx.now()
    edge, since = ctx.iso(now - older_than), ctx.iso(now - within)
    return [
        (req.channel, dataclasses.replace(first_shown(ctx, req), said_once=True))
        for req in ctx.requests.find(states=(RequestState.REQUESTED,))
        if req.policy == Policy.TWO_PERSON and since <= req.created_at <= edge and req.id not in skip
    ]


class ApprovalRoom:
    """``/recover approve``, ``confirm``, ``reject`` and the expiry of unanswered requests."""

    def __init__(self, ctx: DecisionContext, execution: Execution) -> None:
        self.ctx = ctx
        self.execution = execution
        self.recheck = RecheckRoom(ctx, execution)

    def approve(self, actor: str, channel: str | None, request_id: str, reporter: Reporter) -> Reply:
        """A second, allowed person approves (button or text both end here); then it executes once."""
        inputs = {"request_id": request_id, "channel": channel}

        def attempt() -> Reply:
            req = load(self.ctx, request_id)
            sid = req.session_id
            in_recovery_channel(self.ctx, channel, "approvals are", sid)
            if req.policy != Policy.TWO_PERSON:
                raise Refusal(
                    f"request {req.id} is a single-person `{req.decision}`: it is confirmed, not approved",
                    "Its requester confirms it with the button or `--yes`.",
                    session_id=sid,
                )
            second_person(self.ctx, actor, req)  # R3.10
            # What allows this approver, as seen now: recorded with the approval, never looked up again.
            evidence = allowed_approver(self.ctx, actor, sid, req)
            if req.state == RequestState.APPROVED:
                # Approved but not executed (a crash, an unreadable API): an allowed person retries it.
                return self.execution.execute(req.id, actor, reporter)
            return self._grant(
                req,
                actor,
                Step.DECISION_APPROVED,
                {"channel": channel, "allowed_by": evidence},
                reporter,
                void_if_changed=True,
            )

        return refusing(self.ctx, actor, Step.APPROVE, inputs, attempt)

    def confirm(
        self, actor: str, channel: str | None, request_id: str, reporter: Reporter, effects: str | None = None
    ) -> Reply:
        """One word, two uses (docs/commands.md, "confirm"): the explicit confirmation of a single-person
        decision by its requester, or the effects re-check of a two-person decision once its worker is
        confirmed gone (R3.9, R3.10)."""
        inputs = {"request_id": request_id, "channel": channel, "effects": effects}

        def attempt() -> Reply:
            req = load(self.ctx, request_id)
            sid = req.session_id
            in_recovery_channel(self.ctx, channel, "decisions are", sid)
            if req.state == RequestState.RECHECK:
                return self.recheck.confirm(req, actor, channel, effects, reporter, inputs)
            if effects is not None:
                raise Refusal(
                    "--effects applies only to the effects re-check of a request whose worker is confirmed "
                    f"gone; request {req.id} is {req.state}",
                    "The re-check is asked for in the case's thread once the scheduler confirms the worker "
                    "gone (R3.9).",
                    session_id=sid,
                    rules=["R3.9", "R3.10"],
                )
            if req.policy == Policy.TWO_PERSON:
                self._not_confirmable(req)
            if not is_requester(self.ctx, actor, req):
                raise Refusal(
                    f"only {ref(req.requester)}, who asked for it, confirms request {req.id}",
                    "Make your own request with `/recover decide …` if you want it.",
                    session_id=sid,
                )
            if req.state == RequestState.APPROVED:
                return self.execution.execute(req.id, actor, reporter)
            return self._grant(req, actor, Step.DECISION_CONFIRMED, {"channel": channel}, reporter)

        return refusing(self.ctx, actor, Step.CONFIRM, inputs, attempt)

    @staticmethod
    def _not_confirmable(req: DecisionRequest) -> None:
        """A two-person request is approved by a second person; its re-check comes only after R3.9."""
        if req.state == RequestState.WAITING:
            raise Refusal(
                f"request {req.id} waits for the scheduler to confirm the worker gone: nothing to re-check yet",
                "The effects re-check is asked for in the case's thread once it is (R3.9, R3.10).",
                session_id=req.session_id,
                rules=["R3.9", "R3.10"],
            )
        in_state(req, RequestState.REQUESTED)
        raise Refusal(
            f"request {req.id} needs approval by a second person, not a confirmation",
            f"Another person runs `{typed_line('approve', req.id)}`.",
            session_id=req.session_id,
        )

    def _grant(
        self,
        req: DecisionRequest,
        actor: str,
        step: str,
        inputs: dict[str, object],
        reporter: Reporter,
        *,
        void_if_changed: bool = False,
    ) -> Reply:
        """Still requested, unchanged, unexpired: win ``requested → approved``, then execute once."""
        in_state(req, RequestState.REQUESTED)
        untampered(self.ctx, req, actor, void=void_if_changed)
        not_expired(self.ctx, req, actor, AGAIN)
        if not grant(self.ctx, req, actor, step, inputs):
            moved(self.ctx, req)
        return self.execution.execute(req.id, actor, reporter)

    def reject(self, actor: str, channel: str | None, request_id: str, reason: str | None = None) -> Reply:
        """An allowed approver rejects; the requester may withdraw their own request."""
        inputs = {"request_id": request_id, "channel": channel, "reason": reason}

        def attempt() -> Reply:
            req = load(self.ctx, request_id)
            sid = req.session_id
            in_recovery_channel(self.ctx, channel, "rejections are", sid)
            own = is_requester(self.ctx, actor, req)
            if not own:
                allowed_approver(self.ctx, actor, sid, req)
            to_state = RequestState.WITHDRAWN if own else RequestState.REJECTED
            ladder_rows.fence(self.ctx.store, self.ctx.clock, req.id)  # no ladder step after it ends
            with self.ctx.store.write() as db:
                won = self.ctx.requests.transition(
                    db,
                    req.id,
                    (RequestState.REQUESTED,),
                    to_state,
                    decided_by=actor,
                    decided_at=self.ctx.iso(),
                    note=reason,
                )
                if won:
                    self.ctx.record(sid, actor, Step.DECISION_REJECTED, inputs, to_state, db=db)
            if not won:
                moved(self.ctx, req)
            fresh = self.ctx.requests.get(req.id) or req
            how = "withdrawn by its requester" if own else f"rejected by {ref(actor)}"
            because = f": {reason}" if reason else ""
            return Reply.of(text.updated_request_message(fresh, f"{how}{because}; nothing was sent", "warn"))

        return refusing(self.ctx, actor, Step.REJECT, inputs, attempt)

    def expire_due(self) -> list[Message]:
        """Expire every pending request past its expiry; returns the updated messages to show."""
        out: list[Message] = []
        for req in self.ctx.requests.find(states=(RequestState.REQUESTED, RequestState.RECHECK)):
            msg = expire_if_due(self.ctx, req, BOT)
            if msg is not None:
                out.append(msg)
        return out
