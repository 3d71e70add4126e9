"""Timers that survive everything: two runner processes on one store file, one SIGKILLed while it
holds a claim and replaced by a fresh process (a restart): every ladder step of every request is posted
in its thread exactly once. A claim the killed process left is taken over once its lease lapsed and
found in the thread by its key when its post had reached Slack: 0 lost, 0 twice. The scenario is
tests/escalation/kill.py; bench/escalation_sigkill.py runs it at 100 requests, many times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.escalation.kill import run_kill
from tests.fixtures.slack import SlackStandIn

pytestmark = pytest.mark.subprocess

REQUESTS = 12


def test_a_sigkill_and_a_restart_neither_lose_nor_repeat_a_step(
    decision_sandbox: Any, slack_api: SlackStandIn, tmp_path: Path
) -> None:
    # Each post is answered 0.3 s after Slack holds it: the kill lands on a claim whose post reached Slack.
    run = run_kill(decision_sandbox, slack_api, tmp_path, requests=REQUESTS)
    assert run.counts == {"posted": run.expected}, (run.odd, run.left)  # every step and the expiry: 0 lost
    assert len(run.said) == run.expected and set(run.said.values()) == {1}, run.said  # 0 twice
    assert run.lost == 0 and run.twice == 0 and run.cancelled == 0 and not run.unsaid
    assert run.left, "the kill did not land on a claim"
    assert run.left <= run.taken, (run.left, run.taken)
