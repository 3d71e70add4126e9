"""The demo's escalation ladder: it runs, with its times shortened, and speaks in the console.

Against a real control host the ladder runs in ``serve`` and speaks in Slack; the demo has no Slack,
so its steps are said here, in the console, as the request's thread would show them, at the demo's
shortened times (the banner says so). A step is marked said only once it was shown, so break-glass's
"the escalation ladder ran to its end" is true when the demo says it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from bot.decisions import CONSOLE_CHANNEL
from bot.format import duration
from bot.messages import Message
from bot.runbook.escalation import EscalationSpec

#: The demo's ladder runs this many times faster than the runbook says (10 min → 1 min).
DEMO_LADDER_SPEEDUP = 10


def shortened_line(spec: EscalationSpec) -> str:
    """What the demo says at its start about its ladder (the times it runs at, and that they are short)."""
    parts = [f"{step.kind} {duration(step.after_seconds)}" for step in spec.steps]
    times = ", ".join([*parts, f"expiry {duration(spec.expiry_seconds)}"])
    return (
        f"The escalation ladder runs here {DEMO_LADDER_SPEEDUP}× faster than the runbook says ({times}, "
        "from the request); its steps are said in the console."
    )


class ConsoleLadderPoster:
    """The console as every request's thread: each step is shown at once and remembered, so a claim
    taken over later is found by its key line here as in Slack."""

    def __init__(self, show: Callable[[Message], None]) -> None:
        self.show = show
        self.said: list[tuple[str, str]] = []  # (ts, text)
        self._ts = itertools.count(1)

    def thread_of(self, request: object) -> tuple[str, str | None] | None:
        return (CONSOLE_CHANNEL, None)

    def post(self, channel: str, message: Message, thread_ts: str | None) -> str | None:
        ts = f"ladder.{next(self._ts):06d}"
        self.said.append((ts, message.plain_text()))
        self.show(message)
        return ts

    def find(self, channel: str, text: str, thread_ts: str | None) -> str | None:
        return next((ts for ts, said in reversed(self.said) if text in said), None)

    def request_message(self, request_id: str) -> tuple[str, str] | None:
        return None  # the console has no message to edit in place: `pending` shows the live state

    def update(self, channel: str, ts: str, message: Message) -> float | None:
        return None
