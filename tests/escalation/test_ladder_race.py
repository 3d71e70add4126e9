"""The measured figure, kept short: 100 two-person requests across a shortened ladder on a simulated
clock, approvals, rejections and withdrawals racing the due steps on other threads → 0 steps posted
after a decision, 0 posted twice, 0 lost; every expired request had its whole ladder and its
announcement (bench/escalation_race.py runs it 1,000 times and prints the figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.escalation.ladder_env import decider, race_env, requester
from tests.escalation.race import RaceResult, run_race


def test_100_requests_with_decisions_racing_due_steps(
    decision_sandbox: Any, db_path: Path, short_runbooks: Any
) -> None:
    result = RaceResult()
    env, svc, runner = race_env(decision_sandbox, db_path, short_runbooks, result)
    try:
        out = run_race(requester(env, svc, "race"), decider(env, svc), runner, env.clock, requests=100, seed=7)
    finally:
        env.close()
    assert out.requests == 100 and sum(out.decided.values()) > 30, out
    assert out.racing * 2 > sum(out.decided.values()), out  # most decisions began mid-post: the race ran
    assert out.posts > 100, out
    assert (out.late, out.duplicates, out.lost) == (0, 0, 0), out
