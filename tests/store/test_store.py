"""The step store: cases, the append-only chained step log, idempotency records, migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from sqlite_utils.migrations import Migrations

from bot.clock import ManualClock
from bot.errors import StoreError
from bot.store import GENESIS_HASH, Store
from bot.store.chain import step_hash


def test_connection_settings_are_durable(file_store: Store) -> None:
    with file_store.read() as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
        assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_write_uses_begin_immediate(file_store: Store, db_path: Path) -> None:
    store = file_store
    # While one writer holds BEGIN IMMEDIATE, another cannot even start a write transaction.
    other = sqlite3.connect(db_path, timeout=0, isolation_level=None)
    with store.write() as db:
        assert db.conn.in_transaction
        db.execute("INSERT INTO cases (session_id, opened_at, opened_by) VALUES ('ses_x', 't', 'U1')")
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    assert store.get_open_case("ses_x") is not None


def test_write_rolls_back_on_error(store: Store) -> None:
    with pytest.raises(RuntimeError), store.write() as db:
        store.record_step("ses_1", "U1", "diagnose", {}, "ok", db=db)
        raise RuntimeError("boom")
    assert store.steps() == []
    assert store.list_open_cases() == []


def test_first_step_opens_a_case_and_later_steps_join_it(store: Store, clock: ManualClock) -> None:
    s1 = store.record_step("ses_1", "U1", "diagnose", {"branch": "restore"}, "ok")
    clock.advance(5)
    s2 = store.record_step(
        "ses_1",
        "U2",
        "decide",
        {"decision": "retry_restore"},
        "accepted",
        http_status=200,
        idempotency_key="k1",
        receipt_id="rcpt_1",
    )
    other = store.record_step("ses_2", "U1", "diagnose", {}, "ok")
    assert s1.case_id == s2.case_id != other.case_id
    case = store.get_open_case("ses_1")
    assert case is not None and case.opened_by == "U1" and case.opened_at == "2026-11-29T10:00:00.000Z"
    assert s2.at == "2026-11-29T10:00:05.000Z"
    assert [s.step for s in store.steps(session_id="ses_1")] == ["diagnose", "decide"]
    assert store.steps(case_id=other.case_id) == [other]
    assert s2.inputs == {"decision": "retry_restore"} and s2.http_status == 200
    assert s2.idempotency_key == "k1" and s2.receipt_id == "rcpt_1"


def test_closing_a_case_is_a_step_and_a_later_step_opens_a_new_case(store: Store) -> None:
    first = store.record_step("ses_1", "U1", "diagnose", {}, "ok")
    assert first.case_id is not None
    closed = store.close_case(first.case_id, "U1", "verification: needs no operator")
    assert not closed.is_open and closed.close_reason == "verification: needs no operator"
    assert store.get_open_case("ses_1") is None
    assert store.steps()[-1].step == "case_closed"
    again = store.record_step("ses_1", "U3", "diagnose", {}, "ok")
    assert again.case_id != first.case_id
    with store.read() as db:
        rows = db.execute("SELECT id FROM cases WHERE session_id = 'ses_1' ORDER BY id").fetchall()
    assert [case_id for (case_id,) in rows] == [first.case_id, again.case_id]
    assert [c.id for c in store.list_open_cases()] == [again.case_id]
    # Closing twice changes nothing.
    assert store.close_case(first.case_id, "U9", "again") == closed


def test_only_one_open_case_per_session_in_the_database(store: Store) -> None:
    store.open_case("ses_1", "U1")
    with pytest.raises(sqlite3.IntegrityError), store.write() as db:
        db.execute("INSERT INTO cases (session_id, opened_at, opened_by) VALUES ('ses_1', 't', 'U2')")


def test_open_case_returns_the_open_one_and_metadata_updates(store: Store) -> None:
    case = store.open_case("ses_1", "U1", channel="C1")
    assert store.open_case("ses_1", "U2").id == case.id
    assert store.set_owner(case.id, "U7").owner == "U7"
    updated = store.set_thread(case.id, "C2", "1700000000.000100")
    assert (updated.channel, updated.thread_ts, updated.owner) == ("C2", "1700000000.000100", "U7")
    with pytest.raises(StoreError):
        store.set_owner(999, "U1")
    with pytest.raises(StoreError):
        store.close_case(999, "U1", "x")


def test_steps_are_chained(store: Store) -> None:
    steps = [store.record_step(f"ses_{i % 2}", "U1", "s", {"i": i}, "ok") for i in range(5)]
    assert steps[0].prev_hash == GENESIS_HASH
    for before, after in zip(steps, steps[1:], strict=False):
        assert after.prev_hash == before.hash
        assert after.seq == before.seq + 1
    with store.read() as db:
        row = next(db.query("SELECT * FROM steps WHERE seq = 3"))
    assert step_hash(row, row["prev_hash"]) == row["hash"] == steps[2].hash
    assert store.head() == steps[-1].hash


def test_empty_log_head_is_genesis(store: Store) -> None:
    assert store.head() == GENESIS_HASH


def _raw(target: str | Path, sql: str) -> None:
    """One statement on a connection of the engine's own driver, outside the store."""
    if isinstance(target, Path):
        conn = sqlite3.connect(target)
        try:
            conn.execute(sql)
        finally:
            conn.close()
    else:
        with psycopg.connect(target, autocommit=True) as pg:
            pg.execute(sql)


