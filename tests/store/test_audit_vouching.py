"""A published head vouches for the steps up to it and nothing after: ``audit verify --head`` flags what
follows it (exit 1), ``audit adopt-key`` and ``audit rebind`` bless only a chain that verifies up to the
head with nothing after it but steps the operator read and accepted one by one (recorded), the request
table checked first. A malformed head is a usage error, never "tampered"; every malformed evidence pack
is TAMPERED, never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.app.services import MIGRATIONS
from bot.clock import ManualClock
from bot.errors import StoreError
from bot.store import Store
from bot.store.evidence import PackFilter, build_pack, verify_pack

KEY = "vouching-test-key-0123456789"


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "audit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, "RECOVER_AUDIT_KEY": "none", **env},
        timeout=120,
    )


def _published(db: Path, cwd: Path) -> str:
    exported = _cli("export", "--db", str(db), "--out", str(cwd / "steps.jsonl"), cwd=cwd)
    assert exported.returncode == 0, exported.stderr
    return exported.stdout.split("head ", 1)[1].strip()


@pytest.fixture
def unkeyed(tmp_path: Path) -> tuple[Path, Path, str]:
    """An unkeyed store of three steps, its head published, and the audit key's file."""
    db = tmp_path / "recover.db"
    store = Store(db, ManualClock(), migrations=MIGRATIONS)
    for i in range(3):
        store.record_step("ses_a", "U0ALICE", "decision_requested" if i == 0 else "note", {"i": i}, "ok")
    key_file = tmp_path / "audit.key"
    key_file.write_text(KEY + "\n")
    return db, key_file, _published(db, tmp_path)


def _forge(db: Path) -> None:
    """What someone with write access does: append plain steps, hashed as anyone can (no key needed)."""
    writer = Store(db, ManualClock())
    writer.record_step("ses_a", "U0BOB", "decision_approved", {"request_id": "req_forged"}, "approved")
    writer.record_step("ses_a", "U0BOB", "request_state", {"request_id": "req_forged", "to": "approved"}, "ok")


@pytest.mark.subprocess
def test_verify_flags_steps_after_the_published_head_with_exit_1(
    unkeyed: tuple[Path, Path, str], tmp_path: Path
) -> None:
    db, _, head = unkeyed
    intact = _cli("verify", "--db", str(db), "--head", head, cwd=tmp_path)
    assert intact.returncode == 3 and "OK: 3 steps" in intact.stdout  # unkeyed, nothing after the head
    _forge(db)
    flagged = _cli("verify", "--db", str(db), "--head", head, cwd=tmp_path)
    assert flagged.returncode == 1, flagged.stdout  # FLAGGED is not OK, keyed or not
    assert "FLAGGED: 2 step(s) after the published head" in flagged.stdout
    assert "step 4: decision_approved by U0BOB" in flagged.stdout and "step 5: request_state" in flagged.stdout
    assert "TAMPERED" not in flagged.stdout  # no step, link or key failed


