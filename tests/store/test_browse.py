"""``recover-bot browse``: Datasette's own test client on a snapshot of a store the bot wrote.

The store is written by the real decision core against the sandbox over HTTP: one request approved and
executed, one waiting for approval, one expired, one voided because the session changed before the
send. The shipped canned queries must answer each audit question from it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bot.errors import StoreError
from bot.messages import NullReporter
from bot.store.browse import datasette_for, metadata, snapshot
from tests.fixtures.decisions import APPROVER, CHANNEL, OUTSIDER, REQUESTER, DecisionEnv

try:
    import datasette  # noqa: F401 - the [datasette] extra; the test extra brings it
except ModuleNotFoundError:
    if os.environ.get("CI"):
        raise  # never skipped in CI: pip install -e '.[test]' installs it
    pytest.skip(
        "!!! Datasette is not installed (pip install -e '.[datasette]'): browse tests SKIPPED", allow_module_level=True
    )


def _abandon(env: DecisionEnv, svc: Any, sid: str) -> str:
    env.outcome_unknown(sid, covered=True)
    reply = svc.decide(
        REQUESTER, CHANNEL, sid, "abandon", turn="turn_9", effects="none outside", reason="hung engine",
        reporter=NullReporter(),
    )  # fmt: skip
    rid = reply.messages[0].ref
    assert rid, reply.messages[0].plain_text()
    return str(rid)


@pytest.fixture
def written(decision_env: DecisionEnv) -> tuple[DecisionEnv, dict[str, str]]:
    env = decision_env
    svc = env.service()
    ids = {name: _abandon(env, svc, f"ses_browse_{name}") for name in ("executed", "pending", "expired")}
    assert svc.approve(APPROVER, CHANNEL, ids["executed"], NullReporter()).ok
    # The session moves on before the approval (a retry_restore by someone else resets its attention,
    # R2.9): what was asked no longer holds, so the approval voids it and nothing is sent for it.
    env.restore_failed("ses_browse_void", failures=3, reason="restore_refused")
    reply = svc.decide(REQUESTER, CHANNEL, "ses_browse_void", "close", reason="give up", reporter=NullReporter())
    ids["void"] = str(reply.messages[0].ref)
    other = svc.decide(
        OUTSIDER,
        CHANNEL,
        "ses_browse_void",
        "retry_restore",
        reason="store fixed",
        yes=True,
        cause_fixed="the checkpoint store was repaired",
        reporter=NullReporter(),
    )
    assert other.ok, [m.plain_text() for m in other.messages]
    assert not svc.approve(APPROVER, CHANNEL, ids["void"], NullReporter()).ok
    assert svc.requests.get(ids["void"]).state == "void"
    # The others wait; past the runbook's approval expiry one of them is swept (the other is asked anew).
    env.clock.advance(30 * 60)
    svc.expire_due()
    ids["expired_too"], ids["pending"] = ids["pending"], _abandon(env, svc, "ses_browse_pending2")
    assert svc.requests.get(ids["expired"]).state == "expired"
    return env, ids


def _query(ds: Any, name: str, **params: str) -> list[dict[str, Any]]:
    query = "&".join(f"{k}={v}" for k, v in {"_shape": "array", **params}.items())

    async def get() -> list[dict[str, Any]]:
        response = await ds.client.get(f"/recover/{name}.json?{query}")
        assert response.status_code == 200, response.text
        return list(response.json())

    return asyncio.run(get())


def test_the_canned_queries_answer_on_a_snapshot_of_a_bot_written_store(written, tmp_path: Path) -> None:
    env, ids = written
    # Never over the live store: the snapshot goes to a folder of its own.
    with pytest.raises(StoreError, match="exists: a backup never overwrites"):
        snapshot(env.db_path, env.db_path.parent)
    snap = snapshot(env.db_path, tmp_path / "snap")
    assert snap != env.db_path and snap.name == "recover.db"
    ds = datasette_for(snap)

    pending = _query(ds, "pending_approvals")
    assert [r["id"] for r in pending] == [ids["pending"]]
    assert pending[0]["requester"] == REQUESTER and pending[0]["expires_at"]

    approved = _query(ds, "who_approved_what", approver="")
    rows = {r["id"]: r for r in approved}
    assert {(r["session_id"], r["requester"], r["approved_by"], r["state"]) for r in approved} == {
        ("ses_browse_executed", REQUESTER, APPROVER, "executed"),
        ("ses_browse_void", REQUESTER, APPROVER, "void"),  # approved, then voided: still who approved what
        ("ses_browse_void", OUTSIDER, OUTSIDER, "executed"),  # retry_restore: its policy needs one person
    }
    assert rows[ids["executed"]]["receipt_id"] and rows[ids["executed"]]["approval_step"]  # the chain's step
    assert {r["policy"] for r in approved if r["requester"] == r["approved_by"]} != {"two_person"}
    assert _query(ds, "who_approved_what", approver="U_NOBODY") == []

    gone = {r["id"]: r["state"] for r in _query(ds, "expired_and_voided")}
    assert gone == {ids["expired"]: "expired", ids["expired_too"]: "expired", ids["void"]: "void"}

    sends = _query(ds, "sends_per_installation")
    received = [r for r in env.sandbox.admin.requests() if r.get("method") == "POST"]
    assert len(received) == 2  # abandon (executed) and the other person's retry_restore
    assert [(r["target"], r["sends"], r["answered"], r["unanswered"]) for r in sends] == [("control host", 2, 2, 0)]


def test_the_snapshot_is_a_copy_and_the_live_store_is_never_opened_by_datasette(written, tmp_path: Path) -> None:
    env, ids = written
    snap = snapshot(env.db_path, tmp_path / "snap")
    ds = datasette_for(snap)
    # A later write to the live store does not show: the snapshot is one consistent moment.
    _abandon(env, env.service(), "ses_browse_later")
    assert len(_query(ds, "pending_approvals")) == 1
    live = sqlite3.connect(env.db_path)
    assert live.execute("SELECT count(*) FROM decision_requests WHERE state = 'requested'").fetchone()[0] == 2
    live.close()
    # Every canned query the metadata ships is tested above.
    assert set(metadata()["databases"]["recover"]["queries"]) == {
        "pending_approvals", "who_approved_what", "expired_and_voided", "sends_per_installation",
    }  # fmt: skip


@pytest.mark.subprocess
def test_browse_names_a_missing_store_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    res = subprocess.run(
        [sys.executable, "-m", "bot.cli", "browse", "--db", str(tmp_path / "none.db")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: no step store at {tmp_path / 'none.db'}: give the bot's RECOVER_DB (or --db)"
