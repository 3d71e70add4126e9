"""``recover-bot browse``: Datasette's own test client on a snapshot of a store the bot wrote.

The store is written by the real decision core against the sandbox over HTTP: one request approved and
executed, one waiting for approval, one expired, one voided because the session changed before the
send. The shipped canned queries must answer each audit question from it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bot.app.services import MIGRATIONS
from bot.clock import ManualClock
from bot.decisions import check_request_table
from bot.errors import StoreError
from bot.messages import NullReporter
from bot.store import audit
from bot.store.browse import datasette_for, metadata, pg_snapshot, snapshot
from tests.fixtures.decisions import APPROVER, CHANNEL, OUTSIDER, REQUESTER, DecisionEnv
from tests.fixtures.waiting import eventually

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
    return decision_env, _write(decision_env)


@pytest.fixture
def pg_written(
    decision_sandbox: Any, pg_url: str, decision_runbooks: Any
) -> Iterator[tuple[DecisionEnv, dict[str, str]]]:
    """The same requests written by the decision core on a PostgreSQL store."""
    env = DecisionEnv(decision_sandbox, pg_url, ManualClock(), decision_runbooks)  # type: ignore[arg-type]
    try:
        yield env, _write(env)
    finally:
        env.close()
        env.store.engine.close()


def _write(env: DecisionEnv) -> dict[str, str]:
    """One request executed, one waiting, two expired, one voided (the module's docstring)."""
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
    return ids


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
    _assert_canned_answers(datasette_for(snap), env, ids)


def _assert_canned_answers(ds: Any, env: DecisionEnv, ids: dict[str, str]) -> None:
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


def test_on_postgresql_the_snapshot_holds_every_table_verifies_and_answers_the_canned_queries(
    pg_written: tuple[DecisionEnv, dict[str, str]], tmp_path: Path
) -> None:
    env, ids = pg_written
    copied = pg_snapshot(str(env.db_path), tmp_path / "snap", migrations=MIGRATIONS)
    snap = copied.path
    assert snap.name == "recover.db" and copied.left_out == () and copied.taken_at.endswith("Z")
    # Every row of every table, the steps in chain order; the file verifies as a SQLite store.
    lite = sqlite3.connect(snap)
    with psycopg.connect(str(env.db_path), autocommit=True) as pg:
        tables = [
            str(r[0])
            for r in pg.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                "AND table_type = 'BASE TABLE' AND table_name != '_sqlite_schema'"
            )
        ]
        assert {"steps", "decision_requests", "_sqlite_migrations"} <= set(tables)
        for table in tables:
            (rows,) = pg.execute(f'SELECT count(*) FROM "{table}"').fetchone()  # noqa: S608
            assert lite.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == rows, table  # noqa: S608
    steps = env.store.steps()
    assert copied.steps == len(steps) > 5
    assert [r[0] for r in lite.execute("SELECT hash FROM steps ORDER BY seq")] == [st.hash for st in steps]
    lite.close()
    report = audit.verify(snap, checks=[check_request_table])
    assert report.ok and report.steps == len(steps), report.summary()
    ds = datasette_for(snap)
    _assert_canned_answers(ds, env, ids)
    # One moment: a later write to the store does not show.
    _abandon(env, env.service(), "ses_browse_later")
    assert len(_query(ds, "pending_approvals")) == 1


@pytest.mark.subprocess
def test_browse_on_postgresql_serves_its_snapshot_over_http_and_says_when_it_was_taken(
    pg_written: tuple[DecisionEnv, dict[str, str]], tmp_path: Path
) -> None:
    import socket
    import subprocess
    import sys

    env, _ = pg_written
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    child_env["RECOVER_DB"] = str(env.db_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "browse", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline().strip()
        assert banner.startswith("browsing a snapshot of postgresql://"), banner
        assert " taken at 20" in banner and f"http://127.0.0.1:{port}/recover" in banner, banner
        url = f"http://127.0.0.1:{port}/recover/steps.json?_shape=array&_size=max"

        def page() -> list[dict[str, Any]] | None:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return list(json.load(response))
            except OSError:
                assert proc.poll() is None, "browse ended early"
                return None

        rows = eventually(page, 60, "Datasette serves the snapshot")
        assert [r["hash"] for r in rows] == [st.hash for st in env.store.steps()]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
