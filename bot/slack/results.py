"""Results a dead worker recorded and never said: said in their case's thread by whichever worker sees them.

Why: a request's verification (R5.1) is recorded by the core, then posted by the delivery of the command
or click that ran it, seconds later under load. A worker SIGKILLed between the two left the result in
the store and nothing in Slack, while its person was told their delivery was interrupted and that its
request "is reported in the case's thread". So every worker (every bot on one store) reads, every
``every`` seconds, the requests' verifications recorded since its last look, and offers each one older
than ``grace`` to the same delivery as any result (:meth:`bot.slack.delivery.SlackReporter.post`),
which claims its one saying (:meth:`bot.slack.state.SlackState.claim_ref`) before it posts: the live
reply, this pass and another bot's pass say it once between them. ``grace`` (twice the time a worker
is taken for dead) keeps this pass from racing a live reply that is only slow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.messages import Reporter

if TYPE_CHECKING:
    from bot.app.services import Services

log = logging.getLogger(__name__)

#: How far back a worker looks when it starts: a result older than this is a thread's history.
WITHIN = timedelta(hours=1)


class UnsaidResults:
    """One worker's periodic saying of the results recorded and never said, per installation."""

    def __init__(self, cores: Mapping[str, Services], reporter_for: Callable[[str], Reporter], grace: float) -> None:
        self.cores = dict(cores)
        self.reporter_for = reporter_for
        self.grace = timedelta(seconds=grace)
        self._after: dict[str, int] = {}  # the last step looked at, per installation (seqs only grow)

    def look(self) -> int:
        """Offer each result recorded since the last look and older than ``grace``; how many were offered."""
        offered = 0
        for name, services in self.cores.items():
            found = services.decisions.results_recorded(self._after.get(name, 0), older_than=self.grace, within=WITHIN)
            reporter = self.reporter_for(name)
            for seq, message in found:
                self._after[name] = seq
                reporter.post(message)  # said unless a live reply or another worker claimed it first
                offered += 1
        return offered

    def run(self, stop: threading.Event, every: float) -> None:
        """Until ``stop``: :meth:`look` every ``every`` seconds; a failed look is logged, the next one runs."""
        while not stop.wait(every):
            try:
                self.look()
            except Exception:  # noqa: BLE001 - a daemon thread has nobody to raise to
                log.exception("saying the results a stopped worker left failed; the next look tries again")
