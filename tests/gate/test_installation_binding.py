"""The installation binding, attacked through the router the console and Slack call: two sandbox control
hosts with the same scenarios (identical session ids), two cores each with its own store file, and the
sandboxes' request logs as the ground truth for "sent".

a. a request made on eu-1, copied (row and steps) into us-1's store file, is never sent to us-1;
b. a store file swapped between installations is refused at start and, under a running core, before a
   send; a store re-bound to another host under a running core sends nothing through the old client;
c. an edited step's installation breaks the chain the gate reads;
d. a store written before installations were recorded still verifies, and its pending request still
   sends on the default installation.
"""

from __future__ import annotations

import gzip
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.app.compose import FrontPorts, compose
from bot.app.router import Router
from bot.clock import ManualClock
from bot.decisions import check_request_table
from bot.errors import StartupError
from bot.ids import store_path
from bot.installations import InstallationSpec
from bot.installations.render import write_installations
from bot.messages import ListReporter, Reply
from bot.sandbox import SandboxHandle
from bot.settings import load_settings
from bot.store import Store, binding
from bot.store.audit import verify
from bot.store.chain import canonical_json, step_hash

SESSION = "ses_startup_stopped"  # in the builtin scenarios of both sandboxes
ALICE, BOB = "U0ALICE01", "U0BOB0002"
OLD_STORE = Path(__file__).resolve().parents[1] / "fixtures" / "stores" / "before-installations.sqlite.gz"


def _core(tmp_path: Path, name: str, sbx: SandboxHandle, clock: ManualClock) -> Router:
    """One installation's core over its own store file, reaching its control host as `serve` does."""
    settings = load_settings({}, dotenv=None).model_copy(
        update={
            "db_path": tmp_path / "recover.db",
            "control_host_url": sbx.url,
            "control_host_api_key": SecretStr(sbx.api_key),
        }
    )
    # Bound to the channel the commands come from: an installation bound to none decides nowhere.
    spec = InstallationSpec(name=name, control_host_url=sbx.url, api_key=SecretStr(sbx.api_key), channels=("C1",))
    return compose(settings, [spec], ports=FrontPorts(), clock=clock, startup=False).router.routers[name]


def _run(router: Router, line: str, actor: str) -> Reply:
    reply: Reply = router.handle_text(line, actor=actor, channel="C1", reporter=ListReporter())
    return reply


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def _posts(sbx: SandboxHandle) -> list[dict[str, Any]]:
    return [r for r in sbx.admin.requests() if r.get("method") == "POST"]


def _request(router: Router) -> str:
    made = _run(router, f'decide {SESSION} close --reason "repository is gone"', ALICE)
    assert made.ok, _text(made)
    return next(str(m.ref) for m in made.messages if m.kind == "approval_request")


