"""A ladder over the real core: the sandbox control host, a SQLite file, a short runbook ladder and a
simulated clock; N two-person requests made quickly (for the race test and the bench)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from bot.clock import ManualClock
from bot.escalation.runner import LadderRunner
from tests.escalation.race import CheckingPoster, RaceResult
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER, DecisionEnv


def race_env(
    sandbox: Any, db_path: Path, runbooks: Any, result: RaceResult, *, latency: tuple[float, float] = (0.01, 0.03)
) -> tuple[DecisionEnv, Any, LadderRunner]:
    """``latency``: the range (seconds) of Slack's simulated answer time, the window a decision races."""
    env = DecisionEnv(sandbox, db_path, ManualClock(), runbooks)
    svc = env.service(approvers=(APPROVER,))
    slack = random.Random(len(str(db_path)))
    low, high = latency
    poster = CheckingPoster(svc.requests, result, lambda: time.sleep(slack.uniform(low, high)))  # Slack's latency
    return env, svc, LadderRunner(svc.ctx, poster)


def requester(env: DecisionEnv, svc: Any, prefix: str) -> Any:
    def make(i: int) -> str:
        sid = f"ses_{prefix}_{i:04d}"
        env.outcome_unknown(sid)
        reply = svc.decide(
            REQUESTER,
            CHANNEL,
            sid,
            "abandon",
            turn="turn_9",
            effects="none outside",
            reason="race",
            reporter=env.reporter,
        )
        ref = reply.messages[0].ref
        assert ref is not None, reply.messages[0].plain_text()
        return str(ref)

    return make


def decider(env: DecisionEnv, svc: Any) -> Any:
    def decide(how: str, rid: str) -> None:
        if how == "approve":
            svc.approve(APPROVER, CHANNEL, rid, env.reporter)
        elif how == "reject":
            svc.reject(APPROVER, CHANNEL, rid, "no")
        else:
            svc.reject(REQUESTER, CHANNEL, rid, "withdrawn")  # the requester's own: withdrawn

    return decide
