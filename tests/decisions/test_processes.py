"""Exactly once across bot processes sharing one store: compare-and-set in the database, not a lock in
a process. Every scenario runs on both engines: two bots on one SQLite file, and two bots on one
PostgreSQL server (the store's second engine, tests/fixtures/store.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.messages import NullReporter
from tests.fixtures.decisions import APPROVER, CHANNEL, OUTSIDER, REPO, REQUESTER, DecisionEnv
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess


@pytest.fixture
def decision_env(decision_sandbox, store_target: str | Path, decision_runbooks):
    """One bot's objects on the shared store, once per engine; each spawned bot opens the same store."""
    env = DecisionEnv(decision_sandbox, store_target, ManualClock(), decision_runbooks)  # type: ignore[arg-type]
    try:
        yield env
    finally:
        env.close()


def _spawn(env, tmp_path: Path, action: str, request_id: str, actor: str, go: Path, hang: str = ""):
    proc_env = dict(
        os.environ,
        SANDBOX_API_KEY=env.sandbox.api_key,
        MARKER_DIR=str(tmp_path),
        HANG=hang,
        PYTHONPATH=str(REPO),
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.decisions._proc",
            str(env.db_path),
            env.sandbox.url,
            action,
            request_id,
            actor,
            CHANNEL,
            str(go),
        ],
        cwd=REPO,
        env=proc_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _request(env, svc, sid: str) -> str:
    env.outcome_unknown(sid, covered=True)
    reply = svc.decide(
        REQUESTER,
        CHANNEL,
        sid,
        "abandon",
        turn="turn_9",
        effects="none outside",
        reason="hung engine",
        reporter=NullReporter(),
    )
    rid = reply.messages[0].ref
    assert rid, reply.messages[0].plain_text()
    return rid


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    eventually(lambda: path.exists() or proc.poll() is not None, seconds, f"{path.name} to appear")
    if not path.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""


def _killed_at(
    env, tmp_path: Path, action: str, target: str, actor: str, hang: str, marker: str, while_alive=None
) -> None:
    """Run ``action`` in another bot process that hangs at ``hang``; SIGKILL it once ``marker`` appears
    (``while_alive`` runs first, the process still hanging), then let the store's clock pass its send
    lease: the killed holder's lease runs out, as it does for a bot that died."""
    go = tmp_path / "go"
    go.write_text("go")
    proc = _spawn(env, tmp_path, action, target, actor, go, hang=hang)
    _wait_for(tmp_path / marker, proc)
    if while_alive is not None:
        while_alive()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    env.clock.advance(env.runbooks.limit("send_lease") + 1)


def _restarted(env):
    """A restarted bot (new objects on the same file) that has run its start-up recovery successfully."""
    env.restart()
    svc = env.service()
    reply = svc.recover_after_restart(NullReporter())
    assert reply.ok, [m.plain_text() for m in reply.messages]
    return svc


def test_two_processes_approving_one_request_make_one_post(decision_env, tmp_path):
    env = decision_env
    svc = env.service()
    rid = _request(env, svc, "ses_pp1")
    go = tmp_path / "go"
    procs = [_spawn(env, tmp_path, "approve", rid, actor, go) for actor in (APPROVER, OUTSIDER)]
    time.sleep(1.0)  # both processes are up and polling for the start signal
    go.write_text("go")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["ok"] for r in results) == [False, True], results
    loser = next(r for r in results if not r["ok"])
    assert any("already" in h for h in loser["headlines"]), loser
    assert len(env.effects("ses_pp1")) == 1
    assert len(env.posts("ses_pp1")) == 1
    req = svc.requests.get(rid)
    assert req.state == "executed" and req.approved_by in (APPROVER, OUTSIDER)


def test_sigkill_between_approval_and_execution_then_restart(decision_env, tmp_path):
    env = decision_env
    svc = env.service()
    rid = _request(env, svc, "ses_pk1")
    _killed_at(env, tmp_path, "approve", rid, APPROVER, hang="after_approval", marker="approved")
    # The approval survived the kill; nothing was sent.
    assert svc.requests.get(rid).state == "approved"
    assert env.posts("ses_pk1") == []
    # A restarted bot (new objects on the same file) executes it exactly once.
    svc2 = _restarted(env)
    assert len(env.effects("ses_pk1")) == 1
    assert svc2.requests.get(rid).state == "executed"
    # A second restart finds nothing left to do: no duplicate.
    env.restart()
    env.service().recover_after_restart(NullReporter())
    assert len(env.effects("ses_pk1")) == 1
    assert len(env.posts("ses_pk1")) == 1