def _raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _append(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    """Append a step re-linked and re-hashed onto this chain (a plain chain: anyone with the file can)."""
    last = conn.execute("SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
    row = {**row, "seq": last["seq"] + 1, "prev_hash": last["hash"], "case_id": None}
    row["hash"] = step_hash(row, last["hash"])
    conn.execute(f"INSERT INTO steps ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


@pytest.fixture
def two(sandbox_factory: Callable[..., SandboxHandle]) -> tuple[SandboxHandle, SandboxHandle]:
    return sandbox_factory(scenarios="builtin"), sandbox_factory(scenarios="builtin")


# -- a: a request copied between installations ---------------------------------------------------------


def test_a_request_copied_from_eu1_into_us1s_store_is_never_sent_to_us1(tmp_path, clock, two) -> None:
    eu_sbx, us_sbx = two
    eu, us = _core(tmp_path, "eu-1", eu_sbx, clock), _core(tmp_path, "us-1", us_sbx, clock)
    request_id = _request(eu)
    assert request_id.startswith("req_") and request_id.endswith(".eu-1")
    us_own = _request(us)  # us-1's own request on the same session id: the control of this test
    assert us_own.endswith(".us-1")
    eu_db, us_db = store_path(tmp_path / "recover.db", "eu-1"), store_path(tmp_path / "recover.db", "us-1")
    with _raw(eu_db) as src, _raw(us_db) as dst:
        row = dict(src.execute("SELECT * FROM decision_requests WHERE id = ?", [request_id]).fetchone())
        dst.execute(
            f"INSERT INTO decision_requests ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values())
        )
        for step in [dict(r) for r in src.execute("SELECT * FROM steps WHERE session_id = ? ORDER BY seq", [SESSION])]:
            _append(dst, {k: v for k, v in step.items() if k not in ("seq", "prev_hash", "hash", "case_id")})
    # The copy is intact as a chain: only the installation tells it apart, and `audit verify` names it.
    copied = verify(us_db)
    assert copied.problems and {p.kind for p in copied.problems} == {"installation"}, copied.problems
    assert "belongs to installation 'eu-1', not to 'us-1'" in copied.problems[0].message
    refused = _run(us, f"approve {request_id}", BOB)
    assert not refused.ok and "belongs to installation 'eu-1', not to 'us-1'" in _text(refused), _text(refused)
    assert _posts(us_sbx) == [] and _posts(eu_sbx) == []
    # The copied steps relabelled us-1 in place and the chain re-hashed: the request's own content (its
    # installation, its id) still says eu-1.
    with _raw(us_db) as dst:
        dst.execute("DROP TRIGGER steps_no_update")
        first = dst.execute("SELECT MIN(seq) FROM steps WHERE installation = 'eu-1'").fetchone()[0]
        dst.execute("UPDATE steps SET installation = 'us-1' WHERE installation = 'eu-1'")
        prev = dst.execute("SELECT hash FROM steps WHERE seq = ?", [first - 1]).fetchone()[0]
        for step in [dict(r) for r in dst.execute("SELECT * FROM steps WHERE seq >= ? ORDER BY seq", [first])]:
            new = step_hash(step, prev)
            dst.execute("UPDATE steps SET prev_hash = ?, hash = ? WHERE seq = ?", [prev, new, step["seq"]])
            prev = new
        # and the row's state put back (not content: no hash covers it), so the gate is asked again
        dst.execute(
            "UPDATE decision_requests SET state = 'requested', decided_by = NULL, decided_at = NULL, "
            "note = NULL WHERE id = ?",
            [request_id],
        )
    assert verify(us_db).ok
    relabelled = _run(us, f"approve {request_id}", BOB)
    assert "request " + request_id + " belongs to installation 'eu-1'" in _text(relabelled), _text(relabelled)
    assert not _run(us, f"approve {request_id}", BOB).ok and _posts(us_sbx) == []
    sent = _run(us, f"approve {us_own}", BOB)  # us-1's own request goes to us-1, and only there
    assert sent.ok, _text(sent)
    assert [r["path"] for r in _posts(us_sbx)] == [f"/v1/sessions/{SESSION}/recovery-decisions"]
    assert _posts(eu_sbx) == []
    assert str(_posts(us_sbx)[0]["idempotency_key"]).endswith(".us-1")
    assert verify(eu_db, checks=[check_request_table]).ok


def test_an_approval_step_of_another_installation_authorises_nothing(tmp_path, clock, two) -> None:
    """A us-1 request whose approval step says eu-1 (written by eu-1's core, linked in by hand)."""
    _, us_sbx = two
    us = _core(tmp_path, "us-1", us_sbx, clock)
    request_id = _request(us)
    us_db = store_path(tmp_path / "recover.db", "us-1")
    with _raw(us_db) as conn:
        content_hash = conn.execute("SELECT content_hash FROM decision_requests WHERE id = ?", [request_id]).fetchone()[
            0
        ]
        inputs = {
            "request_id": request_id,
            "content_hash": content_hash,
            "channel": "C1",
            "allowed_by": {"kind": "any"},
        }
        _append(
            conn,
            {
                "session_id": SESSION,
                "actor": BOB,
                "at": "2026-11-29T10:00:01.000Z",
                "step": "decision_approved",
                "inputs": canonical_json(inputs),
                "outcome": "approved",
                "detail": None,
                "http_status": None,
                "idempotency_key": None,
                "receipt_id": None,
                "v": 1,
                "installation": "eu-1",
            },
        )
        conn.execute("DROP TRIGGER IF EXISTS decision_requests_no_state_change")
        conn.execute("UPDATE decision_requests SET state = 'approved', approved_by = ? WHERE id = ?", [BOB, request_id])
    gate = us.services.decisions.gate
    req = us.services.decisions.ctx.requests.get(request_id)
    with pytest.raises(Exception, match=r"step \d+ \(decision_approved\) belongs to installation 'eu-1'"):
        gate.prove_request(req)
    assert _posts(us_sbx) == []


# -- b: a swapped store file ----------------------------------------------------------------------------


def _swap(src: Path, dst: Path) -> None:
    with _raw(src) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm"):
        Path(f"{dst}{suffix}").unlink(missing_ok=True)
    shutil.copy(src, dst)


def test_a_store_file_swapped_between_installations_is_refused_at_start_and_before_a_send(tmp_path, clock, two) -> None:
    eu_sbx, us_sbx = two
    eu, us = _core(tmp_path, "eu-1", eu_sbx, clock), _core(tmp_path, "us-1", us_sbx, clock)
    request_id = _request(eu)
    eu_db, us_db = store_path(tmp_path / "recover.db", "eu-1"), store_path(tmp_path / "recover.db", "us-1")
    _swap(eu_db, us_db)  # eu-1's file where us-1's belongs, under the running us-1 core
    refused = _run(us, f"approve {request_id}", BOB)
    assert not refused.ok and "it was copied or swapped" in _text(refused), _text(refused)
    assert _posts(us_sbx) == [] and _posts(eu_sbx) == []
    with pytest.raises(
        StartupError, match=r"belongs to installation 'eu-1', not to 'us-1': it was copied or swapped"
    ) as info:
        _core(tmp_path, "us-1", us_sbx, clock)  # the next start: refused in one line
    assert "\n" not in str(info.value)
    assert _run(eu, f"approve {request_id}", BOB).ok  # eu-1's own file still sends to eu-1
    assert len(_posts(eu_sbx)) == 1 and _posts(us_sbx) == []


def test_a_store_pointed_at_another_host_is_refused_at_start_and_a_rebinding_under_a_running_core_too(
    tmp_path, clock, two
) -> None:
    eu_sbx, us_sbx = two
    eu = _core(tmp_path, "eu-1", eu_sbx, clock)
    request_id = _request(eu)
    with pytest.raises(StartupError, match=r"bound to .*control host|bound to http") as info:
        _core(tmp_path, "eu-1", us_sbx, clock)  # eu-1's store, us-1's host
    assert "recover-bot audit rebind --install eu-1" in str(info.value) and "\n" not in str(info.value)
    # Someone re-binds the store to us-1's host while eu-1's core runs: its client is no longer the store's.
    eu_db = store_path(tmp_path / "recover.db", "eu-1")
    other = eu.services.client.identity.__class__.of(us_sbx.url, us_sbx.api_key)
    binding.bind(eu.services.store, other.base_url, other.key_sha256, actor="U0OPS0001", rebind=True)
    refused = _run(eu, f"approve {request_id}", BOB)
    assert not refused.ok and "is bound to" in _text(refused), _text(refused)
    resume = _run(eu, "resume ses_stopped_resumable", ALICE)  # a resume passes the same check
    assert not resume.ok and "is bound to" in _text(resume), _text(resume)
    assert _posts(eu_sbx) == [] and _posts(us_sbx) == []
    assert verify(eu_db).ok


# -- c: an edited installation ---------------------------------------------------------------------------


def test_a_request_step_whose_installation_was_edited_sends_nothing(tmp_path, clock, two) -> None:
    eu_sbx, _ = two
    eu = _core(tmp_path, "eu-1", eu_sbx, clock)
    request_id = _request(eu)
    with _raw(store_path(tmp_path / "recover.db", "eu-1")) as conn:
        conn.execute("DROP TRIGGER steps_no_update")
        conn.execute("UPDATE steps SET installation = NULL WHERE step = 'decision_requested'")  # "an old step"
    refused = _run(eu, f"approve {request_id}", BOB)
    assert not refused.ok and "does not match its hash" in _text(refused), _text(refused)
    assert _posts(eu_sbx) == []


# -- d: a store from before installations ----------------------------------------------------------------


def test_a_store_from_before_installations_verifies_and_its_pending_request_sends_on_default(
    tmp_path: Path, sandbox_factory: Callable[..., SandboxHandle]
) -> None:
    # Written by the bot before steps and requests recorded their installation (no such columns), on the
    # builtin sandbox at ManualClock's start: diagnose, take, note, then a two-person `close` requested.
    db = tmp_path / "recover.db"
    db.write_bytes(gzip.decompress(OLD_STORE.read_bytes()))
    with _raw(db) as conn:
        assert "installation" not in {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
        request_id = conn.execute("SELECT id FROM decision_requests WHERE state = 'requested'").fetchone()[0]
    before = verify(db)
    assert before.ok and before.steps == 4
    clock = ManualClock()
    sbx = sandbox_factory(scenarios="builtin", clock=clock)
    core = _core(tmp_path, "default", sbx, clock)  # migrates, and records the binding
    with _raw(db) as conn:
        assert [r[0] for r in conn.execute("SELECT installation FROM steps ORDER BY seq")] == [None] * 4 + ["default"]
    sent = _run(core, f"approve {request_id}", BOB)
    assert sent.ok, _text(sent)
    assert [r["path"] for r in _posts(sbx)] == [f"/v1/sessions/{SESSION}/recovery-decisions"]
    after = verify(db, checks=[check_request_table])  # the request table against the chain, too
    assert after.ok and after.steps > 5, after.problems


def test_a_control_host_that_really_moved_is_rebound_by_a_recorded_command_then_sends(
    tmp_path, clock, two, monkeypatch, capsys
) -> None:
    from bot.cli import main

    old, new = two  # eu-1's host, then the same installation's host at a new address with a new key
    request_id = _request(_core(tmp_path, "eu-1", old, clock))
    with pytest.raises(StartupError):
        _core(tmp_path, "eu-1", new, clock)
    for name, value in {"RECOVER_DB": str(tmp_path / "recover.db"), "RECOVER_AUDIT_KEY": "none"}.items():
        monkeypatch.setenv(name, value)
    for name in ("CONTROL_HOST_URL", "CONTROL_HOST_API_KEY", "CONTROL_HOST_API_KEY_FILE", "RECOVER_INSTALLATIONS_FILE"):
        monkeypatch.delenv(name, raising=False)
    # Without the installations file eu-1 is not configured: refused, never bound to a guessed host.
    assert main(["audit", "rebind", "--install", "eu-1", "--head", "0:" + "0" * 64]) == 2
    assert "not configured here" in capsys.readouterr().err
    # The host comes from the installation's entry in the file the bot serves (its new URL and key).
    config = tmp_path / "etc" / "installations.yaml"
    write_installations(config, {"eu-1": new.url, "us-1": "http://127.0.0.1:9"}, {"eu-1": new.api_key, "us-1": "k"})
    monkeypatch.setenv("RECOVER_INSTALLATIONS_FILE", str(config))
    assert (
        main(["audit", "rebind", "--install", "ap-1", "--head", "0:" + "0" * 64]) == 2
    )  # not in the file: refused, the names said
    assert "'ap-1' is not configured here" in (err := capsys.readouterr().err) and "eu-1, us-1" in err
    assert main(["audit", "rebind", "--install", "us-1", "--head", "0:" + "0" * 64]) == 2  # no such store: nothing made
    assert "has no step store" in capsys.readouterr().err
    monkeypatch.setenv("CONTROL_HOST_URL", old.url)  # a URL beside the file is a guess: refused
    assert main(["audit", "rebind", "--install", "eu-1", "--head", "0:" + "0" * 64]) == 2
    assert "keep one" in capsys.readouterr().err
    monkeypatch.delenv("CONTROL_HOST_URL")
    eu_db = store_path(tmp_path / "recover.db", "eu-1")
    head = Store(eu_db, clock, installation="eu-1").head_ref()  # the head the operator published last
    assert main(["audit", "rebind", "--install", "eu-1", "--head", head]) == 0
    out = capsys.readouterr().out
    assert "installation 'eu-1' bound to" in out and "replacing step" in out and new.api_key not in out
    moved = _core(tmp_path, "eu-1", new, clock)
    rebound = [s for s in moved.services.store.steps() if s.step == binding.BOUND][-1]
    assert rebound.actor.startswith("console:") and rebound.inputs["replaces"]["base_url"] == old.url
    assert _run(moved, f"approve {request_id}", BOB).ok
    assert len(_posts(new)) == 1 and _posts(old) == []
    assert verify(store_path(tmp_path / "recover.db", "eu-1")).ok


def test_a_named_installations_batch_id_and_member_keys_carry_its_name(
    tmp_path, clock, sandbox_factory: Callable[..., SandboxHandle]
) -> None:
    from tests.fixtures.triage import make_incident

    sbx = sandbox_factory(scenarios=None)
    eu = _core(tmp_path, "eu-1", sbx, clock)
    made = make_incident(sbx, {"startup_stopped": 2})["startup_stopped"]
    asked = _run(eu, f'/recover batch decide --sessions {",".join(made)} close --reason "x"', ALICE)
    batch_id = str(asked.messages[0].ref)
    assert re.match(r"^bat_[0-9a-f]{12}\.eu-1$", batch_id), _text(asked)
    assert _run(eu, f"/recover batch {batch_id}", ALICE).ok  # the runbook's batch id pattern takes it
    assert _run(eu, f"/recover approve {batch_id}", BOB).ok
    keys = [str(r["idempotency_key"]) for r in _posts(sbx)]
    assert len(keys) == 2 and all(k.endswith(".eu-1") for k in keys)


def test_a_stored_record_whose_key_is_another_installations_is_not_sent(tmp_path, clock, two) -> None:
    """A resume record (and the step vouching for it) carrying a us-1 key in eu-1's store: refused at send."""
    from bot.controlhost import PURPOSE_RESUME
    from bot.decisions import NoAuthority
    from bot.vocab import Step as StepName

    eu_sbx, _ = two
    eu = _core(tmp_path, "eu-1", eu_sbx, clock)
    store, session = eu.services.store, "ses_stopped_resumable"
    method, path, body = "POST", f"/v1/sessions/{session}/resume", {"reason": "x"}
    with store.write() as db:
        record = store.begin_request(method, path, body, PURPOSE_RESUME, key="k-0001.us-1", session_id=session, db=db)
        store.record_step(
            session,
            ALICE,
            StepName.RESUME_REQUESTED,
            {"method": method, "path": path, "body": body},
            "sending",
            idempotency_key=record.key,
            db=db,
        )
    with pytest.raises(NoAuthority, match=r"the stored request k-0001.us-1 belongs to installation 'us-1'"):
        eu.services.decisions.gate.send_resume(record)
    assert _posts(eu_sbx) == []
