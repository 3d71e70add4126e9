"""Timers that survive everything: two runner processes on one store file, one SIGKILLed while it
holds a claim and replaced by a fresh process (a restart): every ladder step of every request is posted
in its thread exactly once. A claim the killed process left is taken over once its lease lapsed and
found in the thread by its key when its post had reached Slack: 0 lost, 0 twice."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.clock import SystemClock
from bot.escalation.store import LadderStore
from bot.slack import make_client
from bot.slack.state import Location, SlackState, slack_migrations
from bot.slack.web import SlackOut
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER, DecisionEnv
from tests.fixtures.escalation import short_ladder_folder
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackStandIn, slack_settings
from tests.fixtures.watch import start_watcher_process

ROOT = Path(__file__).resolve().parents[2]
SLACK_CHANNEL = "C0LADDER"
REQUESTS = 12
LADDER = """
escalation:
  steps:
    - {kind: remind, after: {duration: 1s, help: r}}
    - {kind: mention, after: {duration: 2s, help: m}}
    - {kind: widen, after: {duration: 3s, help: w}, groups: [U0BACKUP]}
  expiry: {duration: 15s, help: e}
"""


def _start(config: dict[str, Any]) -> subprocess.Popen[str]:
    return start_watcher_process(config, "tests.escalation.proc")


def _until(ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.01)


def _claimed_by(rows: LadderStore, pid: int) -> set[tuple[str, int]]:
    with rows.store.read() as db:
        found = db.execute(
            "SELECT request_id, idx FROM escalation_steps WHERE state = 'claimed' AND claimed_by LIKE ?", [f"%:{pid}:%"]
        ).fetchall()
    return {(str(r), int(i)) for r, i in found}


def test_a_sigkill_and_a_restart_neither_lose_nor_repeat_a_step(
    decision_sandbox: Any, slack_api: SlackStandIn, tmp_path: Path
) -> None:
    runbooks_dir = short_ladder_folder(tmp_path, LADDER)
    db = tmp_path / "recover.db"
    from bot.runbook import load_runbooks

    env = DecisionEnv(decision_sandbox, db, SystemClock(), load_runbooks(runbooks_dir))  # type: ignore[arg-type]
    env.store.migrate([slack_migrations])
    settings = slack_settings(slack_api, db, runbooks_dir=runbooks_dir, control_host_url=decision_sandbox.url,
                              control_host_api_key=decision_sandbox.api_key, approvers=(APPROVER,))
    state, out = SlackState(env.store), SlackOut(make_client(settings))
    svc = env.service(approvers=(APPROVER,))
    config = {"settings": {"slack_bot_token": BOT_TOKEN, "slack_signing_secret": SIGNING_SECRET,
                           "slack_api_url": slack_api.base_url, "db_path": str(db), "runbooks_dir": str(runbooks_dir),
                           "control_host_url": decision_sandbox.url, "control_host_api_key": decision_sandbox.api_key,
                           "approvers": APPROVER},
              "lease": 2.0}
    a, b = _start(config), _start(config)
    c = None
    roots: dict[str, str] = {}
    rids: list[str] = []
    rows = LadderStore(env.store)
    # Each post is answered 0.3 s after Slack holds it: the kill lands on a claim whose post reached Slack.
    slack_api.slow("chat.postMessage", 0.3)
    try:
        for i in range(REQUESTS):
            sid = f"ses_lp_{i:02d}"
            root = out.post_text(Location(SLACK_CHANNEL), f"case {sid}")
            assert root is not None
            roots[sid] = root
            state.remember_thread(sid, Location(SLACK_CHANNEL, root))
            env.outcome_unknown(sid)
            reply = svc.decide(REQUESTER, CHANNEL, sid, "abandon", turn="turn_9", effects="none outside",
                               reason="hung", reporter=env.reporter)
            assert reply.messages[0].ref is not None, reply.messages[0].plain_text()
            rids.append(reply.messages[0].ref)
        _until(lambda: bool(_claimed_by(rows, a.pid)), 15)
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        left = _claimed_by(rows, a.pid)
        c = _start(config)  # the restart
        _until(lambda: set(rows.counts()) == {"posted"} and rows.counts()["posted"] == 4 * REQUESTS, 60)
    finally:
        for proc in (a, b, c):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(10)
        env.close()
    with rows.store.read() as rdb:
        odd = rdb.execute("SELECT request_id, idx, state, due_at, claimed_by FROM escalation_steps WHERE state <> 'posted'").fetchall()
    trail = [(s.step, s.outcome, s.inputs.get("step"), s.at, s.actor) for s in rows.store.steps()
             if odd and s.inputs.get("request_id") == odd[0][0]]
    assert rows.counts() == {"posted": 4 * REQUESTS}, (odd, trail, left)  # every step and the expiry: 0 lost
    said: Counter[str] = Counter()
    for sid, root in roots.items():
        for m in slack_api.thread(SLACK_CHANNEL, root):
            said.update({line for line in m.all_text().splitlines() if line.startswith("ladder step ")})
    assert len(said) == 4 * REQUESTS and set(said.values()) == {1}, said  # 0 twice
    assert left, "the kill did not land on a claim"
    taken = {(s.inputs["request_id"], s.inputs["step"]) for s in env.store.steps()
             if s.step.startswith("escalation_") and s.outcome == "taken_over"}
    assert left <= taken, (left, taken)
