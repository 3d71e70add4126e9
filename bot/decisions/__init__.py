"""Decisions: decide, the two-person rule, execution exactly once, verification, resume, cases, hand-offs.

Other packages (the router, batches, the fronts) import from here only, never a private module.
"""

from __future__ import annotations

from bot.decisions._audit import check_request_table
from bot.decisions._authority import (
    Authority,
    BatchClaim,
    BatchGrant,
    Claim,
    Gate,
    NoAuthority,
    approval_evidence_of,
    batch_policy,
    derive,
)
from bot.decisions._cases import IN_HAND, NO_ONE, NOW, HandoffDigest, HandoffEntry
from bot.decisions._decide import EXECUTED_OVER
from bot.decisions._glass import Notice
from bot.decisions._policy import DecisionPolicy, Limits, decision_policy
from bot.decisions._requests import DecisionRequest, RequestStore, Wait, content_hash, migrations
from bot.decisions._rules import (
    CONSOLE_CHANNEL,
    DECISIVE_FACTS,
    ApproverDirectory,
    approver_allowed,
    console_actor,
    identity_refusal,
    person_of,
    requester_refusal,
    same_person,
)
from bot.decisions._sendlease import SendInFlight, lease_limit
from bot.decisions._service import DecisionService
from bot.decisions._text import APPROVAL_KIND, CONFIRM_KIND
from bot.decisions._uncertain import Unanswered, is_uncertain
from bot.decisions._verify import RESULT_KIND
from bot.decisions._watch import BEFORE
from bot.diagnosis.cure import incurable_cause

__all__ = [
    "IN_HAND",
    "NO_ONE",
    "NOW",
    "HandoffDigest",
    "HandoffEntry",
    "APPROVAL_KIND",
    "BEFORE",
    "CONSOLE_CHANNEL",
    "CONFIRM_KIND",
    "DECISIVE_FACTS",
    "RESULT_KIND",
    "EXECUTED_OVER",
    "ApproverDirectory",
    "Authority",
    "BatchClaim",
    "BatchGrant",
    "Claim",
    "Gate",
    "DecisionPolicy",
    "DecisionRequest",
    "DecisionService",
    "Limits",
    "NoAuthority",
    "Notice",
    "RequestStore",
    "Unanswered",
    "Wait",
    "approval_evidence_of",
    "approver_allowed",
    "batch_policy",
    "check_request_table",
    "console_actor",
    "content_hash",
    "decision_policy",
    "derive",
    "identity_refusal",
    "incurable_cause",
    "is_uncertain",
    "SendInFlight",
    "lease_limit",
    "migrations",
    "person_of",
    "requester_refusal",
    "same_person",
]
