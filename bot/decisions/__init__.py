"""Decisions: decide, the two-person rule, execution exactly once, verification, resume, cases, hand-offs."""

from __future__ import annotations

from bot.decisions._authority import Authority, NoAuthority, check_request_table, derive
from bot.decisions._policy import DecisionPolicy, Limits
from bot.decisions._requests import DecisionRequest, RequestStore, Wait, content_hash, migrations
from bot.decisions._rules import (
    CONSOLE_CHANNEL,
    DECISIVE_FACTS,
    ApproverDirectory,
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
    "check_request_table",
    "console_actor",
    "content_hash",
    "migrations",
    "derive",
    "person_of",
    "same_person",
]
