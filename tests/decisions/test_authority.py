"""Execution re-derives its authority from the hash chain (docs/requests.md): edits of the request tables
— with or without dropping their triggers — never make the bot send anything, and ``audit verify``
names them. The sandbox control host's request log is the ground truth for "sent"."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.decisions import check_request_table
from bot.decisions._requests import CONTENT_FIELDS, content_hash
from bot.messages import ListReporter
from bot.store.audit import verify
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER


def _raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _text(reporter: ListReporter) -> str:
    return "\n".join(m.plain_text() for m in reporter.posted)


def _request_problems(db: Path, rid: str) -> list[str]:
    import bot.decisions  # noqa: F401 - registers the request table's check

    report = verify(db, checks=[check_request_table])
    return [p.message for p in report.problems if p.kind == "request table" and rid in p.message]


@pytest.mark.subprocess
def test_an_approved_state_written_into_the_table_is_never_executed(decision_env):
    env = decision_env
    env.outcome_unknown("ses_t1", covered=True)
    svc = env.service()
    rid = (
        svc.decide(
            REQUESTER, CHANNEL, "ses_t1", "abandon", turn="turn_9", effects="none", reason="hung", reporter=env.reporter
        )
        .messages[0]
        .ref
    )
    # The attacker: one UPDATE on the cache table (no trigger stands in the way of state columns).
    with _raw(env.db_path) as conn:
        conn.execute(
            "UPDATE decision_requests SET state = 'approved', approved_by = ?, approved_at = created_at WHERE id = ?",
            [APPROVER, rid],
        )
    # Before the bot even starts, audit verify names the edited row — the real command too.
    assert any("records no approval" in p for p in _request_problems(env.db_path, rid))
    cli = subprocess.run(
        [sys.executable, "-m", "bot.cli", "audit", "verify", "--db", str(env.db_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")},
    )
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert f"request table: {rid}: state 'approved' but the chain records no approval" in cli.stdout
    env.restart()
    reporter = ListReporter()
    reply = env.service().recover_after_restart(reporter)
    assert env.posts("ses_t1") == [] and env.effects("ses_t1") == []
    assert not reply.ok
    said = _text(reporter)
    assert "the step log does not authorise" in said and "no approval by a second person" in said
    assert env.service().requests.get(rid).state == "void"
    # And the approve path (someone clicks Approve on the now 'approved' row) refuses too.
    assert not env.service().approve(APPROVER, CHANNEL, rid, ListReporter()).ok
    assert env.posts("ses_t1") == []
    # Afterwards too: the bot moved it from a state the chain never gave it, and refused it.
    problems = _request_problems(env.db_path, rid)
    assert any("was moved from 'approved'" in p for p in problems), problems
    assert any("refused for want of authority" in p for p in problems), problems


def test_a_pending_confirmation_turned_into_an_approved_close_is_never_sent(decision_env):
    env = decision_env
    env.restore_failed("ses_t2")
    svc = env.service()
    reply = svc.decide(REQUESTER, CHANNEL, "ses_t2", "start_fresh", reason="restore is hopeless", reporter=env.reporter)
    rid = reply.messages[0].ref
    assert rid and svc.requests.get(rid).state == "requested", [m.plain_text() for m in reply.messages]
    # The careful attacker drops the trigger, rewrites the request as an approved close and even
    # recomputes the row's content hash so the row is self-consistent.
    with _raw(env.db_path) as conn:
        conn.execute("DROP TRIGGER decision_requests_content_fixed")
        row = dict(conn.execute("SELECT * FROM decision_requests WHERE id = ?", [rid]).fetchone())
        content = {k: row[k] for k in CONTENT_FIELDS}
        content.update(
            decision="close",
            policy="two_person",
            facts=json.loads(row["facts"]),
            shown_facts=json.loads(row["shown_facts"]),
        )
        conn.execute(
            "UPDATE decision_requests SET decision = 'close', policy = 'two_person', content_hash = ?, "
            "state = 'approved', approved_by = ? WHERE id = ?",
            [content_hash(content), APPROVER, rid],
        )
    before = _request_problems(env.db_path, rid)
    assert any("differs from the hash recorded in the chain" in p for p in before), before
    assert any("records no approval" in p for p in before), before
    env.restart()
    reporter = ListReporter()
    env.service().recover_after_restart(reporter)
    assert env.posts("ses_t2") == [] and env.effects("ses_t2") == []
    assert "differs from the content hash recorded in the chain" in _text(reporter)
    assert any("was moved from 'approved'" in p for p in _request_problems(env.db_path, rid))


def test_an_injected_idempotency_record_is_not_replayed(decision_env):
    env = decision_env
    env.restore_failed("ses_t3")
    body = json.dumps({"decision": "close", "reason": "forged", "expected_revision": 4})
    with _raw(env.db_path) as conn:
        conn.execute(
            "INSERT INTO idempotency (key, method, path, body, purpose, session_id, created_at) "
            "VALUES ('k-forged', 'POST', '/v1/sessions/ses_t3/recovery-decisions', ?, 'recovery_decision', 'ses_t3', "
            "'now')",
            [body],
        )
        conn.execute(
            "INSERT INTO idempotency (key, method, path, body, purpose, session_id, created_at) "
            "VALUES ('k-forged2', 'POST', '/v1/sessions/ses_t3/resume', '{}', 'resume', 'ses_t3', 'now')"
        )
    env.restart()
    reply = env.service().recover_after_restart(ListReporter())
    assert env.posts("ses_t3") == []
    assert not reply.ok and any("no step of the log records it" in m.plain_text() for m in reply.messages)


def test_a_store_used_normally_has_no_request_table_findings(decision_env):
    env = decision_env
    env.restore_failed("ses_t4")
    env.outcome_unknown("ses_t5", covered=True)
    svc = env.service()
    r1 = svc.decide(REQUESTER, CHANNEL, "ses_t4", "close", reason="gone", reporter=env.reporter).messages[0].ref
    assert svc.reject(APPROVER, CHANNEL, r1, "not yet").ok
    r2 = svc.decide(REQUESTER, CHANNEL, "ses_t4", "close", reason="gone", reporter=env.reporter).messages[0].ref
    assert svc.approve(APPROVER, CHANNEL, r2, env.reporter).ok
    svc.decide(
        REQUESTER, CHANNEL, "ses_t5", "abandon", turn="turn_9", effects="none", reason="r", reporter=env.reporter
    )
    env.clock.advance(3600)
    svc.expire_due()
    import bot.decisions  # noqa: F401

    report = verify(env.db_path, checks=[check_request_table])
    assert report.ok, report.summary()
