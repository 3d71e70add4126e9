"""The one list of request states (docs/requests.md): a store written with the first schema's names is
migrated in place, and every transition is a step of the hash chain."""

from __future__ import annotations

import sqlite3

from sqlite_utils import Database

from bot.app.services import MIGRATIONS
from bot.decisions._requests import STATES, migrations
from bot.store import Store, schema
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER


def _v1_row(rid: str, state: str) -> tuple:
    return (rid, "ses_x", "close", "r", REQUESTER, "two_person", "{}", "{}", "t0", "t1", "h", state, "t0")


def test_a_first_schema_store_is_migrated_to_the_one_list_of_states(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    db = Database(conn)
    for m in (schema.core, *MIGRATIONS):
        if m is not migrations:
            m.apply(db)
    migrations.apply(db, stop_before="0002_request_states")
    cols = (
        "id, session_id, decision, reason, requester, policy, facts, shown_facts, created_at, expires_at, "
        "content_hash, state, updated_at"
    )
    for rid, state in (("req_a", "pending"), ("req_b", "executing"), ("req_c", "executed")):
        conn.execute(f"INSERT INTO decision_requests ({cols}) VALUES ({', '.join('?' * 13)})", _v1_row(rid, state))
    conn.close()

    store = Store(path, migrations=MIGRATIONS)
    with store.read() as rdb:
        states = dict(rdb.execute("SELECT id, state FROM decision_requests ORDER BY id").fetchall())
        assert states == {"req_a": "requested", "req_b": "sending", "req_c": "executed"}
        # The content trigger is back after the rebuild.
        try:
            rdb.execute("UPDATE decision_requests SET decision = 'abandon' WHERE id = 'req_a'")
            raise AssertionError("the content trigger is gone")
        except sqlite3.IntegrityError as exc:
            assert "content cannot change" in str(exc)
        # An unknown state is refused by the table itself.
        try:
            rdb.execute("UPDATE decision_requests SET state = 'pending' WHERE id = 'req_a'")
            raise AssertionError("an old state name was accepted")
        except sqlite3.IntegrityError:
            pass


def test_every_transition_is_a_step_of_the_chain(decision_env):
    env = decision_env
    env.restore_failed("ses_st1")
    svc = env.service()
    rid = (
        svc.decide(REQUESTER, CHANNEL, "ses_st1", "close", reason="gone for good", reporter=env.reporter)
        .messages[0]
        .ref
    )
    assert svc.reject(REQUESTER, CHANNEL, rid, "changed my mind").ok
    assert svc.requests.get(rid).state == "withdrawn"
    rid2 = (
        svc.decide(REQUESTER, CHANNEL, "ses_st1", "close", reason="gone for good", reporter=env.reporter)
        .messages[0]
        .ref
    )
    assert svc.approve(APPROVER, CHANNEL, rid2, env.reporter).ok
    moves = [
        (s.inputs["request_id"], s.inputs["from"], s.inputs["to"], s.actor)
        for s in env.store.steps(session_id="ses_st1")
        if s.step == "request_state"
    ]
    assert moves == [
        (rid, "requested", "withdrawn", REQUESTER),
        (rid2, "requested", "approved", APPROVER),
        (rid2, "approved", "sending", APPROVER),
        (rid2, "sending", "executed", APPROVER),
    ]
    assert all(to in STATES for *_, to, _ in moves)
