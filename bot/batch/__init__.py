"""Batch decisions: one decision for a triage group or a list of sessions, each member sent once."""

from __future__ import annotations

from bot.batch.service import BatchService
from bot.batch.store import BatchStore

__all__ = ["BatchService", "BatchStore"]
