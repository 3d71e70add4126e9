"""The moves of a request that several rooms make, each with its step in the same commit.

Why here: ``decide`` and the effects re-check both make a new request (content, hash, the
``decision_requested`` step the authority check later reads); ``decide --yes``, ``confirm`` and
``approve`` all win ``requested → approved`` by compare-and-set and record who allowed it. One
function each, so the chain's shape for a request has one author. :class:`Execution` is what the
lifecycle rooms need of the execution half (send once, with fresh facts).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

from sqlite_utils import Database

from bot.decisions import _ladder_rows as ladder_rows
from bot.decisions._context import DecisionContext
from bot.decisions._policy import DecisionPolicy
from bot.decisions._requests import DecisionRequest, new_request_id
from bot.decisions._rules import decisive_facts, person_of
from bot.messages import Reply, Reporter
from bot.vocab import Policy, RequestState, Step

# Facts shown with a request (the second person sees what the requester saw).
SHOWN_FACTS = (
    "session.status",
    "session.admission_state",
    "session.revision",
    "session.resumable",
    "attention.code",
    "attention.reason",
    "attention.failures",
    "attention.retry_at",
    "checkpoint.id",
    "checkpoint.covers_turn_id",
    "execution.state",
    "execution.confirmed_gone",
    "unknown_turn.id",
    "unknown_turn.terminal_reason",
    "unknown_turn.covered_by_checkpoint",
    "logs.likely_cause",
    # Whether each object exists, so an absent one reads "none" and an unread one "unknown".
    "attention.present",
    "checkpoint.present",
    "unknown_turn.present",
)


class Execution(Protocol):
    """The execution half, as the lifecycle rooms call it once a request is approved."""

    def execute(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        """``approved → sending``: facts re-checked, then sent exactly once."""
        ...

    def send_fresh(self, req: DecisionRequest, actor: str, reporter: Reporter, *, from_state: str, retry: str) -> Reply:
        """A fresh diagnosis (or a refusal saying ``retry``), then check-and-send from ``from_state``."""
        ...


def request_content(
    ctx: DecisionContext,
    policy: DecisionPolicy,
    *,
    session_id: str,
    turn_id: str | None,
    evidence_ref: str | None,
    effects: str | None,
    reason: str,
    requester: str,
    channel: str | None,
    facts: Mapping[str, Any],
    turn_status: str | None,
    repeated: int,
) -> dict[str, Any]:
    """A new request's content: what the approver approves, bound by its hash (a new id)."""
    now = ctx.now()
    return {
        "id": new_request_id(ctx.store.installation),
        "session_id": session_id,
        "decision": policy.name,
        "turn_id": turn_id,
        "evidence_ref": evidence_ref,
        "effects": effects,
        "reason": reason,
        "requester": requester,
        "channel": channel,
        "policy": policy.approval,
        "facts": decisive_facts(facts, turn_status),
        "shown_facts": {k: facts.get(k) for k in SHOWN_FACTS},
        "repeated": repeated,
        "created_at": ctx.iso(now),
        "expires_at": ctx.iso(now + timedelta(seconds=policy.expiry_seconds)),
        "installation": ctx.store.installation,
    }


def make_request(
    ctx: DecisionContext,
    db: Database,
    content: Mapping[str, Any],
    inputs: Mapping[str, Any],
    **detail: str,
) -> DecisionRequest:
    """Insert the request and its ``decision_requested`` step in the caller's transaction."""
    req = ctx.requests.insert(db, content)
    ladder = ctx.runbooks.escalation
    if ladder is not None and req.policy == Policy.TWO_PERSON:  # its due ladder steps, in the same commit
        ladder_rows.schedule(db, ctx.store, req, [(s.kind, s.after_seconds) for s in ladder.steps], req.expires_at)
    ctx.record(
        req.session_id,
        req.requester,
        Step.DECISION_REQUESTED,
        inputs,
        req.state,
        detail={
            "request_id": req.id,
            "state": req.state,  # the first state; the chain then records every transition
            "policy": req.policy,
            "content_hash": req.content_hash,
            "facts": req.facts,
            "repeated": req.repeated,
            # Who the requester is, by Slack id (None: an unmapped console login); the authority
            # check compares the approver with it (RECOVER_CONSOLE_USERS).
            "person": person_of(req.requester, ctx.console_users),
            **detail,
        },
        db=db,
    )
    return req


def grant(ctx: DecisionContext, req: DecisionRequest, actor: str, step: str, inputs: Mapping[str, Any]) -> bool:
    """``requested → approved`` (one winner across processes) and its ``step``: decision_approved by a
    second person (R3.10), decision_confirmed or break_glass by the requester. False: someone moved it
    first."""
    ladder_rows.fence(ctx.store, ctx.clock, req.id)  # no ladder step is posted after the approval
    with ctx.store.write() as db:
        won = ctx.requests.transition(
            db, req.id, (RequestState.REQUESTED,), RequestState.APPROVED, approved_by=actor, approved_at=ctx.iso()
        )
        if won:
            ctx.record(
                req.session_id,
                actor,
                step,
                {"request_id": req.id, "content_hash": req.content_hash, **inputs},
                RequestState.APPROVED,
                db=db,
            )
    return won
