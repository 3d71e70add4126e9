"""The checks before a request moves: every refusal is one recorded step; messages read in order.

decide, approve, confirm and reject share one set of checks (bot/decisions/_guards.py); each refused
attempt is recorded once, with the refusal's code, whatever check refused it (the audit shows attempts
too), and nothing moves or is sent.
"""

from __future__ import annotations

from tests.fixtures.decisions import APPROVER, CHANNEL, OTHER_CHANNEL, OUTSIDER, REQUESTER


def _abandon(env, svc, *, yes: bool = False):
    return svc.decide(
        REQUESTER,
        CHANNEL,
        "ses_ab1",
        "abandon",
        turn="turn_9",
        effects="pushed branch fix-1 to origin",
        reason="engine hung; effects checked",
        yes=yes,
        reporter=env.reporter,
    )


def _attempts(env, step: str) -> list[str]:
    return [s.outcome for s in env.store.steps() if s.step == step]


def test_each_refused_attempt_is_one_step_with_its_code_and_nothing_moves(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service(approvers=(APPROVER,))
    rid = _abandon(env, svc).messages[0].ref
    refused = [
        ("approve", svc.approve(REQUESTER, CHANNEL, rid, env.reporter), "self_approval"),  # R3.10
        ("approve", svc.approve(OUTSIDER, CHANNEL, rid, env.reporter), "not_approver"),
        ("approve", svc.approve(APPROVER, OTHER_CHANNEL, rid, env.reporter), "refused"),
        ("approve", svc.approve(APPROVER, CHANNEL, "req_0000000000000000", env.reporter), "refused"),
        ("confirm", svc.confirm(REQUESTER, CHANNEL, rid, env.reporter), "refused"),  # two-person: approved
        ("reject", svc.reject(OUTSIDER, CHANNEL, rid, "no"), "not_approver"),
    ]
    for step, reply, _code in refused:
        assert not reply.ok, (step, [m.plain_text() for m in reply.messages])
        assert reply.messages[-1].level == "error"
    assert _attempts(env, "approve") == [code for step, _, code in refused if step == "approve"]
    assert _attempts(env, "confirm") == ["refused"]
    assert _attempts(env, "reject") == ["not_approver"]
    assert svc.requests.get(rid).state == "requested"
    assert env.posts("ses_ab1") == []


def test_a_refused_decide_is_recorded_once_and_makes_no_request(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service()
    bad_id = svc.decide(REQUESTER, CHANNEL, "ses ab1", "abandon", reason="x", reporter=env.reporter)
    missing = svc.decide(REQUESTER, CHANNEL, "ses_ab1", "abandon", reason="x", reporter=env.reporter)
    outside = svc.decide(REQUESTER, OTHER_CHANNEL, "ses_ab1", "abandon", reason="x", reporter=env.reporter)
    assert "invalid session id" in bad_id.messages[-1].headline
    assert "needs --turn" in missing.messages[-1].headline
    assert "outside the recovery channels" in outside.messages[-1].headline
    assert _attempts(env, "decide") == ["refused", "refused", "refused"]
    assert svc.requests.find() == []
    # An invalid id, or a decide from outside the channels, is recorded outside any session's case.
    assert [s.session_id for s in env.store.steps() if s.step == "decide"] == [None, "ses_ab1", None]


def test_approval_request_reads_in_order_notes_right_after_the_reason(decision_env):
    env = decision_env
    env.outcome_unknown("ses_ab1")
    svc = env.service()
    msg = _abandon(env, svc, yes=True).messages[0]
    lines = msg.lines
    # What the reader must know first, then the content with the runbook's notes after its reason.
    assert lines[0].startswith("`--yes` does not apply")
    reason = lines.index("Reason: engine hung; effects checked")
    assert lines[reason + 1].startswith("[!] Check what the turn's tools did outside first")
    assert lines[reason + 2].startswith("[!] This drops: turn turn_9")
    assert lines[reason + 3].startswith("External effects (requester's account, R3.10)")
    assert lines.index(f"/recover approve {msg.ref}") > reason + 3


def test_refused_resume_and_replay_are_one_step_each_and_send_nothing(decision_env):
    """resume and replay refuse through the same guards: one recorded step each, no POST."""
    env = decision_env
    env.outcome_unknown("ses_ab1")  # recovery_required: a resume would be refused (R0.3, R4.1)
    svc = env.service()
    bad_id = svc.resume(REQUESTER, CHANNEL, "ses ab1", env.reporter)
    stuck = svc.resume(REQUESTER, CHANNEL, "ses_ab1", env.reporter)
    outside = svc.replay(REQUESTER, OTHER_CHANNEL, env.reporter)
    assert "invalid session id" in bad_id.messages[-1].headline
    assert stuck.messages[-1].headline.startswith("resume of `ses_ab1` will not be accepted")
    assert "Nothing was sent." in stuck.messages[-1].lines[0]
    assert "outside the recovery channels" in outside.messages[-1].headline
    for reply in (bad_id, stuck, outside):
        assert not reply.ok and reply.messages[-1].level == "error"
    resumes = [(s.session_id, s.outcome) for s in env.store.steps() if s.step == "resume"]
    assert resumes[0] == (None, "refused")
    assert resumes[1][0] == "ses_ab1" and resumes[1][1] != "sending"  # the control host's code, not a send
    assert len(resumes) == 2
    assert [s.outcome for s in env.store.steps() if s.step == "replay"] == ["refused"]
    assert env.posts("ses_ab1") == []
