"""Only the gate sends: no module but bot/decisions/_authority.py calls the control host client's ``send``
(the one POST method), so a new path that sends must be a new caller of the gate."""

from __future__ import annotations

import re
from pathlib import Path

BOT = Path(__file__).resolve().parents[2] / "bot"
SENDS = re.compile(r"^(?!\s*(#|Re-send)).*\bclient\.send\(", re.MULTILINE)  # code, not the docs


def test_the_gate_is_the_only_caller_of_the_clients_send() -> None:
    callers = sorted(
        str(p.relative_to(BOT)) for p in BOT.rglob("*.py") if SENDS.search(p.read_text(encoding="utf-8"))
    )
    assert callers == ["decisions/_authority.py"], callers
