"""Decisions: decide, the two-person rule, execution exactly once, verification, resume, cases, hand-offs.

Other packages (the router, batches, the fronts) import from here only, never a private module.
"""

from __future__ import annotations

from bot.decisions._audit import check_request_table
from bot.decisions._authority import Authority, NoAuthority, derive
from bot.decisions._guards import incurable_cause
from bot.decisions._policy import DecisionPolicy, Limits, decision_policy
from bot.decisions._requests import DecisionRequest, RequestStore, Wait, content_hash, migrations
from bot.decisions._rules import (
    CONSOLE_CHANNEL,
    DECISIVE_FACTS,
    ApproverDirectory,
    approver_allowed,
    channel_allowed,
    console_actor,
    person_of,
    same_person,
)
from bot.decisions._service import DecisionService
from bot.decisions._text import APPROVAL_KIND, CONFIRM_KIND

__all__ = [
    "APPROVAL_KIND",
    "CONSOLE_CHANNEL",
    "CONFIRM_KIND",
    "DECISIVE_FACTS",
    "ApproverDirectory",
    "Authority",
    "DecisionPolicy",
    "DecisionRequest",
    "DecisionService",
    "Limits",
    "NoAuthority",
    "RequestStore",
    "Wait",
    "approver_allowed",
    "channel_allowed",
    "check_request_table",
    "console_actor",
    "content_hash",
    "decision_policy",
    "derive",
    "incurable_cause",
    "migrations",
    "person_of",
    "same_person",
]
