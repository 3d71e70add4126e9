"""Keyed stays keyed, from the command line: a store written before the key is refused by a bot with the
key until `recover-bot audit adopt-key` records its keyed marker; adopting twice is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.errors import StoreError
from bot.store import Store

pytestmark = pytest.mark.subprocess

KEY = "adopt-key-test-key-0123456789"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "audit", *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


def test_adopting_the_key_is_an_explicit_recorded_command(tmp_path: Path) -> None:
    db = tmp_path / "data" / "recover.db"
    db.parent.mkdir()
    clock = ManualClock()
    old = Store(db, clock)
    for i in range(3):
        old.record_step("ses_a", "U1", "step", {"i": i}, "ok")
    with pytest.raises(StoreError) as refused:
        Store(db, clock, audit_key=KEY.encode())
    assert "recover-bot audit verify" in refused.value.message and "audit adopt-key" in refused.value.message
    key_file = tmp_path / "secrets" / "audit.key"
    key_file.parent.mkdir()
    key_file.write_text(KEY + "\n")
    head = old.head_ref()  # the head published before the key is adopted: the chain must verify up to it
    adopted = _cli("adopt-key", "--db", str(db), "--key-file", str(key_file), "--head", head, cwd=tmp_path)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    assert "keyed marker at step 4" in adopted.stdout and KEY not in adopted.stdout + adopted.stderr
    store = Store(db, clock, audit_key=KEY.encode())  # served now
    marker = store.steps()[-1]
    assert (marker.step, marker.v, marker.actor.startswith("console:")) == ("audit_key_adopted", 2, True)
    again = _cli(
        "adopt-key", "--db", str(db), "--key-file", str(key_file), "--head", head, "--accept-after", "4", cwd=tmp_path
    )
    assert again.returncode == 2 and "already has its keyed marker" in again.stderr
    assert _cli("verify", "--db", str(db), "--key-file", str(key_file), cwd=tmp_path).returncode == 0
