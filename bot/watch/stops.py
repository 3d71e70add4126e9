"""What identifies one stop of a session, so the watcher opens one case per stop and never two.

A stop is (session, what stopped it: attention code and reason, failure count, the unknown turn's id,
the revision it was first seen at). The first four are the stop's *signature*: while the session stays
listed with the same signature it is the same stop, whatever its revision moved to since. Once the
session leaves the listing, the same signature seen again later is a new stop (a new first revision),
hence a new key (R2.1, R2.12, R3.1).

The key is also the installation's: the session as that installation's (bot/ids.py ``ScopedId``
text form, the bare id for ``default``, so its keys are as they always were), because a watcher
taking over a dead owner's claim looks for the key in the channel, and two installations may post in
one watch channel about the same session id.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from bot.controlhost import Session
from bot.ids import DEFAULT_INSTALLATION, tagged


@dataclass(frozen=True)
class Stop:
    session_id: str
    code: str | None
    reason: str | None
    failures: int | None
    unknown_turn_id: str | None
    revision: int | None
    installation: str = DEFAULT_INSTALLATION

    @property
    def signature(self) -> str:
        """What stopped the session, without the revision: equal while it is the same stop."""
        return json.dumps([self.code, self.reason, self.failures, self.unknown_turn_id], separators=(",", ":"))

    @property
    def key(self) -> str:
        """The dedup key committed before anything is posted (the first revision makes a recurrence new)."""
        session = (
            self.session_id if self.installation == DEFAULT_INSTALLATION else tagged(self.session_id, self.installation)
        )
        text = json.dumps([session, self.signature, self.revision], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def describe(self) -> str:
        parts = [p for p in (self.code, self.reason) if p]
        if self.failures is not None:
            parts.append(f"failures {self.failures}")
        if self.unknown_turn_id:
            parts.append(f"unknown turn {self.unknown_turn_id}")
        return ", ".join(parts) or "no attention given"


def described(signature: str) -> str:
    """A stored signature, said as :meth:`Stop.describe` says it."""
    code, reason, failures, turn = json.loads(signature)
    return Stop("", code, reason, failures, turn, None).describe()


def stop_of(session: Session, unknown_turn_id: str | None = None, installation: str = DEFAULT_INSTALLATION) -> Stop:
    attention = session.attention
    return Stop(
        session_id=session.id,
        code=attention.code if attention else None,
        reason=attention.reason if attention else None,
        failures=attention.failures if attention else None,
        unknown_turn_id=unknown_turn_id,
        revision=session.revision,
        installation=installation,
    )
