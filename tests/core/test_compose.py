"""The one composition root's background parts: ``Composed.start`` runs every watcher and ladder runner
of the fleet on threads named by installation (as serve's worker does), ``stop`` ends them; each
installation's router answers through the same watcher and runner. The real Slack harness over HTTP,
the sandbox control host, real SQLite."""

from __future__ import annotations

import threading
from typing import Any

from bot.messages import ListReporter
from tests.fixtures.waiting import eventually

CHANNEL = "C0WATCH"


def test_start_runs_each_watcher_and_ladder_runner_until_stop(sandbox: Any, slack_harness: Any) -> None:
    h = slack_harness.real(sandbox, watch_channel=CHANNEL)
    composed = h.composed
    watcher, runner = composed.watchers["default"], composed.ladders["default"]
    assert composed.threads == []  # composing starts nothing
    composed.start()
    try:
        names = {t.name for t in threading.enumerate()}
        assert {"recover-watch-default", "recover-ladder-default", "recover-replay-default"} <= names
        eventually(lambda: watcher.last_poll is not None, 10, "the watcher's first poll")
        said = composed.router.handle_text("/recover watch", actor="UALICE", channel=CHANNEL, reporter=ListReporter())
        assert "Watch is on" in said.messages[0].plain_text()  # the router's watcher is the running one
    finally:
        composed.stop()
    assert runner.stopping.is_set()
    eventually(lambda: not any(t.is_alive() for t in composed.threads), 10, "the background parts ending")
