"""The ladder across a SIGKILL, as one function the test and the bench both run: ``requests``
two-person requests over a real store file, two runner processes (each as a serve worker runs it)
posting to the Slack stand-in, one SIGKILLed while it holds a claim, a fresh process started in its
place (the restart). Counted: steps lost (a row never posted, or a step missing from its thread) and
steps said twice in a thread; which claims the killed process left and which were taken over."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.clock import SystemClock
from bot.escalation.store import EXPIRY_INDEX, LadderStore
from bot.escalation.text import key_line
from bot.ids import DEFAULT_INSTALLATION, ScopedId
from bot.runbook import load_runbooks
from bot.slack import make_client
from bot.slack.state import Location, SlackState, slack_migrations
from bot.slack.web import SlackOut
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER, DecisionEnv
from tests.fixtures.escalation import short_ladder_folder
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackStandIn, slack_settings
from tests.fixtures.waiting import eventually
from tests.fixtures.watch import start_watcher_process

SLACK_CHANNEL = "C0LADDER"
LADDER = """
escalation:
  steps:
    - {kind: remind, after: {duration: 1s, help: r}}
    - {kind: mention, after: {duration: 2s, help: m}}
    - {kind: widen, after: {duration: 3s, help: w}, groups: [U0BACKUP]}
  expiry: {duration: 15s, help: e}
