"""Evidence packs: ``audit export --pack`` signs one session's steps; ``audit verify-pack`` checks it offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.store import Store

pytestmark = pytest.mark.subprocess

KEY = "k3y-for-the-evidence"


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, cwd=cwd, env={**base, **env},
        timeout=60,
    )  # fmt: skip


def _store(tmp_path: Path) -> Store:
    clock = ManualClock()
    store = Store(tmp_path / "keyed.db", clock, audit_key=KEY.encode())
    for i in range(6):
        clock.advance(60)
        store.record_step(f"ses_{i % 2}", f"U{i}", "note", {"i": i}, "ok")
    return store


def test_a_pack_of_one_session_verifies_offline_and_links_into_the_chain(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pack = tmp_path / "ses_1.evidence.json"
    res = _cli("audit", "export", "--db", str(store.path), "--pack", str(pack), "--session", "ses_1",
               cwd=tmp_path, RECOVER_AUDIT_KEY=KEY)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"wrote 3 steps to {pack}, signed; head {store.head_ref()}"
    data = json.loads(pack.read_text())
    by_seq = {s.seq: s for s in store.steps()}
    assert [s["session_id"] for s in data["steps"]] == ["ses_1"] * 3
    for step in data["steps"]:  # the boundary hashes are the store's own: the pack links into the chain
        assert (step["prev_hash"], step["hash"]) == (by_seq[step["seq"]].prev_hash, by_seq[step["seq"]].hash)
    ok = _cli("audit", "verify-pack", str(pack), cwd=tmp_path, RECOVER_AUDIT_KEY=KEY)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("OK: evidence pack of 3 steps, signature and every step's hash verified")
    assert KEY not in ok.stdout + res.stdout


def test_an_edited_pack_or_another_key_is_caught(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pack = tmp_path / "p.json"
    assert _cli("audit", "export", "--db", str(store.path), "--pack", str(pack), "--session", "ses_0",
                cwd=tmp_path, RECOVER_AUDIT_KEY=KEY).returncode == 0  # fmt: skip
    data = json.loads(pack.read_text())
    seq = data["steps"][1]["seq"]
    data["steps"][1]["actor"] = "U_mallory"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    bad = _cli("audit", "verify-pack", str(edited), cwd=tmp_path, RECOVER_AUDIT_KEY=KEY)
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [
        "TAMPERED: 2 problem(s) in the evidence pack",
        "signature: does not verify under this audit key (edited, or another key)",
        f"step {seq}: its content does not match its hash (edited)",
    ]
    other = _cli("audit", "verify-pack", str(pack), cwd=tmp_path, RECOVER_AUDIT_KEY="another-key-entirely")
    assert other.returncode == 1 and "signature: does not verify" in other.stdout


def test_a_pack_needs_the_key_and_never_overwrites(tmp_path: Path) -> None:
    store = _store(tmp_path)
    no_key = _cli("audit", "export", "--db", str(store.path), "--pack", str(tmp_path / "p.json"), cwd=tmp_path)
    assert no_key.returncode == 2
    assert no_key.stderr.strip() == (
        "error: an evidence pack is signed with the audit key: set RECOVER_AUDIT_KEY or pass --key-file"
    )
    (tmp_path / "taken.json").write_text("{}")
    taken = _cli("audit", "export", "--db", str(store.path), "--pack", str(tmp_path / "taken.json"), cwd=tmp_path,
                 RECOVER_AUDIT_KEY=KEY)  # fmt: skip
    assert taken.returncode == 2 and "is never overwritten" in taken.stderr
    none = _cli("audit", "export", "--db", str(store.path), "--pack", str(tmp_path / "n.json"), "--session", "ses_9",
                cwd=tmp_path, RECOVER_AUDIT_KEY=KEY)  # fmt: skip
    assert none.returncode == 2 and "no step matches" in none.stderr
    stray = _cli("audit", "export", "--db", str(store.path), "--session", "ses_1", cwd=tmp_path)
    assert stray.returncode == 2 and "go with --pack FILE" in stray.stderr
