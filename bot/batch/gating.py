"""What a batch hands the decisions gate: its claim (rows re-hashed now) and the identity check of an approver.

Why its own module: the gate (bot/decisions/_authority.py) proves batches with the same reading of the
chain as single decisions; this side only says what the rows claim, and refuses an approver by the
same identity function (Slack ids, console logins through RECOVER_CONSOLE_USERS) before anything moves.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.batch.store import Batch, BatchStore, content_hash
from bot.decisions import BatchClaim, Claim, identity_refusal, person_of
from bot.store import Store
from bot.vocab import Step


def claim_of(batches: BatchStore, batch: Batch) -> BatchClaim:
    """What the batch's rows claim (re-hashed now); only the gate's reading of the chain proves it."""
    members = batches.members(batch.id)
    rows = [{"session_id": m.session_id, "revision": m.revision, "facts": m.facts} for m in members]
    claim = Claim(
        what="batch",
        ident=batch.id,
        session_id=None,
        requester=batch.requester,
        policy=batch.policy,
        expires_at=batch.expires_at,
        stored_hash=content_hash(vars(batch), rows),
        row_hash=batch.content_hash,
    )
    return BatchClaim(claim, batch.decision, batch.reason, {m.session_id: dict(m.facts) for m in members})


def approver_refusal(actor: str, batch: Batch, console_users: Mapping[str, str]) -> tuple[str, str, list[str]] | None:
    """(code, headline, lines) when ``actor`` is not a second, identifiable person for ``batch``; else None."""
    refusal = identity_refusal(actor, batch.requester, console_users)
    if refusal is None and person_of(batch.requester, console_users) is None:
        return (
            "unmapped_requester",
            f"batch {batch.id} was requested by an unmapped console login: nobody can be shown to be a second person",
            ["Make the batch again from Slack or from a mapped login."],
        )
    if refusal is None:
        return None
    code, headline, lines = refusal
    return code, headline.replace("request", "batch", 1), [ln.replace("<request_id>", batch.id) for ln in lines]


def tampered(store: Store, batches: BatchStore, batch: Batch) -> bool:
    """At approval: do the rows still hash to what the chain's ``batch_requested`` step recorded?"""
    members = [
        {"session_id": m.session_id, "revision": m.revision, "facts": m.facts} for m in batches.members(batch.id)
    ]
    if content_hash(vars(batch), members) != batch.content_hash:
        return True
    for step in store.steps():
        if step.step == Step.BATCH_REQUESTED and (step.inputs or {}).get("batch_id") == batch.id:
            return (step.detail or {}).get("content_hash") != batch.content_hash
    return True