def test_update_and_delete_on_steps_fail(store: Store, store_target: str | Path) -> None:
    store.record_step("ses_1", "U1", "diagnose", {}, "ok")
    refused = sqlite3.IntegrityError if isinstance(store_target, Path) else psycopg.errors.IntegrityError
    with pytest.raises(refused, match="append-only"):
        _raw(store_target, "UPDATE steps SET outcome = 'forged'")
    with pytest.raises(refused, match="append-only"):
        _raw(store_target, "DELETE FROM steps")
    with pytest.raises(sqlite3.IntegrityError), store.write() as db:
        db.execute("DELETE FROM steps WHERE seq = 1")
    assert [s.outcome for s in store.steps()] == ["ok"]


def test_record_step_joins_the_callers_transaction(store: Store) -> None:
    with store.write() as db:
        store.record_step("ses_1", "U1", "a", {}, "ok", db=db)
        store.record_step("ses_1", "U1", "b", {}, "ok", db=db)
    assert [s.step for s in store.steps()] == ["a", "b"]
    with pytest.raises(StoreError), store.read() as db:
        store.record_step("ses_1", "U1", "c", {}, "ok", db=db)


def test_installation_wide_step_has_no_case(store: Store) -> None:
    step = store.record_step(None, "U1", "reconciler_dry_run", {"container": "cp-reconciler-1"}, "ok")
    assert step.case_id is None and step.session_id is None
    assert store.list_open_cases() == []


def test_idempotency_record_lifecycle(store: Store, clock: ManualClock) -> None:
    rec = store.begin_request("post", "/v1/sessions/ses_1/resume", {"reason": "ok"}, "resume", session_id="ses_1")
    assert rec.method == "POST" and rec.body == '{"reason":"ok"}' and rec.pending and rec.attempts == 0
    assert len(rec.key) == 36
    assert store.unfinished_requests() == [rec]
    assert store.note_attempt(rec.key) == 1
    assert store.note_attempt(rec.key) == 2
    clock.advance(3)
    done = store.finish_request(rec.key, 200, {"id": "rcpt_1", "status": "accepted"})
    assert done.state == "answered" and done.http_status == 200 and done.attempts == 2
    assert done.response == {"id": "rcpt_1", "status": "accepted"}
    assert done.answered_at == "2026-11-29T10:00:03.000Z"
    assert store.unfinished_requests() == []
    assert store.get_request(rec.key) == done
    assert store.get_request("nope") is None


def test_begin_request_keeps_exact_body_text_and_given_key(store: Store) -> None:
    text = '{"decision": "close",  "reason": "é"}'
    rec = store.begin_request("POST", "/p", text, "decision", key="k-fixed")
    assert rec.key == "k-fixed" and store.get_request("k-fixed").body == text  # type: ignore[union-attr]
    with pytest.raises(StoreError):
        store.begin_request("POST", "/p", text, "decision", key="k-fixed")
    with pytest.raises(StoreError):
        store.finish_request("missing", 200, {})


