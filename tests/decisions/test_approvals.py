"""The two-person rule, enforced in DecisionService (the core the Slack button and the typed command both call)."""

from __future__ import annotations

import sqlite3

from tests.fixtures.decisions import (
    APPROVER,
    CHANNEL,
    GROUP,
    GROUP_MEMBER,
    OTHER_CHANNEL,
    OUTSIDER,
    REQUESTER,
    StaticDirectory,
)


def _abandon(env, svc, sid="ses_ab1", turn="turn_9", **kw):
    return svc.decide(
        REQUESTER,
        CHANNEL,
        sid,
        "abandon",
        turn=turn,
        effects="pushed branch fix-1 to origin",
        reason="engine hung; effects checked",
        reporter=env.reporter,
        **kw,
    )


def _request_id(reply) -> str:
    msg = reply.messages[0]
    assert msg.kind == "approval_request", msg.plain_text()
    assert msg.ref and msg.ref.startswith("req_")
    return msg.ref


def test_approval_request_shows_content_buttons_and_the_exact_command(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service(approvers=(APPROVER,))
    reply = _abandon(env, svc, yes=True)
    assert reply.ok
    msg = reply.messages[0]
    rid = _request_id(reply)
    text = msg.plain_text()
    # R3.10: the requester's account of the external effects is shown to the approver.
    assert "pushed branch fix-1 to origin" in text
    assert f"/recover approve {rid}" in msg.lines
    assert "turn_9" in text and "engine hung; effects checked" in text
    assert "`--yes` does not apply" in text
    assert [(b.action, b.value, b.command) for b in msg.buttons] == [
        ("approve", rid, f"/recover approve {rid}"),
        ("reject", rid, f"/recover reject {rid}"),
    ]
    assert msg.mentions == [APPROVER]
    assert dict(msg.facts)["attention.code"] == "OUTCOME_UNKNOWN"
    # Nothing was sent: a two-person decision is never executed by its requester, --yes or not.
    assert env.effects("ses_ab1") == []
    assert env.posts("ses_ab1") == []


def test_self_approval_is_refused(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service()
    rid = _request_id(_abandon(env, svc))
    reply = svc.approve(REQUESTER, CHANNEL, rid, env.reporter)
    assert not reply.ok
    assert "cannot approve your own request" in reply.messages[-1].headline
    assert svc.requests.get(rid).state == "requested"
    assert env.posts("ses_ab1") == []
    # The refusal is on the record.
    assert [s.outcome for s in env.store.steps(session_id="ses_ab1") if s.step == "approve"] == ["self_approval"]


def test_non_approver_refused_and_group_member_allowed(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    directory = StaticDirectory({GROUP: {GROUP_MEMBER}})
    svc = env.service(approvers=(APPROVER, GROUP), directory=directory)
    rid = _request_id(_abandon(env, svc))
    refused = svc.approve(OUTSIDER, CHANNEL, rid, env.reporter)
    assert not refused.ok and "not an allowed approver" in refused.messages[-1].headline
    assert directory.calls == [GROUP]
    assert svc.requests.get(rid).state == "requested"
    assert env.posts("ses_ab1") == []
    ok = svc.approve(GROUP_MEMBER, CHANNEL, rid, env.reporter)
    assert ok.ok, [m.plain_text() for m in ok.messages]
    assert svc.requests.get(rid).approved_by == GROUP_MEMBER
    assert len(env.effects("ses_ab1")) == 1


def test_group_without_directory_refuses(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service(approvers=(GROUP,))
    rid = _request_id(_abandon(env, svc))
    reply = svc.approve(GROUP_MEMBER, CHANNEL, rid, env.reporter)
    assert not reply.ok and "cannot be resolved" in reply.messages[-1].plain_text()


def test_approval_outside_channels_refused(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service()
    rid = _request_id(_abandon(env, svc))
    for channel in (OTHER_CHANNEL, None):
        reply = svc.approve(APPROVER, channel, rid, env.reporter)
        assert not reply.ok and "outside the recovery channels" in reply.messages[-1].headline
    # decide and reject are channel-restricted as well (docs/commands.md).
    assert not svc.reject(APPROVER, OTHER_CHANNEL, rid).ok
    outside = svc.decide(REQUESTER, OTHER_CHANNEL, "ses_ab1", "close", reason="x", reporter=env.reporter)
    assert not outside.ok
    assert svc.requests.get(rid).state == "requested"
    assert env.posts("ses_ab1") == []


def test_expired_request_refused_and_expire_due_updates_the_message(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    env.outcome_unknown("ses_ab2")
    svc = env.service()
    rid = _request_id(_abandon(env, svc))
    rid2 = _request_id(_abandon(env, svc, sid="ses_ab2"))
    env.clock.advance(30 * 60 - 1)  # approval_expiry: 30m in the runbook YAML
    assert svc.expire_due() == []
    env.clock.advance(1)
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert not reply.ok and "expired" in reply.messages[-1].headline
    updated = reply.messages[0]
    assert (updated.kind, updated.ref, updated.buttons) == ("approval_request", rid, [])
    assert svc.requests.get(rid).state == "expired"
    swept = svc.expire_due()
    assert [(m.kind, m.ref) for m in swept] == [("approval_request", rid2)]
    assert env.posts("ses_ab1") == [] and env.posts("ses_ab2") == []


def test_reject_then_approve_refused(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service(approvers=(APPROVER,))
    rid = _request_id(_abandon(env, svc))
    assert not svc.reject(OUTSIDER, CHANNEL, rid, "no").ok  # not an approver
    reply = svc.reject(APPROVER, CHANNEL, rid, "effects not checked yet")
    assert reply.ok
    assert reply.messages[0].ref == rid and "effects not checked yet" in reply.messages[0].headline
    again = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert not again.ok and "already rejected" in again.messages[-1].headline
    assert env.posts("ses_ab1") == []


def test_tampered_request_is_detected(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service()
    rid = _request_id(_abandon(env, svc))
    # Someone with raw database access rewrites the reason (dropping the guard trigger first).
    conn = sqlite3.connect(env.db_path)
    conn.execute("DROP TRIGGER decision_requests_content_fixed")
    conn.execute("UPDATE decision_requests SET turn_id = 'turn_1' WHERE id = ?", [rid])
    conn.commit()
    conn.close()
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert not reply.ok and "changed after it was requested" in reply.messages[-1].headline
    assert svc.requests.get(rid).state == "void"
    assert env.posts("ses_ab1") == []


def test_content_columns_cannot_be_updated(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service()
    rid = _request_id(_abandon(env, svc))
    conn = sqlite3.connect(env.db_path)
    try:
        conn.execute("UPDATE decision_requests SET reason = 'other' WHERE id = ?", [rid])
        raise AssertionError("the content update should have been refused")
    except sqlite3.IntegrityError as exc:
        assert "cannot change" in str(exc)
    finally:
        conn.close()


def test_two_person_approval_executes_once_and_verifies(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1", covered=True)
    svc = env.service()
    rid = _request_id(_abandon(env, svc))
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert reply.ok, [m.plain_text() for m in reply.messages]
    assert reply.messages[0].kind == "approval_request" and reply.messages[0].ref == rid
    effects = env.effects("ses_ab1")
    assert len(effects) == 1 and effects[0]["decision"] == "abandon"
    req = svc.requests.get(rid)
    assert req.state == "executed" and req.receipt_id == effects[0]["receipt_id"]
    # Verification (R5.1, R3.12): the covered turn leaves a resumable session → the runbook says resume.
    verify = reply.messages[-1]
    facts = dict(verify.facts)
    assert facts["session.status"] == "stopped" and facts["session.resumable"] == "true"
    assert facts["session.revision"] == str(effects[0]["revision"])
    assert "/recover resume ses_ab1" in verify.plain_text()
    # A second approval (by anyone) does nothing more.
    again = svc.approve(OUTSIDER, CHANNEL, rid, env.reporter)
    assert not again.ok and len(env.effects("ses_ab1")) == 1
    steps = [s.step for s in env.store.steps(session_id="ses_ab1")]
    assert steps.index("decision_requested") < steps.index("decision_approved") < steps.index("decision_executed")
    executed = [s for s in env.store.steps(session_id="ses_ab1") if s.step == "decision_executed"][0]
    assert executed.receipt_id == effects[0]["receipt_id"]


def test_changed_facts_void_the_approval(decision_env):
    env = decision_env
    env.restore_failed("ses_rf1", failures=3, reason="restore_refused")
    svc = env.service()
    reply = svc.decide(REQUESTER, CHANNEL, "ses_rf1", "close", reason="give up", reporter=env.reporter)
    rid = _request_id(reply)
    # The session moves on: a retry_restore by someone else resets attention (R2.9) — a decisive change.
    env.sandbox.admin.create_session({"session": {"id": "ses_other", "status": "running"}})
    other = svc.decide(
        OUTSIDER,
        CHANNEL,
        "ses_rf1",
        "retry_restore",
        reason="store fixed",
        yes=True,
        reporter=env.reporter,
        cause_fixed="store path corrected",  # restore_refused is permanent damage (R2.8)
    )
    assert other.ok, [m.plain_text() for m in other.messages]
    env.sandbox.admin.worker_ready("ses_rf1")  # the attention clears once the worker is ready (R5.1)
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert not reply.ok
    text = "\n".join(m.plain_text() for m in reply.messages)
    # The attention was cleared: "none", not "unknown"; and the voided request lists EVERY change.
    assert "void" in text and "attention.code: RESTORE_FAILED → none" in text
    updated = reply.messages[0].headline
    for change in (
        "attention.code: RESTORE_FAILED → none",
        "attention.reason: restore_refused → none",
        "attention.failures: 3 → none",
    ):
        assert change in updated, updated
    assert "unknown" not in updated
    assert svc.requests.get(rid).state == "void"
    assert [e["decision"] for e in env.effects("ses_rf1")] == ["retry_restore"]
