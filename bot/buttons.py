"""Button values as typed values: built once here, parsed strictly here, by the router and both fronts.

A click's value comes back from outside (Slack posts it, the console reads it back from a choice), so it
is read like any input: a value this module did not build, or built for a session or decision the
runbook does not know, is refused with one line before anything happens.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from bot.errors import CommandError

SEPARATOR = "|"


class BadButtonValue(CommandError):
    """A button value that is not one this bot builds (malformed, forged or stale); nothing was done."""


@dataclass(frozen=True)
class DecisionChoice:
    """What a decision button carries: the session and the decision the person chose for it."""

    session_id: str
    decision: str

    def encode(self) -> str:
        """``session|decision``: Slack's button value (at most 2,000 characters) and the console's choice.

        Not checked here: :meth:`parse` refuses whatever is not a choice the runbook allows."""
        return f"{self.session_id}{SEPARATOR}{self.decision}"

    @classmethod
    def parse(
        cls,
        value: str,
        *,
        ids: re.Pattern[str] | None,
        decisions: Collection[str],
    ) -> DecisionChoice:
        """The choice in ``value``, or :class:`BadButtonValue`: exactly one separator, a session id the
        runbook's id pattern accepts (``ids``; None accepts none), a decision the runbook defines."""
        parts = value.split(SEPARATOR)
        if len(parts) != 2:
            raise _bad(value, "expected one session and one decision")
        session_id, decision = parts
        if ids is None or not ids.fullmatch(session_id):
            raise _bad(value, f"{session_id[:40]!r} is not a valid session id")
        if decision not in decisions:
            raise _bad(value, f"{decision[:40]!r} is not a decision of the runbook")
        return cls(session_id, decision)


def _bad(value: str, why: str) -> BadButtonValue:
    return BadButtonValue(
        f"Refused a decision button with value {value[:60]!r}: {why}; nothing was done. "
        "Run diagnose again for fresh buttons, or type the decide command."
    )