def test_unfinished_requests_oldest_first(store: Store, clock: ManualClock) -> None:
    a = store.begin_request("POST", "/a", {}, "x")
    clock.advance(1)
    b = store.begin_request("POST", "/b", {}, "x")
    store.finish_request(a.key, 409, {"error": {"code": "REQUEST_STALE"}})
    clock.advance(1)
    c = store.begin_request("POST", "/c", {}, "x")
    assert [r.key for r in store.unfinished_requests()] == [b.key, c.key]
    assert [r.key for r in store.list_requests()] == [a.key, b.key, c.key]


def test_the_migration_sets_passed_in_are_applied_once(store_target: str | Path, clock: ManualClock) -> None:
    extra = Migrations("test_extra_area")

    @extra()
    def create_things(db):  # type: ignore[no-untyped-def]
        db["things"].create({"id": int, "name": str}, pk="id")

    plain = Store(store_target, clock=clock)  # the store's own tables only
    with pytest.raises(StoreError, match="test_extra_area"):
        plain.require(extra)
    # An area's set passed to an open store (the Slack front does this with its own tables).
    plain.migrate([extra])
    plain.require(extra)
    with plain.write() as db:
        db.execute("INSERT INTO things (name) VALUES ('a')")
    plain.migrate([extra])  # already applied here: nothing to do
    with pytest.raises(ValueError, match="test_extra_area"):
        plain.migrate([Migrations("test_extra_area")])  # another set under the same name
    reopened = Store(store_target, clock=clock, migrations=[extra])
    with reopened.read() as db:
        names = [r[0] for r in db.execute("SELECT migration_set FROM _sqlite_migrations ORDER BY id")]
        assert [r[0] for r in db.execute("SELECT name FROM things")] == ["a"]
    # The core set first; reopening applied nothing twice.
    assert names[0] == "core" and names.count("test_extra_area") == 1


def test_the_app_composes_every_core_areas_tables(store: Store) -> None:
    with store.read() as db:
        applied = {r[0] for r in db.execute("SELECT migration_set FROM _sqlite_migrations")}
        tables = set(db.table_names())
    assert applied == {"core", "dockerops", "decisions", "triage", "batches", "watch", "escalation"}
    assert {
        "cases",
        "steps",
        "idempotency",
        "dryruns",
        "decision_requests",
        "triages",
        "batches",
        "watch_stops",
        "watch_state",
        "escalation_steps",
        "escalation_live",
    } <= tables


def test_unreadable_path_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        Store(tmp_path / "missing-dir" / "x.db")


def test_an_unreachable_server_is_a_store_error_that_never_shows_the_password() -> None:
    with pytest.raises(StoreError) as caught:
        Store("postgresql://recover:hunter2-secret@127.0.0.1:9/recover", busy_timeout=2)
    assert "cannot open the step store postgresql://recover:***@127.0.0.1:9/recover" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("url", ["mysql://u:p@h/db", "http://h/x", "sqlite:///x.db"])
def test_another_url_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(StoreError, match=r"URL is not a store recover-bot can use") as caught:
        Store(url)
    assert "\n" not in str(caught.value).split("\n")[0] and "p@h" not in str(caught.value)


def test_a_companion_gets_its_engines_place_and_a_clear_refusal_of_the_other(store_target) -> None:
    """A file beside a SQLite store (``local_file``), a connection of its own to a PostgreSQL one
    (``server_connection``, in the store's schema); each refused in one line on the other engine."""
    store = Store(store_target)
    if store.path is not None:
        assert store.local_file("the Slack inbox") == store.path
        with pytest.raises(StoreError, match="the Slack inbox needs a PostgreSQL RECOVER_DB here"):
            store.server_connection("the Slack inbox")
        return
    with pytest.raises(StoreError, match="the Slack inbox needs a SQLite RECOVER_DB"):
        store.local_file("the Slack inbox")
    conn = store.server_connection("the Slack inbox")
    try:
        (schema,) = conn.execute("SELECT current_schema()").fetchone() or ("",)
        assert schema in str(store_target) and conn.autocommit
    finally:
        conn.close()
