"""A batch's authority to send, re-derived from the hash-chained step log alone (docs/requests.md).

The ``batches`` row is a cache; before the first member is sent the chain must show: the
``batch_requested`` step with the content hash the stored batch still hashes to (what the approver
saw is what is sent), and an approval over that hash before the expiry — for a two-person batch a
``batch_approved`` step by someone other than the requester, for a single-person one a
``batch_confirmed`` step by the requester. Anything else sends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from bot.batch.store import Batch
from bot.clock import parse_time
from bot.store import Step
from bot.vocab import Policy
from bot.vocab import Step as StepName


def authority_problem(batch: Batch, stored_hash: str, steps: Iterable[Step]) -> str | None:
    """None when the chain authorises sending ``batch``; otherwise what is missing, in words."""
    if stored_hash != batch.content_hash:
        return "its stored members no longer hash to the content hash it was requested with"
    requested = None
    approval = None
    for step in steps:
        inputs = step.inputs or {}
        if inputs.get("batch_id") != batch.id:
            continue
        detail = step.detail or {}
        if step.step == StepName.BATCH_REQUESTED:
            requested = step
        elif step.step in (StepName.BATCH_APPROVED, StepName.BATCH_CONFIRMED) and detail.get("content_hash") == batch.content_hash:
            approval = step
    if requested is None or (requested.detail or {}).get("content_hash") != batch.content_hash:
        return "the step log has no batch_requested step with this content hash"
    if approval is None:
        return "the step log has no approval or confirmation over this content hash"
    expires = parse_time(batch.expires_at)
    at = parse_time(approval.at)
    if expires is not None and at is not None and at >= expires:
        return f"the approval was recorded after the expiry ({batch.expires_at})"
    if batch.policy == Policy.TWO_PERSON:
        if approval.step != StepName.BATCH_APPROVED or approval.actor == batch.requester:
            return "a two-person batch needs an approval by someone other than its requester"
    elif approval.step != StepName.BATCH_CONFIRMED or approval.actor != batch.requester:
        return "a single-person batch is confirmed by its requester only"
    return None
