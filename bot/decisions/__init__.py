"""Decisions: decide, the two-person rule, execution exactly once, verification, resume, cases, hand-offs."""

from __future__ import annotations

from bot.decisions._authority import Authority, NoAuthority, check_request_table, derive
from bot.decisions._policy import DecisionPolicy, Limits
from bot.decisions._requests import DecisionRequest, RequestStore, Wait, content_hash
from bot.decisions._rules import DECISIVE_FACTS, ApproverDirectory
from bot.decisions._service import DecisionService
from bot.decisions._text import APPROVAL_KIND, CONFIRM_KIND

__all__ = [
    "APPROVAL_KIND",
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
    "check_request_table",
    "content_hash",
    "derive",
]