"""
#: How every step's key line begins (key_line of no request and no step: "ladder step #" unseen-marked).
KEY_START = key_line("", "").removesuffix("#")
STEPS_PER_REQUEST = 4  # three ladder steps and the announced expiry


@dataclass
class KillResult:
    """One run: what the store and the threads show once every row was posted (or the wait ended)."""

    requests: int
    expected: int
    counts: dict[str, int]
    said: Counter[str]
    left: set[tuple[str, int]]  # claims the killed process held
    taken: set[tuple[str, int]]  # claims another process took over
    odd: list[Any] = field(default_factory=list)  # rows not posted: (request, idx, state, due, owner, expires)
    unsaid: list[str] = field(default_factory=list)  # posted rows whose key line is not in their thread
    seconds: float = 0.0

    @property
    def lost(self) -> int:
        """Rows left unfinished, expiries not announced, posted steps missing from their thread."""
        stuck = sum(1 for r in self.odd if r[2] not in ("posted", "cancelled"))
        unannounced = sum(1 for r in self.odd if r[1] == EXPIRY_INDEX and r[2] == "cancelled")
        return stuck + unannounced + len(self.unsaid)

    @property
    def cancelled(self) -> int:
        """Ladder steps not said because their request expired first (cancelled in the expiry's commit)."""
        return sum(1 for r in self.odd if r[2] == "cancelled" and r[1] != EXPIRY_INDEX)

    @property
    def twice(self) -> int:
        return sum(n - 1 for n in self.said.values() if n > 1)


def _until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    """A best-effort wait: the bench counts what a run leaves unsaid, and the kill lands either way."""
    with contextlib.suppress(pytest.fail.Exception):
        eventually(ready, timeout, what)


def _claimed_by(rows: LadderStore, pid: int) -> set[tuple[str, int]]:
    with rows.store.read() as db:
        found = db.execute(
            "SELECT request_id, idx FROM escalation_steps WHERE state = 'claimed' AND claimed_by LIKE ?", [f"%:{pid}:%"]
        ).fetchall()
    return {(str(r), int(i)) for r, i in found}


def _start(config: dict[str, Any]) -> subprocess.Popen[str]:
    return start_watcher_process(config, "tests.escalation.proc")


def run_kill(
    sandbox: Any,
    slack_api: SlackStandIn,
    folder: Path,
    *,
    requests: int,
    seed: int = 0,
    post_seconds: float = 0.3,
    wait: float = 60.0,
) -> KillResult:
    """One run in ``folder`` (its own store file and runbooks). The kill lands on a claim of process a
    after a seeded number of its posts, while Slack holds that post ``post_seconds`` before answering
    (so the killed claim's message may already be in the thread)."""
    started = time.monotonic()
    runbooks_dir = short_ladder_folder(folder, LADDER)
    db = folder / "recover.db"
    env = DecisionEnv(sandbox, db, SystemClock(), load_runbooks(runbooks_dir))  # type: ignore[arg-type]
    env.store.migrate([slack_migrations])
    settings = slack_settings(
        slack_api,
        db,
        runbooks_dir=runbooks_dir,
        control_host_url=sandbox.url,
        control_host_api_key=sandbox.api_key,
        approvers=(APPROVER,),
    )
    state, out = SlackState(env.store), SlackOut(make_client(settings))
    svc = env.service(approvers=(APPROVER,))
    config = {
        "settings": {
            "slack_bot_token": BOT_TOKEN,
            "slack_signing_secret": SIGNING_SECRET,
            "slack_api_url": slack_api.base_url,
            "db_path": str(db),
            "runbooks_dir": str(runbooks_dir),
            "control_host_url": sandbox.url,
            "control_host_api_key": sandbox.api_key,
            "approvers": APPROVER,
        },
        "lease": 2.0,
    }
    expected = STEPS_PER_REQUEST * requests
    a, b = _start(config), _start(config)
    c = None
    roots: dict[str, str] = {}
    rows = LadderStore(env.store)
    slack_api.slow("chat.postMessage", post_seconds)
    skip = random.Random(seed).randrange(0, 4)  # claims of a to let by before the kill
    try:
        for i in range(requests):
            sid = f"ses_lp_{seed}_{i:03d}"
            root = out.post_text(Location(SLACK_CHANNEL), f"case {sid}")
            assert root is not None
            roots[sid] = root
            state.remember_thread(ScopedId(DEFAULT_INSTALLATION, sid), Location(SLACK_CHANNEL, root))
            env.outcome_unknown(sid)
            reply = svc.decide(
                REQUESTER,
                CHANNEL,
                sid,
                "abandon",
                turn="turn_9",
                effects="none outside",
                reason="hung",
                reporter=env.reporter,
            )
            assert reply.messages[0].ref is not None, reply.messages[0].plain_text()
        seen: set[tuple[str, int]] = set()
        for _ in range(skip + 1):
            _until(lambda: bool(_claimed_by(rows, a.pid) - seen), 15, "another claim of a")
            seen |= _claimed_by(rows, a.pid)
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        left = _claimed_by(rows, a.pid)
        c = _start(config)  # the restart
        _until(lambda: _finished(rows.counts(), expected), wait, "every ladder step finished")
    finally:
        for proc in (a, b, c):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(10)
        env.close()
        slack_api.slow("chat.postMessage", 0)
    with rows.store.read() as rdb:
        odd = rdb.execute(
            "SELECT r.request_id, r.idx, r.state, r.due_at, r.claimed_by, d.expires_at, d.state "
            "FROM escalation_steps r JOIN decision_requests d ON d.id = r.request_id WHERE r.state <> 'posted'"
        ).fetchall()
        posted = rdb.execute("SELECT request_id, idx FROM escalation_steps WHERE state = 'posted'").fetchall()
    said: Counter[str] = Counter()
    for root in roots.values():
        for m in slack_api.thread(SLACK_CHANNEL, root):
            said.update({line for line in m.all_text().splitlines() if line.startswith(KEY_START)})
    unsaid = [key for r, i in posted if (key := key_line(str(r), int(i))) not in said]
    taken = {
        (s.inputs["request_id"], s.inputs["step"])
        for s in env.store.steps()
        if s.step.startswith("escalation_") and s.outcome == "taken_over"
    }
    return KillResult(
        requests=requests,
        expected=expected,
        counts=rows.counts(),
        said=said,
        left=left,
        taken=taken,
        odd=[tuple(r) for r in odd],
        unsaid=unsaid,
        seconds=time.monotonic() - started,
    )


def _finished(counts: dict[str, int], expected: int) -> bool:
    """Every row is posted or cancelled (a cancelled one's request ended before it could be said)."""
    return set(counts) <= {"posted", "cancelled"} and sum(counts.values()) == expected


__all__ = ["KillResult", "run_kill"]
