"""What a ``retry_restore`` cannot cure (R2.3, R2.8, R5.3), read from a session's facts.

One owner for diagnose, triage, a single ``decide`` and every batch member: each says, or refuses, the
same ``--cause-fixed`` the others would ask for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bot.runbook.usage import decide_line

# Reasons and worker errors whose cause a retry of the same checkpoint cannot cure (R2.3, R2.8).
_DAMAGE = re.compile(
    r"incompatible_checkpoint|restore_refused|CHECKPOINT_UNAVAILABLE|NoSuchKey|AccessDenied|digest|checksum"
    r"|\b40[134]\b",
    re.IGNORECASE,
)


_TRANSIENT_REASONS = ("restore_unavailable", "store_unavailable")


def incurable_cause(
    facts: Mapping[str, Any], *, branch: str | None = None, damage: bool = False
) -> tuple[str, str] | None:
    """(why, rule) when ``retry_restore`` cannot cure this session's cause; None otherwise.

    One owner for a single ``decide`` and every batch member: an incompatible checkpoint (R2.3, R5.3)
    or permanent damage (R2.8) needs ``--cause-fixed "…"`` saying what changed. ``damage``: the worker
    logs showed permanent damage (a batch's examples, or ``logs.permanent_damage``).
    """
    if facts.get("attention.reason") == "incompatible_checkpoint" or branch == "restore_incompatible":
        return "incompatible checkpoint: a retry on the same runtime/profile never succeeds", "R2.3"
    reason = facts.get("attention.reason")
    # R2.6 vs R2.8: the API's structured reason naming an outage wins over damage read in log lines.
    if branch == "restore_permanent" or (damage and reason not in _TRANSIENT_REASONS):
        return "permanent damage to the checkpoint: a restart does not cure it", "R2.8"
    if isinstance(reason, str) and _DAMAGE.search(reason):
        return f"the last worker error ({reason}) is permanent damage, not an outage", "R2.8"
    return None


def session_cure(decision: str, facts: Mapping[str, Any]) -> tuple[str, str] | None:
    """(why, rule) when this one session's ``decision`` needs ``--cause-fixed`` (R2.3, R2.8, R5.3): the
    question diagnose answers up front and a single ``decide`` refuses on."""
    if decision != "retry_restore":
        return None
    return incurable_cause(facts, damage=facts.get("logs.permanent_damage") is True)


def cause_fixed_line(session_id: str) -> str:
    """The ``retry_restore`` a person types once the incurable cause is fixed (R5.3)."""
    return decide_line(session_id, "retry_restore", {}, needs=("cause-fixed",))
