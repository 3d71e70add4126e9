"""A hanging control host of one installation holds only that installation's work in `recover-bot serve`.

Real parts: `recover-bot serve` as a process (HTTP server, Bolt, the inbox) with its worker process,
an installations file of two installations, the sandbox control host over HTTP for us-1, a stand-in
that accepts eu-1's connections and never answers, the Slack stand-in, signed Slack HTTP.
What is timed: from us-1's command being acked to its answer on its own response_url.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.slack.inbox import Inbox
from bot.slack.state import slack_migrations
from bot.store import Store
from tests.fixtures.slack import Posted, SlackStandIn
from tests.fixtures.waiting import eventually
from tests.installations.standin import TroubledHost, installations_env, installations_file
from tests.slack.test_worker_process import _answers, _reply_path, _served

SESSION = "ses_unknown_ckpt_unavailable"
#: us-1's diagnose answers in about 1 s alone; behind eu-1's hanging commands it took 10 s (their
#: deadline). 5 s leaves room for a loaded CI machine and still fails if us-1 queues behind eu-1.
BOUND_SECONDS = 5.0
EU_COMMANDS = 12  # more than the worker's 8 slots


def _diagnoses(slack_api: SlackStandIn, channel: str) -> list[Posted]:
    """The replies in the case threads of a channel (a diagnosis is posted in its case's thread)."""
    return [m for root in slack_api.roots(channel) for m in slack_api.thread(channel, root.ts) if m.ts != root.ts]


def test_a_hanging_installation_leaves_anothers_diagnose_answered_over_serve(
    slack_api: SlackStandIn, sandbox_factory: Callable[..., Any], tmp_path: Path
) -> None:
    eu = TroubledHost("hang", hang_seconds=60.0)  # accepts, reads, never answers
    us = sandbox_factory(scenarios="builtin", clock=None)
    path = installations_file(
        tmp_path, {"eu-1": (eu.url, "k-eu-0123456789", "[C0EU1]"), "us-1": (us.url, us.api_key, "[C0US1]")}
    )
    db = tmp_path / "serve.db"
    try:
        with _served(slack_api, us, db, tmp_path, env_update=installations_env(path)) as (_, _, sender):
            inbox = Inbox(Store(db, migrations=[slack_migrations]))
            held = []
            for _ in range(EU_COMMANDS):
                body = sender.command_body(f"diagnose {SESSION}", channel="C0EU1")
                held.append(_reply_path(body))
                assert sender.post(body, content_type="application/x-www-form-urlencoded").status_code == 200
            eventually(lambda: inbox.states().get("claimed", 0) >= 8, 60, "eu-1's commands claimed")
            eventually(lambda: eu.calls >= 8, 60, "eu-1's host holding them")

            body = sender.command_body(f"diagnose {SESSION}", channel="C0US1")
            started = time.monotonic()
            assert sender.post(body, content_type="application/x-www-form-urlencoded").status_code == 200
            eventually(lambda: bool(_diagnoses(slack_api, "C0US1")), 60, "us-1's diagnosis")
            elapsed = time.monotonic() - started

            assert elapsed < BOUND_SECONDS, f"us-1's diagnose took {elapsed:.1f} s behind eu-1's hanging host"
            (diagnosis,) = _diagnoses(slack_api, "C0US1")
            assert "[us-1] ses_unknown_ckpt_unavailable: Turn outcome unknown" in diagnosis.all_text()
            assert slack_api.roots("C0EU1") == []  # eu-1's are still held by its host
            assert not any(_answers(slack_api, p) for p in held)
    finally:
        eu.stop()
