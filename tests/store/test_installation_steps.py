"""Every step carries its installation, in the chain hash; the store's binding to its installation and
control host (``installation_bound``) is recorded once and refuses a copied or swapped store file."""

from __future__ import annotations

import hashlib
import hmac
import shutil
import sqlite3
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.errors import StoreError
from bot.ids import store_path
from bot.store import Store, binding
from bot.store.audit import verify
from bot.store.chain import PLAIN_VERSION, canonical_json, step_hash
from bot.store.evidence import PackFilter, build_pack, verify_pack, write_pack

KEY = b"k3y-outside-the-data-volume"
EU = ("https://control.eu-1.example.internal", hashlib.sha256(b"eu-1-key").hexdigest())
US = ("https://control.us-1.example.internal", hashlib.sha256(b"us-1-key").hexdigest())


def _raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _fill(store: Store, clock: ManualClock, n: int = 4) -> None:
    for i in range(n):
        clock.advance(1)
        store.record_step(f"ses_{i % 2}", f"U{i}", "step", {"i": i}, "ok")


def test_each_step_records_its_installation_and_both_chains_verify(tmp_path: Path, clock: ManualClock) -> None:
    db = tmp_path / "recover.db"
    default, eu = Store(db, clock=clock), Store(store_path(db, "eu-1"), clock=clock, installation="eu-1")
    _fill(default, clock)
    _fill(eu, clock)
    assert {s.installation for s in default.steps()} == {"default"}
    assert {s.installation for s in eu.steps()} == {"eu-1"} and eu.installation == "eu-1"
    with _raw(eu.path) as conn:
        assert {r[0] for r in conn.execute("SELECT installation FROM steps")} == {"eu-1"}
    assert verify(default.path).ok and verify(eu.path).ok


def test_a_step_without_an_installation_hashes_byte_for_byte_as_before_the_column() -> None:
    row = {
        "case_id": 1,
        "session_id": "ses_1",
        "actor": "U1",
        "at": "2026-01-01T00:00:00.000Z",
        "step": "x",
        "inputs": "{}",
        "outcome": "ok",
        "detail": None,
        "http_status": None,
        "idempotency_key": None,
        "receipt_id": None,
        "v": PLAIN_VERSION,
    }
    prev = "0" * 64
    # The formula every existing store was written with, spelled out.
    before = {k: row[k] for k in row if k != "v"} | {"prev_hash": prev, "v": PLAIN_VERSION}
    expected = hashlib.sha256(canonical_json(before).encode("utf-8")).hexdigest()
    assert step_hash({**row, "installation": None}, prev) == expected
    assert step_hash(row, prev) == expected  # a row read from a store without the column
    assert step_hash({**row, "installation": "default"}, prev) != expected  # set: it is hashed


@pytest.mark.parametrize("value", ["us-1", None])
def test_an_edited_installation_is_an_edited_step(tmp_path: Path, clock: ManualClock, value: str | None) -> None:
    store = Store(tmp_path / "recover-eu-1.sqlite", clock=clock, installation="eu-1")
    _fill(store, clock)
    with _raw(store.path) as conn:
        conn.execute("DROP TRIGGER steps_no_update")
        conn.execute("UPDATE steps SET installation = ? WHERE seq = 2", [value])
    report = verify(store.path)
    assert [(p.seq, p.kind) for p in report.problems] == [(2, "edited")], report.problems
    assert store.verify_step(store.steps()[1]) is False


def test_a_keyed_store_with_an_installation_edited_and_rehashed_plain_fails_with_the_key(
    tmp_path: Path, clock: ManualClock
) -> None:
    store = Store(tmp_path / "recover-eu-1.sqlite", clock=clock, installation="eu-1", audit_key=KEY)
    _fill(store, clock)
    with _raw(store.path) as conn:
        conn.execute("DROP TRIGGER steps_no_update")
        conn.execute("UPDATE steps SET installation = 'us-1' WHERE seq = 3")
        # Without the key the attacker re-hashes plain from the edit to the end.
        prev = conn.execute("SELECT hash FROM steps WHERE seq = 2").fetchone()[0]
        for row in [dict(r) for r in conn.execute("SELECT * FROM steps WHERE seq >= 3 ORDER BY seq")]:
            new = step_hash(row, prev, version=PLAIN_VERSION)
            conn.execute("UPDATE steps SET prev_hash = ?, hash = ?, v = 1 WHERE seq = ?", [prev, new, row["seq"]])
            prev = new
    report = verify(store.path, key=KEY)
    assert not report.ok and report.first_bad_step == 3, report.problems
    with pytest.raises(StoreError):
        Store(store.path, clock=clock, installation="eu-1", audit_key=KEY)


