"""What a dead worker recorded and never said: said in the case's thread by whichever worker looks first.

Why: the core records a step, then the delivery of the command or click that ran it posts what it says,
seconds later under load. A worker SIGKILLed between the two left it in the store and nothing in Slack,
while its person was told their delivery was interrupted and that its request "is reported in the case's
thread". Two such messages matter to the next person:

- a two-person request's approval request (its first showing, kept in the store before the post): the
  second person never sees it, and the escalation ladder finds no message to escalate;
- a request's result, its verification (R5.1), kept in its step as it was said.

So every worker (every bot on one store) looks every ``every`` seconds at the requests waiting for
approval and the results recorded since its last look, and offers each one older than ``grace`` to the
same delivery as any message said once (``Message.said_once``): the delivery claims the saying
(:meth:`bot.slack.state.SlackState.claim_ref`) before it posts, so the live reply, this look and another
bot's look say it once between them. ``grace`` (twice the time a worker is taken for dead) keeps a look
from racing a live reply that is only slow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.messages import Reporter

if TYPE_CHECKING:
    from bot.app.compose import Composed
    from bot.app.services import Services
    from bot.slack.app import SlackBot

log = logging.getLogger(__name__)

#: How far back a worker looks: what is older is a thread's history (or the ladder's business).
WITHIN = timedelta(hours=1)


class UnsaidLook:
    """One worker's periodic look at what was recorded and never said, per installation."""

    def __init__(
        self, cores: Mapping[str, Services], reporter_for: Callable[[str, str | None], Reporter], grace: float
    ) -> None:
        self.cores = dict(cores)
        self.reporter_for = reporter_for
        self.grace = timedelta(seconds=grace)
        self._after: dict[str, int] = {}  # the last result step looked at, per installation (seqs only grow)
        self._asked: dict[str, set[str]] = {}  # approval requests offered here, per installation (once each)

    def look(self) -> int:
        """Offer what was recorded since the last look and is older than ``grace``; how many were offered."""
        offered = 0
        for name, services in self.cores.items():
            decisions = services.decisions
            asked = self._asked.setdefault(name, set())
            for channel, message in decisions.approvals_unshown(older_than=self.grace, within=WITHIN, skip=asked):
                if message.ref is None:
                    continue
                asked.add(message.ref)
                # In its case's thread, started in the channel it was asked in when its worker died first.
                self.reporter_for(name, channel).post(message)  # unless its reply or another look claimed it
                offered += 1
            reporter = self.reporter_for(name, None)
            found = decisions.results_recorded(self._after.get(name, 0), older_than=self.grace, within=WITHIN)
            for seq, message in found:
                self._after[name] = seq
                reporter.post(message)  # said unless its reply or another worker claimed it first
                offered += 1
        return offered

    def run(self, stop: threading.Event, every: float) -> None:
        """Until ``stop``: :meth:`look` every ``every`` seconds; a failed look is logged, the next one runs."""
        while not stop.wait(every):
            try:
                self.look()
            except Exception:  # noqa: BLE001 - a daemon thread has nobody to raise to
                log.exception("saying what a stopped worker left unsaid failed; the next look tries again")


def unsaid_look(bot: SlackBot, composed: Composed) -> UnsaidLook:
    """The look of ``serve``'s worker over every installation it serves: each offer goes out through
    the bot's own delivery, named by its installation (several served) as every message of it is."""
    return UnsaidLook(
        composed.cores,
        lambda name, channel: composed.router.named_reporter(name, bot.background_reporter(channel)),
        grace=2 * bot.settings.worker_stale_seconds,
    )
