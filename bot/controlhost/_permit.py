"""The gate's permit: the only value the control host client's ``send`` accepts.

Why a type: "every POST goes through the gate" used to be a text search for ``client.send(`` in the
source, which a renamed variable slips past. Now ``ControlHostClient.send`` takes a :class:`Permit`,
and a Permit is made only with the gate's seal, a private object of this module that the gate
(``bot/decisions/_authority.py``) imports by its private name. A send without the gate does not
type-check under strict mypy (``tests/gate/test_one_gate.py`` runs mypy on such a file), and a Permit
made with anything but the seal is refused when it is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

from sqlite_utils import Database

from bot.store import IdempotencyRecord

#: Called inside the transaction that records the host's answer; raises to record nothing (a deposed
#: holder of the send's lease, bot/decisions/_sendlease.py).
Fence = Callable[[Database], None]


@final
class _Seal:
    """The one object that makes a Permit; held by the gate."""

    __slots__ = ()


_GATE_SEAL: Final = _Seal()


@final
class Permit:
    """The gate's word that exactly this stored request may be sent now (R0.3: nothing re-runs a turn
    on its own; the gate has proved the chain authorises this record)."""

    __slots__ = ("_fence", "_record")

    def __init__(self, record: IdempotencyRecord, seal: _Seal, *, fence: Fence | None = None) -> None:
        if seal is not _GATE_SEAL:
            raise TypeError("a Permit is made by the gate only (bot/decisions/_authority.py)")
        self._record = record
        self._fence = fence

    @property
    def fence(self) -> Fence | None:
        """What the client calls in the transaction that records the answer (the send lease's fence)."""
        return self._fence

    @property
    def record(self) -> IdempotencyRecord:
        """The stored request the gate proved: its key, method, path and exact body text."""
        return self._record

    def __repr__(self) -> str:
        return f"Permit({self._record.key})"
