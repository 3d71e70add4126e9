"""A client process SIGKILLed while the sandbox holds a committed decision whose reply it dropped.

After a restart (a new process re-sending every stored request without an answer through the client's
``send``) the decision took effect exactly once, and the replay used the key and body committed to the
store by ``begin`` before the first send — also when the process died between ``begin`` and ``send``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.sandbox import SandboxHandle
from bot.store import Store
from tests.fixtures.waiting import eventually

from ._specs import running

pytestmark = pytest.mark.subprocess

DECIDE = """
import json, os, sys, time
from bot.controlhost import PURPOSE_DECISION, ControlHostClient, Permit, RetryPolicy
from bot.controlhost._permit import _GATE_SEAL  # a client test: it plays the gate
from bot.store import Store
store = Store(sys.argv[1])
client = ControlHostClient(os.environ["CH_URL"], os.environ["CH_KEY"], store=store, timeout=10.0,
                           retry=RetryPolicy(attempts=20, base_delay=30.0, max_delay=30.0, jitter=0.0))
sid = sys.argv[2]
record = client.begin("POST", client.paths.decisions.format(session_id=sid), json.loads(sys.argv[3]),
                      PURPOSE_DECISION, session_id=sid)
print("begun", flush=True)
if sys.argv[4] == "between_begin_and_send":
    time.sleep(600)  # the test kills the process here: stored, never sent
client.send(Permit(record, _GATE_SEAL))
print("finished", flush=True)  # never reached: the test kills the process first
"""

REPLAY = """
import json, os, sys
from bot.controlhost import ControlHostClient, Permit, RetryPolicy
from bot.controlhost._permit import _GATE_SEAL  # a client test: it plays the gate
from bot.store import Store
client = ControlHostClient(os.environ["CH_URL"], os.environ["CH_KEY"], store=Store(sys.argv[1]),
                           retry=RetryPolicy(attempts=3, base_delay=0.1, max_delay=0.2))
from bot.errors import ControlHostError
results = []
for record in client.store.unfinished_requests():
    try:
        results.append({"key": record.key, "receipt": client.send(Permit(record, _GATE_SEAL)).id, "error": None})
    except ControlHostError as exc:
        results.append({"key": record.key, "receipt": None, "error": exc.code})
print(json.dumps(results))
"""


def _env(sbx: SandboxHandle) -> dict[str, str]:
    return {**os.environ, "CH_URL": sbx.url, "CH_KEY": sbx.api_key}


@pytest.mark.parametrize("moment", ["sleeping_before_retry", "mid_request"])
def test_sigkilled_client_replays_with_stored_key_and_body(sbx: SandboxHandle, tmp_path: Path, moment: str) -> None:
    sbx.admin.create_session(running("ses_k", revision=5))
    sbx.admin.fault("drop_after_commit", "/v1/sessions/ses_k/recovery-decisions", method="POST")
    if moment == "mid_request":
        # The server holds the request, commits after the client is dead, then drops the reply.
        sbx.admin.fault("latency", "/v1/sessions/ses_k/recovery-decisions", method="POST", seconds=1.5)
    db = tmp_path / "bot.db"
    Store(db)  # created up front so the test can watch it
    body = {"decision": "close", "expected_revision": 5, "reason": "crash test"}
    proc = subprocess.Popen(
        [sys.executable, "-c", DECIDE, str(db), "ses_k", json.dumps(body), moment],
        env=_env(sbx),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        store = Store(db)
        # The record (key + exact body) is committed before the first send.
        record = eventually(
            lambda: next((r for r in store.list_requests() if r.attempts >= 1), None),
            15,
            "the request record, committed before the first send",
        )
        assert record.pending and json.loads(record.body) == body
        if moment == "sleeping_before_retry":
            # The reply was dropped after the commit; the client is now sleeping 30 s before its retry.
            eventually(lambda: any(r["dropped"] for r in sbx.admin.requests("ses_k")), 15, "the dropped reply")
        else:
            time.sleep(0.3)  # inside the server's 1.5 s latency: nothing committed yet
            assert sbx.admin.effects("ses_k") == []
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    out, _ = proc.communicate()
    assert proc.returncode == -signal.SIGKILL and "finished" not in out

    # The sandbox committed the decision exactly once, and the bot never heard the answer.
    [effect] = eventually(lambda: sbx.admin.effects("ses_k"), 15, "the effect on ses_k")
    assert effect["idempotency_key"] == record.key
    [stored] = Store(db).unfinished_requests()
    assert stored.key == record.key and stored.http_status is None

    replay = subprocess.run(
        [sys.executable, "-c", REPLAY, str(db)], env=_env(sbx), capture_output=True, text=True, timeout=60
    )
    assert replay.returncode == 0, replay.stderr
    [result] = json.loads(replay.stdout)
    assert result == {"key": record.key, "receipt": effect["receipt_id"], "error": None}

    # Effect counter still 1; the replay carried the stored key and the stored body.
    assert len(sbx.admin.effects("ses_k")) == 1
    sent = [r for r in sbx.admin.requests("ses_k") if r["method"] == "POST"]
    assert {r["idempotency_key"] for r in sent} == {record.key}
    assert all(r["body"] == json.loads(record.body) for r in sent)
    assert sent[-1]["status"] == 201 and not sent[-1]["dropped"]
    [server_record] = sbx.admin.idempotency_records("ses_k")
    assert server_record["key"] == record.key and server_record["body"] == body
    final = Store(db).get_request(record.key)
    assert final is not None and final.state == "answered" and final.http_status == 201
    assert final.response["id"] == effect["receipt_id"]
    assert Store(db).unfinished_requests() == [] and len(Store(db).list_requests()) == 1


def test_sigkill_between_begin_and_send_then_the_replay_sends_the_stored_key_once(
    sbx: SandboxHandle, tmp_path: Path
) -> None:
    """The key is stored before the first send: a process dying right after ``begin`` sent nothing,
    and the restart's first (and only) POST carries the stored key and body."""
    sbx.admin.create_session(running("ses_b", revision=5))
    db = tmp_path / "bot.db"
    Store(db)
    body = {"decision": "close", "expected_revision": 5, "reason": "crash before the send"}
    proc = subprocess.Popen(
        [sys.executable, "-c", DECIDE, str(db), "ses_b", json.dumps(body), "between_begin_and_send"],
        env=_env(sbx),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        store = Store(db)
        record = eventually(lambda: next(iter(store.list_requests()), None), 15, "the request record")
        assert proc.stdout is not None and proc.stdout.readline().strip() == "begun"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert record.pending and record.attempts == 0 and json.loads(record.body) == body
    assert [r for r in sbx.admin.requests("ses_b") if r["method"] == "POST"] == []

    replay = subprocess.run(
        [sys.executable, "-c", REPLAY, str(db)], env=_env(sbx), capture_output=True, text=True, timeout=60
    )
    assert replay.returncode == 0, replay.stderr
    [result] = json.loads(replay.stdout)
    assert result["key"] == record.key and result["error"] is None
    [sent] = [r for r in sbx.admin.requests("ses_b") if r["method"] == "POST"]
    assert sent["idempotency_key"] == record.key and sent["body"] == body
    [effect] = sbx.admin.effects("ses_b")
    assert effect["idempotency_key"] == record.key and effect["receipt_id"] == result["receipt"]
    assert Store(db).unfinished_requests() == [] and len(Store(db).list_requests()) == 1
