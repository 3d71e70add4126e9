"""The keyed chain (chain version 2): an edit re-hashed to the end fails ``audit verify`` with the key,
stores written before the key verify as they are, and a published head names the edited step."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.errors import StoreError
from bot.store import Store
from bot.store.audit import verify
from bot.store.chain import PLAIN_VERSION, step_hash

KEY = b"k3y-outside-the-data-volume"


def _fill(store: Store, clock: ManualClock, n: int, start: int = 1) -> None:
    for i in range(start, start + n):
        clock.advance(1)
        store.record_step(f"ses_{i % 3}", f"U{i}", "step", {"i": i}, "ok", http_status=200)


def _copy(store: Store, tmp_path: Path, name: str) -> sqlite3.Connection:
    with store.read() as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    copy = tmp_path / f"{name}.db"
    shutil.copy(store.path, copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("DROP TRIGGER steps_no_update")
    return conn


def _rehash_from(conn: sqlite3.Connection, seq: int, *, version: int | None = None) -> None:
    """What an attacker without the key does: recompute plain hashes from ``seq`` to the end."""
    rows = [dict(r) for r in conn.execute("SELECT * FROM steps WHERE seq >= ? ORDER BY seq", [seq])]
    prev = conn.execute("SELECT hash FROM steps WHERE seq = ?", [seq - 1]).fetchone()[0]
    for row in rows:
        row["prev_hash"] = prev
        v = version if version is not None else row["v"]
        try:
            new = step_hash(row, prev, version=v)
        except ValueError:  # keyed: the attacker has no key, so they write plain (version 1) hashes
            v = PLAIN_VERSION
            new = step_hash(row, prev, version=v)
        conn.execute("UPDATE steps SET prev_hash = ?, hash = ?, v = ? WHERE seq = ?", [prev, new, v, row["seq"]])
        prev = new


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[Store, ManualClock]:
    clock = ManualClock()
    store = Store(tmp_path / "keyed.db", clock, audit_key=KEY)  # step 1: its keyed marker
    _fill(store, clock, 7)
    return store, clock


def test_keyed_steps_verify_with_the_key(keyed) -> None:
    store, _ = keyed
    assert all(s.v == 2 for s in store.steps())
    report = verify(store.path, key=KEY)
    assert report.ok and report.keyed_steps == 8, report.summary()
    # Without the key the links are followed but the content cannot be checked: said so.
    assert "NOT CHECKED: the content of 8 keyed step(s)" in verify(store.path).summary()


def test_a_rehashed_chain_fails_verify_with_the_key(keyed, tmp_path: Path) -> None:
    store, _ = keyed
    conn = _copy(store, tmp_path, "rehashed")
    conn.execute("UPDATE steps SET actor = 'U_mallory' WHERE seq = 4")
    _rehash_from(conn, 4, version=2)  # tries version 2 first: no key, so plain hashes
    conn.close()
    report = verify(tmp_path / "rehashed.db", key=KEY)
    assert not report.ok and report.first_bad_step == 4
    assert (4, "unkeyed") in [(p.seq, p.kind) for p in report.problems]


def test_a_rehashed_chain_with_a_wrong_key_fails(keyed, tmp_path: Path) -> None:
    store, _ = keyed
    conn = _copy(store, tmp_path, "wrongkey")
    conn.execute("UPDATE steps SET outcome = 'forged' WHERE seq = 3")
    rows = [dict(r) for r in conn.execute("SELECT * FROM steps WHERE seq >= 3 ORDER BY seq")]
    prev = rows[0]["prev_hash"]
    for row in rows:
        row["prev_hash"] = prev
        new = step_hash(row, prev, b"a guessed key")
        conn.execute("UPDATE steps SET prev_hash = ?, hash = ? WHERE seq = ?", [prev, new, row["seq"]])
        prev = new
    conn.close()
    report = verify(tmp_path / "wrongkey.db", key=KEY)
    assert report.first_bad_step == 3
    assert [p.kind for p in report.problems if p.seq == 3] == ["edited"]


def test_with_a_head_the_edited_step_is_named_not_truncated(keyed, tmp_path: Path) -> None:
    store, clock = keyed
    head = store.head_ref()  # 8:…
    _fill(store, clock, 2, start=9)
    conn = _copy(store, tmp_path, "headed")
    conn.execute("UPDATE steps SET inputs = '{\"i\":55}' WHERE seq = 5")
    _rehash_from(conn, 5)
    conn.close()
    report = verify(tmp_path / "headed.db", head=head, key=KEY)
    kinds = [(p.seq, p.kind) for p in report.problems]
    assert report.first_bad_step == 5
    assert (8, "head mismatch") in kinds and not any(k == "truncated" for _, k in kinds), kinds
    assert "the first bad step is 5" in report.summary()
    # Steps 9 and 10 came after the head: flagged as not vouched for.
    assert [u[0] for u in report.unvouched] == [9, 10]


def test_a_plain_store_keeps_verifying_after_a_key_is_configured(tmp_path: Path) -> None:
    clock = ManualClock()
    plain = Store(tmp_path / "old.db", clock)
    _fill(plain, clock, 3)
    # Keyed stays keyed: a plain store is not served with a key until the key is adopted (recorded).
    with pytest.raises(StoreError, match="only plain .*audit adopt-key"):
        Store(tmp_path / "old.db", clock, audit_key=KEY)
    marker = Store(tmp_path / "old.db", clock, audit_key=KEY, adopting_key=True).adopt_key("console:ops")
    assert (marker.seq, marker.step, marker.v) == (4, "audit_key_adopted", 2)
    later = Store(tmp_path / "old.db", clock, audit_key=KEY)
    _fill(later, clock, 2, start=5)
    assert [s.v for s in later.steps()] == [1, 1, 1, 2, 2, 2]
    report = verify(later.path, key=KEY)
    assert report.ok and report.keyed_steps == 3, report.summary()
    head = later.head_ref()
    # An edit in a plain step that leaves the keyed ones alone breaks the keyed step's link.
    conn = _copy(later, tmp_path, "old_edit")
    conn.execute("UPDATE steps SET outcome = 'x' WHERE seq = 2")
    _rehash_from(conn, 2, version=PLAIN_VERSION)
    conn.close()
    # Without the key an attacker must turn every keyed step plain; the whole chain then looks like a
    # store written before the key, which only the published head can tell (docs/requests.md).
    bad = verify(tmp_path / "old_edit.db", key=KEY)
    assert bad.ok and "No step is keyed" in bad.summary()
    # ... but the bot, started with its key, refuses it: its keyed marker no longer verifies.
    with pytest.raises(StoreError, match=r"keyed marker \(step 4\) does not verify"):
        Store(tmp_path / "old_edit.db", clock, audit_key=KEY)
    headed = verify(tmp_path / "old_edit.db", key=KEY, head=head)
    assert [(p.seq, p.kind) for p in headed.problems] == [(6, "head mismatch")]
    # Re-hashing only up to the first keyed step leaves it pointing at the old step 3: named.
    conn = _copy(later, tmp_path, "old_edit2")
    conn.execute("UPDATE steps SET outcome = 'x' WHERE seq = 2")
    rows = [dict(r) for r in conn.execute("SELECT * FROM steps WHERE seq IN (2, 3) ORDER BY seq")]
    prev = rows[0]["prev_hash"]
    for row in rows:
        row["prev_hash"] = prev
        new = step_hash(row, prev)
        conn.execute("UPDATE steps SET prev_hash = ?, hash = ? WHERE seq = ?", [prev, new, row["seq"]])
        prev = new
    conn.close()
    assert [(p.seq, p.kind) for p in verify(tmp_path / "old_edit2.db", key=KEY).problems] == [(4, "broken link")]


def test_a_keyed_store_refuses_to_open_without_its_key_or_with_another(keyed) -> None:
    store, clock = keyed
    with pytest.raises(StoreError, match="no audit key is configured"):
        Store(store.path, clock)
    with pytest.raises(StoreError, match="does not match"):
        Store(store.path, clock, audit_key=b"another key")


@pytest.mark.subprocess
def test_cli_verify_with_key_file_and_head(keyed, tmp_path: Path) -> None:
    store, _ = keyed
    key_file = tmp_path / "secrets" / "audit.key"
    key_file.parent.mkdir()
    key_file.write_text(KEY.decode() + "\n")
    head = store.head_ref()
    conn = _copy(store, tmp_path, "cli")
    conn.execute("UPDATE steps SET actor = 'U_mallory' WHERE seq = 6")
    _rehash_from(conn, 6)
    conn.close()
    args = ["audit", "verify", "--db", str(tmp_path / "cli.db"), "--key-file", str(key_file), "--head", head]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    res = subprocess.run(  # the real entry point, as users run it
        [sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "first bad step: 6" in res.stdout and "truncated" not in res.stdout
    assert KEY.decode() not in res.stdout + res.stderr
