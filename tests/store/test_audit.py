"""audit verify / export: tampering in copies of the database is named, step by step.

The triggers block UPDATE/DELETE, so each test does what an attacker with file access would do:
copy the file, drop the triggers, edit. verify must still catch it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from bot.clock import ManualClock
from bot.errors import StoreError
from bot.store import GENESIS_HASH, Store
from bot.store.audit import export, verify
from bot.store.chain import step_hash


@pytest.fixture
def filled(file_store: Store, clock: ManualClock) -> Store:
    """Eight steps in a SQLite file (the tampering below edits a copy of the file)."""
    return _fill(file_store, clock)


def _fill(store: Store, clock: ManualClock) -> Store:
    for i in range(1, 9):
        clock.advance(1)
        store.record_step(f"ses_{i % 3}", f"U{i}", "step", {"i": i}, "ok", http_status=200)
    return store


def tampered(store: Store, tmp_path: Path, name: str, *sql: str) -> Path:
    copy = tmp_path / f"{name}.db"
    with store.read() as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(store.path, copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.execute("DROP TRIGGER steps_no_update")
    conn.execute("DROP TRIGGER steps_no_delete")
    for statement in sql:
        conn.execute(statement)
    conn.close()
    return copy


def kinds(report) -> list[tuple[int | None, str]]:  # type: ignore[no-untyped-def]
    return [(p.seq, p.kind) for p in report.problems]


def test_intact_log_verifies(filled: Store) -> None:
    report = verify(filled.path)
    assert report.ok and report.steps == 8 and report.head == filled.head()
    assert "OK: 8 steps" in report.summary()


def test_empty_log_verifies_with_genesis_head(store: Store, store_target: str | Path) -> None:
    report = verify(store_target, head=GENESIS_HASH)
    assert report.ok and report.steps == 0 and report.head == GENESIS_HASH


def test_edited_step_is_named(filled: Store, tmp_path: Path) -> None:
    copy = tampered(filled, tmp_path, "edit", "UPDATE steps SET outcome = 'forged' WHERE seq = 4")
    report = verify(copy)
    assert kinds(report) == [(4, "edited")]
    assert "step 4: edited" in report.summary()


def test_edited_http_status_and_inputs_are_named(filled: Store, tmp_path: Path) -> None:
    copy = tampered(
        filled,
        tmp_path,
        "edit2",
        "UPDATE steps SET http_status = 409 WHERE seq = 2",
        """UPDATE steps SET inputs = '{"i":99}' WHERE seq = 7""",
    )
    assert kinds(verify(copy)) == [(2, "edited"), (7, "edited")]


def test_edited_and_rehashed_step_is_caught_by_the_next_link(filled: Store, tmp_path: Path) -> None:
    # A careful attacker recomputes the edited step's hash; the next step still points at the old one.
    with filled.read() as db:
        row = next(db.query("SELECT * FROM steps WHERE seq = 5"))
    row["actor"] = "U_mallory"
    forged = step_hash(row, row["prev_hash"])
    copy = tampered(
        filled, tmp_path, "rehash", f"UPDATE steps SET actor = 'U_mallory', hash = '{forged}' WHERE seq = 5"
    )
    report = verify(copy)
    assert kinds(report) == [(6, "broken link")]
    assert "step 5 was rewritten" in report.summary()


def test_deleted_step_is_named(filled: Store, tmp_path: Path) -> None:
    copy = tampered(filled, tmp_path, "delete", "DELETE FROM steps WHERE seq = 3")
    report = verify(copy)
    assert kinds(report) == [(3, "removed")]
    assert "step 3 missing between 2 and 4" in report.summary()


def test_deleted_range_is_named(filled: Store, tmp_path: Path) -> None:
    copy = tampered(filled, tmp_path, "delete2", "DELETE FROM steps WHERE seq IN (4, 5, 6)")
    assert "steps 4–6 missing between 3 and 7" in verify(copy).summary()


def test_deleted_first_step_is_named(filled: Store, tmp_path: Path) -> None:
    copy = tampered(filled, tmp_path, "delete_first", "DELETE FROM steps WHERE seq = 1")
    assert kinds(verify(copy)) == [(2, "removed")]


def test_reordered_steps_are_named(filled: Store, tmp_path: Path) -> None:
    # Swap the positions of steps 3 and 4 (seq is the stored order).
    copy = tampered(
        filled,
        tmp_path,
        "reorder",
        "UPDATE steps SET seq = -3 WHERE seq = 3",
        "UPDATE steps SET seq = 3 WHERE seq = 4",
        "UPDATE steps SET seq = 4 WHERE seq = -3",
    )
    report = verify(copy)
    found = kinds(report)
    assert (3, "reordered") in found and (4, "reordered") in found
    assert all(kind == "reordered" for _, kind in found)
    assert "recorded right after step 4 but is stored after step 2" in report.summary()


def test_renumbered_step_is_named(filled: Store, tmp_path: Path) -> None:
    copy = tampered(filled, tmp_path, "renumber", "UPDATE steps SET seq = 20 WHERE seq = 8")
    assert kinds(verify(copy)) == [(20, "renumbered")]


def test_truncated_tail_needs_a_published_head(filled: Store, tmp_path: Path) -> None:
    out = io.StringIO()
    head = export(filled.path, out)
    assert head == filled.head_ref() == f"8:{filled.head()}"
    copy = tampered(filled, tmp_path, "truncate", "DELETE FROM steps WHERE seq > 5")
    # Without a head the shorter chain is internally consistent: it cannot know.
    assert verify(copy).ok
    report = verify(copy, head=head)
    assert kinds(report) == [(None, "truncated")]
    assert "steps after step 5 were removed (the published head is step 8)" in report.summary()
    # A bare hash (an older hand-off) still finds the truncation.
    bare = verify(copy, head=filled.head())
    assert kinds(bare) == [(None, "truncated")] and "the log now ends at step 5" in bare.summary()


def test_published_head_with_later_steps_is_fine(filled: Store) -> None:
    head = filled.head()
    filled.record_step("ses_1", "U1", "later", {}, "ok")
    filled.record_step("ses_1", "U1", "later", {}, "ok")
    report = verify(filled.path, head=head)
    assert report.ok and report.published_head_seq == 8 and report.steps_after_head == 2
    # The steps after the head are flagged: the head does not vouch for them.
    assert report.unvouched == [(9, "later", "U1", s.at) for s in filled.steps()[8:9]] + [
        (10, "later", "U1", filled.steps()[9].at)
    ]
    assert "FLAGGED: 2 step(s) after the published head" in report.summary()
    assert "step 9: later by U1" in report.summary()


def test_export_writes_json_lines(filled: Store, tmp_path: Path) -> None:
    out = io.StringIO()
    export(filled.path, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, 9))
    assert lines[3]["inputs"] == {"i": 4} and lines[3]["actor"] == "U4"
    assert lines[1]["prev_hash"] == lines[0]["hash"]


def test_verify_missing_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        verify(tmp_path / "nope.db")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The real entry point (bot.cli.main): it reads the settings and dispatches, as users run it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


@pytest.mark.subprocess
def test_cli_export_then_verify_with_head(filled: Store, tmp_path: Path) -> None:
    out_file = tmp_path / "steps.jsonl"
    res = _cli("audit", "export", "--db", str(filled.path), "--out", str(out_file), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    head = res.stdout.split()[-1]
    assert head == filled.head_ref() and len(out_file.read_text().splitlines()) == 8

    ok = _cli("audit", "verify", "--db", str(filled.path), "--head", head, cwd=tmp_path)
    # Intact, but written without the audit key: said so, with a status of its own (not 0, 1 or 2).
    assert ok.returncode == 3 and "OK: 8 steps" in ok.stdout, ok.stdout + ok.stderr
    assert "unkeyed: detects accidental damage, not a writer" in ok.stdout.splitlines()

    copy = tampered(
        filled,
        tmp_path,
        "cli",
        "DELETE FROM steps WHERE seq >= 7",
        "UPDATE steps SET outcome = 'x' WHERE seq = 2",
    )
    bad = _cli("audit", "verify", "--db", str(copy), "--head", head, cwd=tmp_path)
    assert bad.returncode == 1
    assert "step 2: edited" in bad.stdout and "log: truncated" in bad.stdout

    missing = _cli("audit", "verify", "--db", str(tmp_path / "none.db"), cwd=tmp_path)
    assert missing.returncode == 2 and "no step store" in missing.stderr


@pytest.mark.subprocess
def test_cli_reads_recover_db_and_stdout_export(filled: Store, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"RECOVER_DB={filled.path}\n")
    res = _cli("audit", "export", cwd=tmp_path)
    assert res.returncode == 0
    assert len(res.stdout.splitlines()) == 8 and res.stderr.strip() == f"head {filled.head_ref()}"


@pytest.mark.subprocess
@pytest.mark.parametrize("argv", [["audit", "--help"], ["audit", "verify", "--help"], ["audit", "export", "--help"]])
def test_every_audit_help_shows_an_example(argv: list[str], tmp_path: Path) -> None:
    res = _cli(*argv, cwd=tmp_path)
    assert res.returncode == 0 and "example:" in res.stdout and "recover-bot audit" in res.stdout


def _edit_in_place(target: str | Path, sql: str) -> None:
    """What a writer with the database's own access can do: lift the append-only triggers and edit."""
    if isinstance(target, Path):
        conn = sqlite3.connect(target, isolation_level=None)
        conn.execute("DROP TRIGGER steps_no_update")
        conn.execute(sql)
        conn.close()
    else:
        with psycopg.connect(target, autocommit=True) as pg:
            pg.execute("ALTER TABLE steps DISABLE TRIGGER USER")
            pg.execute(sql)


@pytest.mark.subprocess
def test_audit_verify_holds_on_either_engine(
    store: Store, store_target: str | Path, clock: ManualClock, tmp_path: Path
) -> None:
    _fill(store, clock)
    report = verify(store_target)
    assert report.ok and report.steps == 8 and report.head == store.head(), report.summary()
    # The command as a deployer runs it, on RECOVER_DB (a path or a postgresql:// URL).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    run = subprocess.run(
        [sys.executable, "-m", "bot.cli", "audit", "verify", "--head", store.head_ref()],
        capture_output=True, text=True, cwd=tmp_path, env={**env, "RECOVER_DB": str(store_target)}, timeout=60,
    )  # fmt: skip
    assert run.returncode == 3 and "OK: 8 steps" in run.stdout, run.stdout + run.stderr
    _edit_in_place(store_target, "UPDATE steps SET outcome = 'forged' WHERE seq = 4")
    assert kinds(verify(store_target)) == [(4, "edited")]