# -- the binding ------------------------------------------------------------------------------------


def test_the_binding_is_recorded_once_and_another_host_is_refused_until_rebound(
    tmp_path: Path, clock: ManualClock
) -> None:
    store = Store(tmp_path / "recover-eu-1.sqlite", clock=clock, installation="eu-1")
    assert "records no installation binding" in str(binding.problem(store, *EU))
    first = binding.bind(store, *EU)
    assert first is not None and first.step == binding.BOUND and first.installation == "eu-1"
    assert first.inputs == {"installation": "eu-1", "base_url": EU[0], "key_sha256": EU[1], "why": binding.FIRST}
    assert binding.bind(store, *EU) is None  # a restart: nothing new
    assert binding.problem(store, *EU) is None
    # The same store pointed at us-1's host: refused, with the command that records a real move.
    with pytest.raises(StoreError, match=r"rebind --install eu-1") as info:
        binding.bind(store, *US)
    assert "\n" not in info.value.message
    assert "control.eu-1" in str(binding.problem(store, *US))
    moved = binding.bind(store, *US, actor="U0OPS0001", rebind=True)
    assert moved is not None and moved.actor == "U0OPS0001"
    assert moved.inputs["replaces"] == {"seq": first.seq, "base_url": EU[0], "key_sha256": EU[1]}
    assert binding.problem(store, *US) is None and binding.problem(store, *EU) is not None
    assert [s.step for s in store.steps()].count(binding.BOUND) == 2
    assert verify(store.path).ok


def test_a_store_file_swapped_between_installations_is_refused_even_by_rebind(
    tmp_path: Path, clock: ManualClock
) -> None:
    db = tmp_path / "recover.db"
    eu = Store(store_path(db, "eu-1"), clock=clock, installation="eu-1")
    binding.bind(eu, *EU)
    shutil.copy(eu.path, store_path(db, "us-1"))  # eu-1's file where us-1's belongs
    us = Store(store_path(db, "us-1"), clock=clock, installation="us-1")
    for rebind in (False, True):
        with pytest.raises(
            StoreError, match=r"belongs to installation 'eu-1', not to 'us-1': it was copied or swapped"
        ):
            binding.bind(us, *US, rebind=rebind)
    assert "copied or swapped" in str(binding.problem(us, *EU))
    # A store from before bindings (its steps the default installation's) where eu-1's belongs.
    old = Store(tmp_path / "old.db", clock=clock)
    _fill(old, clock)
    shutil.copy(old.path, tmp_path / "recover-eu-2.db")
    with pytest.raises(StoreError, match=r"step 1\) belongs to installation 'default', not to 'eu-2'"):
        binding.bind(Store(tmp_path / "recover-eu-2.db", clock=clock, installation="eu-2"), *EU)


def test_a_binding_step_edited_in_place_is_refused(tmp_path: Path, clock: ManualClock) -> None:
    store = Store(tmp_path / "recover-eu-1.sqlite", clock=clock, installation="eu-1")
    binding.bind(store, *EU)
    with _raw(store.path) as conn:
        conn.execute("DROP TRIGGER steps_no_update")
        conn.execute("UPDATE steps SET inputs = replace(inputs, ?, ?) WHERE step = ?", [EU[0], US[0], binding.BOUND])
    assert "does not match its hash" in str(binding.problem(store, US[0], EU[1]))


def test_an_evidence_pack_of_a_named_installation_carries_and_checks_each_steps_installation(
    tmp_path: Path, clock: ManualClock
) -> None:
    store = Store(tmp_path / "recover-eu-1.sqlite", clock=clock, installation="eu-1", audit_key=KEY)
    _fill(store, clock)
    pack = build_pack(store.path, KEY, PackFilter(session_id="ses_1"))
    assert {s["installation"] for s in pack["steps"]} == {"eu-1"}
    write_pack(pack, tmp_path / "pack.json")
    assert verify_pack(tmp_path / "pack.json", KEY).ok
    pack["steps"][0]["installation"] = "us-1"
    pack["signature"] = _resign(pack)
    write_pack(pack, tmp_path / "edited.json")
    problems = verify_pack(tmp_path / "edited.json", KEY).problems
    assert problems and "does not match its hash" in problems[0], problems


def _resign(pack: dict[str, object]) -> str:
    """What a holder of the key could re-sign: the step's own hash still gives the edit away."""
    body = {k: v for k, v in pack.items() if k != "signature"}
    return hmac.new(KEY, canonical_json(body).encode("utf-8"), hashlib.sha256).hexdigest()
