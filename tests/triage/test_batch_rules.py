"""Batch rules: the approval threshold, expiry, channels, the chain as authority, and the exclusions
(R2.3, R2.8, R5.3, R5.4) — over the real sandbox and SQLite, plus the pure planning function."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from bot.batch.plan import Candidate, plan
from bot.messages import ListReporter, Mention, Reply, pieces
from bot.runbook import load_runbooks
from bot.sandbox import SandboxHandle
from tests.fixtures.triage import bulk_router, make_incident

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def _run(router: object, line: str, actor: str = "alice", channel: str | None = "C1") -> Reply:
    reply: Reply = router.handle_text(line, actor=actor, channel=channel, reporter=ListReporter())  # type: ignore[attr-defined]
    return reply


def _threshold_runbooks(tmp_path: Path, threshold: int) -> Path:
    folder = tmp_path / "runbooks"
    shutil.copytree(RUNBOOKS, folder)
    path = folder / "session-recovery.yaml"
    text = path.read_text()
    text = text.replace("batch_approval_threshold: {count: 50,", f"batch_approval_threshold: {{count: {threshold},")
    path.write_text(text)
    return folder


def test_a_batch_larger_than_the_threshold_needs_a_second_person(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"restore_stopped_transient": 4})["restore_stopped_transient"]
    router = bulk_router(incident_sandbox, tmp_path, runbooks_dir=_threshold_runbooks(tmp_path, 3))
    small = _run(router, f'/recover batch decide --sessions {",".join(made[:3])} retry_restore --reason "x"')
    assert "confirm to send" in small.messages[0].headline
    big = _run(router, f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "x" --yes')
    assert "second person" in big.messages[0].headline and "more members than" in big.messages[0].headline
    assert not incident_sandbox.admin.effect_counts()
    batch_id = big.messages[0].ref
    assert not _run(router, f"/recover approve {batch_id}").ok  # the requester, by text
    clicked = router.handle_action("approve", str(batch_id), actor="alice", channel="C1", reporter=ListReporter())
    assert not clicked.ok and "your own batch" in _text(clicked)  # nor by the button
    assert "4/4 accepted" in _text(_run(router, f"/recover approve {batch_id}", actor="bob"))


def test_the_handoff_names_an_open_batchs_requester_as_a_mention(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    batch_id = _run(router, f'/recover batch decide --sessions {",".join(made)} close --reason "x"').messages[0].ref
    (batches,) = [
        m for m in _run(router, "/recover handoff", actor="bob").messages if m.headline.startswith("Open batches")
    ]
    assert any(str(batch_id) in line for line in batches.lines)
    # The requester stays a structured mention (live in Slack, readable @alice at the console).
    assert Mention("@", "alice") in [p for line in batches.lines for p in pieces(line)]
    assert "Requested by @alice · owner none" in batches.plain_text()


def test_expired_batch_is_never_sent(incident_sandbox: SandboxHandle, tmp_path: Path) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    batch_id = _run(router, f'/recover batch decide --sessions {",".join(made)} close --reason "x"').messages[0].ref
    incident_sandbox.clock.advance(31 * 60)  # past approval_expiry (30 min)
    late = _run(router, f"/recover approve {batch_id}", actor="bob")
    assert not late.ok and "expired" in _text(late)
    assert not incident_sandbox.admin.effect_counts()


def test_channel_restrictions(incident_sandbox: SandboxHandle, tmp_path: Path) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path, channels=("CRECOVER01",))
    outside = _run(
        router, f'/recover batch decide --sessions {",".join(made)} close --reason "x"', channel="COTHER0001"
    )
    assert not outside.ok and "not allowed in this channel" in _text(outside)
    inside = _run(router, f'/recover batch decide --sessions {",".join(made)} close --reason "x"', channel="CRECOVER01")
    batch_id = inside.messages[0].ref
    assert _run(router, f"/recover batch {batch_id}", channel="COTHER0001").ok  # showing works anywhere
    stop = _run(router, f"/recover batch {batch_id} stop", channel="COTHER0001")
    assert not stop.ok and "recovery channels" in _text(stop)
    assert _run(
        router, "/recover dryrun batch decide --sessions " + made[0] + ' close --reason "x"', channel="COTHER0001"
    ).ok


def test_the_chain_is_the_authority_a_row_set_to_approved_by_hand_sends_nothing(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    batch_id = _run(router, f'/recover batch decide --sessions {",".join(made)} close --reason "x"').messages[0].ref
    with sqlite3.connect(tmp_path / "recover.db") as conn:  # someone with write access to the file
        conn.execute("UPDATE batches SET state = 'approved', approved_by = 'UBOB' WHERE id = ?", [batch_id])
    restarted = bulk_router(incident_sandbox, tmp_path)  # start-up would finish approved batches
    assert "records no approval by a second person" in _text(restarted.startup_reply)
    assert not incident_sandbox.admin.effect_counts()


@pytest.fixture(scope="module")
def runbooks():  # type: ignore[no-untyped-def]
    return load_runbooks(RUNBOOKS)


def _stopped(sid: str, reason: str, revision: int = 7) -> Candidate:
    facts = {
        "session.found": True,
        "session.id": sid,
        "session.status": "failed",
        "session.admission_state": "recovery_required",
        "session.revision": revision,
        "attention.present": True,
        "attention.code": "RESTORE_FAILED",
        "attention.reason": reason,
        "attention.failures": 3,
        "attention.retry_at": None,
        "attention.in_backoff": False,
        "unknown_turn.present": False,
    }
    return Candidate(sid, revision, facts, "restore_stopped")


def test_plan_exclusions_and_cause_fixed(runbooks) -> None:  # type: ignore[no-untyped-def]
    outage, incompatible, damage = (
        _stopped("s1", "restore_unavailable"),
        _stopped("s2", "incompatible_checkpoint"),
        _stopped("s3", "restore_refused"),
    )
    repeated = _stopped("s4", "restore_unavailable")
    done = {"s4": 1}
    args = {"reason": "x", "repeated": lambda c: done.get(c.session_id, 0)}
    p = plan(runbooks, "retry_restore", [outage, incompatible, damage, repeated], cause_fixed=None, **args)
    assert [m.session_id for m in p.members] == ["s1"]
    rules = {e["session_id"]: e["rule"] for e in p.excluded}
    assert rules == {"s2": "R2.3", "s3": "R2.8", "s4": "R5.4"}
    fixed = plan(runbooks, "retry_restore", [outage, incompatible, damage, repeated], cause_fixed="runtime 1.8", **args)
    assert [m.session_id for m in fixed.members] == ["s1", "s2", "s3", "s4"]
    # start_fresh is not a retry: nothing left out for the cause.
    fresh = plan(runbooks, "start_fresh", [incompatible, damage], cause_fixed=None, **args)
    assert len(fresh.members) == 2


def test_an_unknown_session_in_the_list_is_left_out_with_the_apis_answer(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 1})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    dry = _run(router, f'/recover dryrun batch decide --sessions {made[0]},ses_nope start_fresh --reason "x"')
    text = _text(dry)
    assert dry.ok and "on 1 session(s)" in text and "left out ses_nope: 404 NOT_FOUND" in text, text