@pytest.mark.subprocess
def test_adopt_key_refuses_what_the_head_does_not_vouch_for_until_each_step_is_accepted(
    unkeyed: tuple[Path, Path, str], tmp_path: Path
) -> None:
    db, key_file, head = unkeyed
    _forge(db)
    adopt = ("adopt-key", "--db", str(db), "--key-file", str(key_file), "--head", head)
    refused = _cli(*adopt, cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "step 4: decision_approved by U0BOB" in refused.stdout and "step 5: request_state" in refused.stdout
    assert "2 step(s) after the published head (steps 4, 5)" in refused.stderr and "nothing recorded" in refused.stderr
    with pytest.raises(StoreError, match="only plain"):
        Store(db, ManualClock(), audit_key=KEY.encode())  # still refused with the key: nothing was blessed
    partly = _cli(*adopt, "--accept-after", "4", cwd=tmp_path)
    assert partly.returncode == 1 and "1 step(s) after the published head (steps 5)" in partly.stderr
    stray = _cli(*adopt, "--accept-after", "4", "--accept-after", "5", "--accept-after", "2", cwd=tmp_path)
    assert stray.returncode == 1 and "--accept-after 2: not a step after the published head" in stray.stderr
    accepted = _cli(*adopt, "--accept-after", "4", "--accept-after", "5", cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "steps [4, 5] accepted after it" in accepted.stdout and KEY not in accepted.stdout + accepted.stderr
    marker = Store(db, ManualClock(), audit_key=KEY.encode()).steps()[-1]
    assert marker.step == "audit_key_adopted" and marker.inputs["accepted_after_head"] == [4, 5]
    assert marker.inputs["published_head"] == head and marker.actor.startswith("console:")


@pytest.mark.subprocess
def test_adopt_key_needs_a_head_and_runs_the_request_table_check_first(
    unkeyed: tuple[Path, Path, str], tmp_path: Path
) -> None:
    db, key_file, head = unkeyed
    no_head = _cli("adopt-key", "--db", str(db), "--key-file", str(key_file), cwd=tmp_path)
    assert no_head.returncode == 2 and "--head" in no_head.stderr
    # A request row the chain never made (an edit of the table beside the chain): refused before adoption.
    store = Store(db, ManualClock(), migrations=MIGRATIONS)
    with store.write() as w:
        columns = [r[1] for r in w.conn.execute("PRAGMA table_info(decision_requests)")]
        w.conn.execute(
            f"INSERT INTO decision_requests ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",  # noqa: S608
            ["req_edited" if c == "id" else ("approved" if c == "state" else "x") for c in columns],
        )
    refused = _cli("adopt-key", "--db", str(db), "--key-file", str(key_file), "--head", head, cwd=tmp_path)
    assert refused.returncode == 1 and "request table" in refused.stdout and "req_edited" in refused.stdout
    assert "the chain does not verify" in refused.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize("head", ["HASH", "2:abc", "x:" + "0" * 64, "3:" + "g" * 64, "deadbeef"])
def test_a_malformed_head_is_a_usage_error_naming_the_form(
    unkeyed: tuple[Path, Path, str], tmp_path: Path, head: str
) -> None:
    db, _, _ = unkeyed
    bad = _cli("verify", "--db", str(db), "--head", head, cwd=tmp_path)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "SEQ:HASH" in bad.stderr and "TAMPERED" not in bad.stdout + bad.stderr


@pytest.mark.subprocess
def test_a_bare_hash_of_the_log_still_verifies(unkeyed: tuple[Path, Path, str], tmp_path: Path) -> None:
    db, _, head = unkeyed
    bare = _cli("verify", "--db", str(db), "--head", head.split(":", 1)[1].upper(), cwd=tmp_path)
    assert bare.returncode == 3 and "OK: 3 steps" in bare.stdout, bare.stdout + bare.stderr


@pytest.mark.subprocess
def test_the_help_shows_the_head_form_and_every_exit_code(tmp_path: Path) -> None:
    group = _cli("--help", cwd=tmp_path).stdout
    assert "--head 42:" in group and "--head HASH" not in group and "SEQ:HASH" in group
    verify = _cli("verify", "--help", cwd=tmp_path).stdout
    for code in ("0  intact", "1  TAMPERED", "2  a usage error", "3  intact but not authenticated"):
        assert code in verify, verify


@pytest.mark.subprocess
def test_verify_pack_names_a_missing_file(tmp_path: Path) -> None:
    missing = _cli("verify-pack", str(tmp_path / "nope.json"), cwd=tmp_path)
    assert missing.returncode == 2 and "no evidence pack at" in missing.stderr and "nope.json" in missing.stderr
    assert "key" not in missing.stderr


# -- malformed evidence packs: TAMPERED, never a crash ---------------------------------------------------


def _pack(tmp_path: Path) -> dict[str, Any]:
    clock = ManualClock()
    store = Store(tmp_path / "keyed.db", clock, audit_key=KEY.encode())
    for i in range(4):
        clock.advance(60)
        store.record_step("ses_1", f"U{i}", "note", {"i": i, "text": "é"}, "ok")
    return build_pack(store.path, KEY.encode(), PackFilter(session_id="ses_1"))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replace(copy[head], tuple(rest), new)
    return copy


@pytest.fixture(scope="module")
def sample_pack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _pack(tmp_path_factory.mktemp("sample"))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mutation_of_a_pack_is_tampered_never_a_crash(
    sample_pack: dict[str, Any], tmp_path: Path, data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(_paths(sample_pack)[1:]))
    new = data.draw(JSON | st.sampled_from(["x", "é" * 64, "0" * 64, -1, 10**30]))
    mutated = _replace(sample_pack, path, new)
    file = tmp_path / "mutated.json"
    file.write_text(json.dumps(mutated, ensure_ascii=False), encoding="utf-8")
    report = verify_pack(file, KEY.encode())  # raises nothing, whatever the file holds
    unchanged = json.dumps(mutated, sort_keys=True) == json.dumps(sample_pack, sort_keys=True)  # True is not 1 in JSON
    assert report.ok == unchanged, report.problems


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "edit",
    [
        lambda p: {**p, "signature": "é" * 64},
        lambda p: {**p, "steps": [{**p["steps"][0], "seq": "x"}, *p["steps"][1:]]},
        lambda p: {**p, "steps": [{**p["steps"][0], "hash": "ü" * 64}, *p["steps"][1:]]},
        lambda p: {**p, "steps": ["not a step", *p["steps"][1:]]},
        lambda p: {**p, "format": None},
    ],
    ids=["non-ascii signature", "seq not a number", "non-ascii step hash", "a step not a record", "no format"],
)
def test_the_cli_says_tampered_with_exit_1_for_a_malformed_pack(tmp_path: Path, edit: Any) -> None:
    pack = tmp_path / "edited.json"
    pack.write_text(json.dumps(edit(_pack(tmp_path)), ensure_ascii=False), encoding="utf-8")
    checked = _cli("verify-pack", str(pack), cwd=tmp_path, RECOVER_AUDIT_KEY=KEY)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.startswith("TAMPERED") and "unexpected error" not in checked.stderr


def _forge_approval(db: Path, rid: str, approver: str) -> list[int]:
    """What anyone with write access does to an unkeyed store: INSERT a `decision_approved` by the approver
    over the request's content hash and its `request_state` requested -> approved, with plain sha256 hashes
    (bot.store.chain.step_hash, version 1), and set the row to approved. No trigger is dropped."""
    import sqlite3

    from bot.store.chain import PLAIN_VERSION, step_hash

    conn = sqlite3.connect(db, isolation_level=None)
    conn.row_factory = sqlite3.Row
    req = dict(conn.execute("SELECT * FROM decision_requests WHERE id = ?", [rid]).fetchone())
    last = dict(conn.execute("SELECT * FROM steps ORDER BY seq DESC LIMIT 1").fetchone())
    forged = [
        (
            "decision_approved",
            {
                "request_id": rid,
                "content_hash": req["content_hash"],
                "channel": "CRECOVER01",
                "allowed_by": "approvers",
            },
            "approved",
            None,
        ),
        (
            "request_state",
            {"request_id": rid, "from": "requested", "to": "approved"},
            "approved",
            {"approved_by": approver},
        ),
    ]
    seqs = []
    for step, inputs, outcome, detail in forged:
        row = {
            **last,
            "seq": last["seq"] + 1,
            "actor": approver,
            "step": step,
            "inputs": json.dumps(inputs),
            "outcome": outcome,
            "detail": json.dumps(detail) if detail else None,
            "http_status": None,
            "idempotency_key": None,
            "receipt_id": None,
            "prev_hash": last["hash"],
            "v": PLAIN_VERSION,
        }
        row["hash"] = step_hash(row, row["prev_hash"])
        conn.execute(
            f"INSERT INTO steps ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",  # noqa: S608
            list(row.values()),
        )
        seqs.append(row["seq"])
        last = row
    conn.execute(
        "UPDATE decision_requests SET state = 'approved', approved_by = ?, approved_at = ? WHERE id = ?",
        [approver, last["at"], rid],
    )
    conn.close()
    return seqs


def test_a_forged_approval_of_a_pending_close_is_flagged_never_adopted_and_never_sent(
    decision_env: Any, tmp_path: Path
) -> None:
    # The reproduction: an unkeyed store holds a pending two-person close; its head is published; someone
    # with write access appends a plain-hashed approval and sets the row approved.
    from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER

    env = decision_env
    env.restore_failed("ses_forged")
    reply = env.service().decide(REQUESTER, CHANNEL, "ses_forged", "close", reason="give up", reporter=env.reporter)
    rid = reply.messages[0].ref
    assert rid and env.service().requests.get(rid).state == "requested"
    head = _published(env.db_path, tmp_path)
    forged = _forge_approval(env.db_path, rid, APPROVER)

    verified = _cli("verify", "--db", str(env.db_path), "--head", head, cwd=tmp_path)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    for seq, step in zip(forged, ("decision_approved", "request_state"), strict=True):
        assert f"step {seq}: {step} by {APPROVER} at " in verified.stdout
    key_file = tmp_path / "audit.key"
    key_file.write_text(KEY + "\n")
    adopt = ("adopt-key", "--db", str(env.db_path), "--key-file", str(key_file), "--head", head)
    refused = _cli(*adopt, cwd=tmp_path)
    assert refused.returncode == 1 and "2 step(s) after the published head" in refused.stderr
    half = _cli(*adopt, "--accept-after", str(forged[0]), cwd=tmp_path)
    assert half.returncode == 1 and "1 step(s) after the published head" in half.stderr
    # Nothing was adopted: a bot with the key still refuses the store, and the close was never sent.
    with pytest.raises(StoreError):
        Store(env.db_path, audit_key=KEY.encode())
    assert env.posts("ses_forged") == [] and env.effects("ses_forged") == []