def test_sigkill_after_the_post_reached_the_host_then_restart(decision_env, tmp_path):
    env = decision_env
    svc = env.service()
    rid = _request(env, svc, "ses_pk2")

    def live_send_is_not_replayed() -> None:
        # Its POST is in flight at a live bot (its send lease runs): a starting bot sends nothing for it.
        _restarted(env)
        assert len(env.posts("ses_pk2")) == 1
        assert env.service().requests.get(rid).state == "sending"

    _killed_at(
        env,
        tmp_path,
        "approve",
        rid,
        APPROVER,
        hang="after_post",
        marker="posted",
        while_alive=live_send_is_not_replayed,
    )
    # The control host applied it, but the bot never recorded the answer.
    assert len(env.effects("ses_pk2")) == 1
    req = svc.requests.get(rid)
    assert req.state == "sending"
    assert env.store.get_request(req.idem_key).pending
    _restarted(env)
    # Re-sent with the same key and body: the host replays its receipt, no second effect.
    posts = env.posts("ses_pk2")
    assert len(posts) == 2 and len({p["idempotency_key"] for p in posts}) == 1
    assert len(env.effects("ses_pk2")) == 1
    final = env.service().requests.get(rid)
    assert final.state == "executed" and final.receipt_id == env.effects("ses_pk2")[0]["receipt_id"]


def test_sigkill_between_the_stored_key_and_the_send_then_restart_sends_that_key_once(decision_env, tmp_path):
    """The Idempotency-Key is stored before the first send: a process killed after ``begin`` and before
    its POST left sent nothing, and the restart's one POST carries the stored key and body."""
    env = decision_env
    svc = env.service()
    rid = _request(env, svc, "ses_pk3")
    _killed_at(env, tmp_path, "approve", rid, APPROVER, hang="before_post", marker="begun")
    req = svc.requests.get(rid)
    assert req.state == "sending" and req.idem_key
    record = env.store.get_request(req.idem_key)
    assert record is not None and record.pending and record.body == req.body
    assert env.posts("ses_pk3") == [] and env.effects("ses_pk3") == []
    _restarted(env)
    [post] = env.posts("ses_pk3")
    assert post["idempotency_key"] == req.idem_key and post["body"] == json.loads(record.body)
    [effect] = env.effects("ses_pk3")
    final = env.service().requests.get(rid)
    assert final.state == "executed" and final.receipt_id == effect["receipt_id"]


def test_sigkill_between_the_stored_resume_and_its_send_then_restart_sends_that_key_once(decision_env, tmp_path):
    """R4.2's resume has the same key rule: stored with the step that vouches for it, killed before
    the POST left, and the restart's one POST carries the stored key and body."""
    env = decision_env
    env.stopped_resumable("ses_pk4")
    _killed_at(env, tmp_path, "resume", "ses_pk4", REQUESTER, hang="before_post", marker="begun")
    [record] = env.store.unfinished_requests()
    assert record.session_id == "ses_pk4" and record.path.endswith("/resume")
    assert env.posts("ses_pk4") == [] and env.effects("ses_pk4") == []
    _restarted(env)
    [post] = env.posts("ses_pk4")
    assert post["idempotency_key"] == record.key and post["body"] == json.loads(record.body)
    assert len(env.effects("ses_pk4")) == 1
    assert env.store.unfinished_requests() == []


def test_sigkill_between_the_answer_and_its_verification_the_periodic_job_verifies_it(decision_env, tmp_path):
    """R5.1: acceptance is not recovery. A bot that recorded the host's answer and died before reading
    the session again left an executed request nobody verified; the periodic job verifies it from the
    stored receipt, once, and says so in the case's thread (the bot's own word, its send not repeated)."""
    env = decision_env
    svc = env.service()
    rid = _request(env, svc, "ses_pk5")
    _killed_at(env, tmp_path, "approve", rid, APPROVER, hang="after_answer", marker="answered")
    assert svc.requests.get(rid).state == "executed"
    assert [s for s in env.store.steps(session_id="ses_pk5") if s.step == "verification"] == []
    said = svc.sweep(NullReporter())
    verified = [m for m in said.messages if m.headline.startswith("Verified `ses_pk5`")]
    assert len(verified) == 1 and verified[0].session_id == "ses_pk5", [m.headline for m in said.messages]
    [step] = [s for s in env.store.steps(session_id="ses_pk5") if s.step == "verification"]
    assert step.actor == "recover-bot"
    assert len(env.posts("ses_pk5")) == 1 and len(env.effects("ses_pk5")) == 1  # verified, not sent again
    # Looked at once: the next round finds nothing left.
    assert not [m for m in svc.sweep(NullReporter()).messages if "ses_pk5" in m.headline]
