"""The checks before a decision request moves, each raising one :class:`Refusal`.

Why one exception: decide, approve, confirm and reject run overlapping chains of checks (channel,
request id, the two-person rule's identity and approver checks, state, tampering, expiry). Each check
is a function here that either returns what it found or raises a ``Refusal`` carrying the reply's
words; :func:`refusing` is the one place that records the refused attempt as a step (the audit shows
attempts too) and turns it into the reply. No front end can skip them: every path ends in the core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from bot.clock import parse_time
from bot.decisions import _ladder_rows as ladder_rows
from bot.decisions import _text as text
from bot.decisions._authority import approval_evidence_of
from bot.decisions._context import DecisionContext
from bot.decisions._requests import DecisionRequest, content_hash
from bot.decisions._rules import (
    ID_RE,
    identity_refusal,
    same_person,
)
from bot.decisions._widening import widened_now
from bot.diagnosis.cure import cause_fixed_line, session_cure
from bot.ids import is_request_id
from bot.messages import Message, Reply, ref
from bot.runbook.usage import typed_line
from bot.vocab import RequestState, Step

AttemptInputs = Mapping[str, Any]


class Refusal(Exception):
    """A check said no: the headline and actionable lines people read, and the outcome recorded."""

    def __init__(
        self,
        headline: str,
        *lines: str,
        session_id: str | None = None,
        rules: Sequence[str] = (),
        extra: Sequence[Message] = (),
        code: str = "refused",
    ) -> None:
        super().__init__(headline)
        self.headline = headline
        self.lines = lines
        self.session_id = session_id
        self.rules = tuple(rules)
        self.extra = tuple(extra)
        self.code = code


def refusing(ctx: DecisionContext, actor: str, step: str, inputs: AttemptInputs, attempt: Callable[[], Reply]) -> Reply:
    """Run ``attempt``; a :class:`Refusal` from any check inside is recorded as ``step`` and answered."""
    try:
        return attempt()
    except Refusal as no:
        return ctx.refuse(
            actor,
            no.session_id,
            step,
            inputs,
            no.headline,
            *no.lines,
            rules=no.rules,
            extra=no.extra,
            code=no.code,
        )


# -- before a request exists ------------------------------------------------------------------------


def in_recovery_channel(ctx: DecisionContext, channel: str | None, what: str, session_id: str | None = None) -> None:
    """The channel rule (bot/channels.py): decide, approve, confirm and reject only there."""
    if not ctx.channels.allows(channel):
        raise Refusal(
            f"{what} refused outside the recovery channels ({ctx.channels.source})",
            ctx.channels.hint(channel),
            session_id=session_id,
        )


def valid_ids(session_id: str, turn_id: str | None) -> None:
    for label, value in (("session", session_id), ("turn", turn_id)):
        if value is not None and not ID_RE.match(value):
            raise Refusal(f"invalid {label} id {value!r}", "Ids are letters, digits and _.:- (up to 128 characters).")


# -- what a retry cannot cure (R2.3, R2.8, R5.3): the rule is bot.diagnosis.cure's ----------------------


def cause_fixed_given(decision: str, facts: Mapping[str, Any], cause_fixed: str | None, session_id: str) -> None:
    """A single ``retry_restore`` an incurable cause stands behind needs ``--cause-fixed`` exactly as a
    batch member does (R2.3, R2.8, R5.3); refused before any request is made, nothing sent."""
    if (cause_fixed or "").strip():
        return
    bad = session_cure(decision, facts)
    if bad is None:
        return
    why, rule = bad
    raise Refusal(
        f"`retry_restore` on `{session_id}` needs --cause-fixed: {why}",
        "Nothing was sent.",
        f"Fix the cause first, then say what changed: {cause_fixed_line(session_id)}; "
        "or drop the context with start_fresh, or close.",
        session_id=session_id,
        rules=[rule, "R5.3", "R5.4"],
        code="cause_not_fixed",
    )


# -- the request and its state ------------------------------------------------------------------


def load(ctx: DecisionContext, request_id: str) -> DecisionRequest:
    """The stored request named by ``request_id`` (req_…)."""
    req = ctx.requests.get(request_id) if is_request_id(request_id) else None
    if req is None:
        raise Refusal(f"no decision request {request_id!r}", "Copy the id from the request's message (req_…).")
    return req


def in_state(req: DecisionRequest, *states: str) -> None:
    """The request is still in one of ``states`` (else: what became of it, nothing more to do)."""
    if req.state not in states:
        raise Refusal(text.state_text(req), session_id=req.session_id)


def moved(ctx: DecisionContext, req: DecisionRequest) -> NoReturn:
    """Another writer won the compare-and-set: say what became of the request."""
    raise Refusal(text.state_text(ctx.requests.get(req.id) or req), session_id=req.session_id)


def untampered(ctx: DecisionContext, req: DecisionRequest, actor: str, *, void: bool = False) -> None:
    """The stored content still hashes to the value the chain recorded when it was made; with
    ``void`` a changed request is voided on the way (nobody can approve it later)."""
    if not tampered(ctx, req):
        return
    extra: list[Message] = []
    if void:
        ladder_rows.fence(ctx.store, ctx.clock, req.id)  # no ladder step after the void
        with ctx.store.write() as db:
            ctx.requests.transition(
                db,
                req.id,
                (RequestState.REQUESTED,),
                RequestState.VOID,
                decided_by=actor,
                decided_at=ctx.iso(),
                note="content changed after it was requested",
            )
        fresh = ctx.requests.get(req.id) or req
        extra.append(text.updated_request_message(fresh, "void: content changed", "error"))
    raise Refusal(
        f"request {req.id} was changed after it was requested: " + ("approval refused" if void else "nothing was sent"),
        "Its stored content no longer matches the hash recorded when it was made. "
        "Make a new request, and check the step store with `recover-bot audit verify`.",
        session_id=req.session_id,
        extra=extra,
        code="tampered",
    )


def tampered(ctx: DecisionContext, req: DecisionRequest) -> bool:
    if content_hash(req.content()) != req.content_hash:
        return True
    for step in ctx.store.steps(session_id=req.session_id):
        if step.step == Step.DECISION_REQUESTED and (step.detail or {}).get("request_id") == req.id:
            return (step.detail or {}).get("content_hash") != req.content_hash
    return True


def expire_if_due(ctx: DecisionContext, req: DecisionRequest, actor: str) -> Message | None:
    """``requested``/``recheck`` past its expiry → ``expired`` (one winner); the updated message."""
    expires = parse_time(req.expires_at)
    # An unanswered effects re-check lapses with the request (R3.9): the approval's expiry governs.
    if req.state not in (RequestState.REQUESTED, RequestState.RECHECK) or expires is None or ctx.now() < expires:
        return None
    ladder_rows.fence(ctx.store, ctx.clock, req.id)  # no ladder step after the expiry
    with ctx.store.write() as db:
        if ctx.requests.transition(
            db, req.id, (req.state,), RequestState.EXPIRED, decided_by=actor, decided_at=ctx.iso(), note="expired"
        ):
            ctx.record(
                req.session_id, actor, Step.DECISION_EXPIRED, {"request_id": req.id}, RequestState.EXPIRED, db=db
            )
    fresh = ctx.requests.get(req.id) or req
    if fresh.state != RequestState.EXPIRED:
        return None
    return text.updated_request_message(fresh, f"expired at {req.expires_at}; nothing was sent", "warn")


def not_expired(ctx: DecisionContext, req: DecisionRequest, actor: str, *lines: str, rules: Sequence[str] = ()) -> None:
    expired = expire_if_due(ctx, req, actor)
    if expired is not None:
        raise Refusal(
            f"request {req.id} has expired: nothing was sent",
            *lines,
            session_id=req.session_id,
            rules=rules,
            extra=[expired],
            code="expired",
        )


# -- who may act (the two-person rule, R3.10) -----------------------------------------------------


def second_person(ctx: DecisionContext, actor: str, req: DecisionRequest) -> None:
    """Not the requester under any name (compared by Slack id), and an identifiable person (R3.10)."""
    refusal = identity_refusal(actor, req.requester, ctx.console_users)
    if refusal is None:
        return
    code, headline, lines = refusal
    if code == "self_approval":
        lines, rules = [f"Ask another on-call engineer to run `{typed_line('approve', req.id)}`."], ["R3.10"]
    else:
        rules = []
    raise Refusal(headline, *lines, session_id=req.session_id, rules=rules, code=code)


def allowed_approver(
    ctx: DecisionContext, actor: str, session_id: str, req: DecisionRequest | None = None
) -> dict[str, Any]:
    """What allows ``actor`` to approve now (RECOVER_APPROVERS, widened by ``req``'s ladder as the chain
    records it), by its Slack id: recorded with the approval and never looked up again; a console
    login's mapping is recorded too."""
    widened = (
        widened_now(ctx.runbooks.escalation, ctx.store.steps(session_id=session_id), req.id, ctx.now())
        if req is not None and ctx.runbooks.escalation is not None
        else ()
    )
    evidence, problem = approval_evidence_of(actor, ctx.approvers, ctx.directory, ctx.console_users, widened)
    if evidence is None:
        raise Refusal(
            f"{ref(actor)} is not an allowed approver (RECOVER_APPROVERS)",
            *([problem] if problem else []),
            "Allowed approvers: " + ", ".join((*ctx.approvers, *widened)) + ".",
            session_id=session_id,
            code="not_approver",
        )
    return evidence


def is_requester(ctx: DecisionContext, actor: str, req: DecisionRequest) -> bool:
    """One person, compared by Slack id (a Slack user and their own mapped console login are one)."""
    return same_person(actor, req.requester, ctx.console_users)
