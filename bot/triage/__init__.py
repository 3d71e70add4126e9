"""Mass-incident triage: every session needing an operator, diagnosed concurrently and grouped by cause."""

from __future__ import annotations

from bot.triage.engine import Triage, runbook_limit
from bot.triage.pace import PacedTransport, RateLimiter, Throttle
from bot.triage.store import Member, StoredGroup, TriageStore

__all__ = [
    "Member",
    "PacedTransport",
    "RateLimiter",
    "StoredGroup",
    "Throttle",
    "Triage",
    "TriageStore",
    "runbook_limit",
]
