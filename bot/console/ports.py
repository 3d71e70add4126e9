"""What the console can do for the core in the demo, handed INTO composition (:class:`bot.app.compose.FrontPorts`).

The demo has no Slack: watch mode and the escalation ladder speak in the console, the ladder at
shortened times. The real console hands in nothing (``FrontPorts()``): no watcher, a ladder that
answers ``remind`` in the reply, and break-glass refused before anything is sent (nobody would be told).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.app.compose import FrontPorts
from bot.console.ladder import DEMO_LADDER_SPEEDUP, ConsoleLadderPoster
from bot.console.watching import DEMO_POLLS_ON, ConsoleWatchPoster
from bot.escalation.runner import LadderRunner
from bot.messages import Message
from bot.watch import ConsoleMembers, Watcher

#: The demo's watch channel: the console itself.
DEMO_WATCH_CHANNEL = "console"


class ConsoleSays:
    """Where the demo's watch and ladder speak: the console's own ``show``, once the console runs.

    Composition needs the posters before the console exists (the console is built over the composed
    router), so what they say before then is held, and shown first when the console starts."""

    def __init__(self) -> None:
        self._show: Callable[[Message], None] | None = None
        self._held: list[Message] = []

    def __call__(self, message: Message) -> None:
        if self._show is None:
            self._held.append(message)
        else:
            self._show(message)

    def to(self, show: Callable[[Message], None]) -> None:
        """From now on say it through ``show`` (what was held first, in order)."""
        self._show = show
        held, self._held = self._held, []
        for message in held:
            show(message)


@dataclass(frozen=True)
class DemoParts:
    """The demo's composed background parts the console drives (no loop runs them: its commands do)."""

    says: ConsoleSays
    watcher: Watcher | None
    ladder: LadderRunner | None
    #: What the demo says at its start about its ladder (None without one).
    ladder_line: str | None


def demo_ports(says: ConsoleSays) -> FrontPorts:
    """The demo's ports: watch and the ladder speak through ``says``, the ladder runs faster."""
    watch = ConsoleWatchPoster(says)
    ladder = ConsoleLadderPoster(says)
    return FrontPorts(
        ladder_poster=lambda installation, named: ladder,
        watch_poster=lambda installation, named: watch,
        members=ConsoleMembers(),
        watch_channel=DEMO_WATCH_CHANNEL,
        watch_polls_on=DEMO_POLLS_ON,
        ladder_speedup=DEMO_LADDER_SPEEDUP,
    )


__all__ = ["DEMO_WATCH_CHANNEL", "ConsoleSays", "DemoParts", "demo_ports"]
