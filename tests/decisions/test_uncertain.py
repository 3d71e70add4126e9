"""An uncertain decision (no definite answer) is finished by the bot in the background, without a restart:
same Idempotency-Key, same body, one effect on the sandbox control host; said truthfully in the thread."""

from __future__ import annotations

from bot.messages import ListReporter
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER


def _close(env, sid: str, reporter: ListReporter):
    env.restore_failed(sid)
    svc = env.service()
    rid = svc.decide(REQUESTER, CHANNEL, sid, "close", reason="store is gone", reporter=reporter).messages[0].ref
    return svc, rid


def _said(reporter: ListReporter) -> str:
    return "\n".join(m.plain_text() for m in [*reporter.posted, *getattr(reporter, "progressed", [])])


def _keys(env, sid: str) -> set[str]:
    return {p["idempotency_key"] for p in env.posts(sid)}


def test_a_reply_dropped_after_the_commit_is_finished_in_the_background(decision_env):
    env = decision_env
    reporter = ListReporter()
    svc, rid = _close(env, "ses_u1", reporter)
    # The control host commits, then drops the connection: twice (every attempt of the client's own retry).
    env.sandbox.admin.fault("drop_after_commit", "/v1/sessions/ses_u1/*", method="POST", times=2)
    reply = svc.approve(APPROVER, CHANNEL, rid, reporter)
    said = "\n".join(m.plain_text() for m in reply.messages)
    assert "finishing it in the background" in said and "same Idempotency-Key" in said
    assert "/recover approve" not in said  # approve would refuse it: never suggested
    assert svc.wait_background(30)
    assert svc.requests.get(rid).state == "executed"
    assert len(env.effects("ses_u1")) == 1
    assert len(env.posts("ses_u1")) == 3 and len(_keys(env, "ses_u1")) == 1
    assert any("executed" in m.plain_text() for m in reporter.posted), _said(reporter)


def test_a_5xx_before_the_commit_is_finished_in_the_background(decision_env):
    env = decision_env
    reporter = ListReporter()
    svc, rid = _close(env, "ses_u2", reporter)
    env.sandbox.admin.fault("server_error", "/v1/sessions/ses_u2/*", method="POST", times=2, status=503)
    svc.approve(APPROVER, CHANNEL, rid, reporter)
    assert svc.wait_background(30)
    assert svc.requests.get(rid).state == "executed"
    assert len(env.effects("ses_u2")) == 1 and len(_keys(env, "ses_u2")) == 1
    # Every transition is on the chain, the uncertain one included.
    moves = [
        (s.inputs["from"], s.inputs["to"]) for s in env.store.steps(session_id="ses_u2") if s.step == "request_state"
    ]
    assert moves == [
        ("requested", "approved"),
        ("approved", "sending"),
        ("sending", "uncertain"),
        ("uncertain", "executed"),
    ]


def test_past_the_runbook_limit_it_stays_uncertain_and_the_next_start_finishes_it(decision_env):
    env = decision_env
    reporter = ListReporter()
    svc, rid = _close(env, "ses_u3", reporter)
    env.sandbox.admin.fault("server_error", "/v1/sessions/ses_u3/*", method="POST", times=None, status=500)
    start = env.clock.now()
    svc.approve(APPROVER, CHANNEL, rid, reporter)
    assert svc.wait_background(60)
    waited = (env.clock.now() - start).total_seconds()
    assert 15 * 60 - 1 <= waited <= 15 * 60 + 60  # uncertain_retry_for: 15m, through the injected clock
    assert svc.requests.get(rid).state == "uncertain"
    assert "is still uncertain after 15m" in _said(reporter)
    assert env.effects("ses_u3") == [] and len(_keys(env, "ses_u3")) == 1
    # approve says what is going on instead of re-sending it.
    again = svc.approve(APPROVER, CHANNEL, rid, ListReporter())
    assert not again.ok and "re-sends it in the background" in again.messages[0].plain_text()
    env.sandbox.admin.clear_faults()
    env.restart()
    after = env.service()
    after.recover_after_restart(ListReporter())
    assert after.wait_background(30)
    assert after.requests.get(rid).state == "executed"
    assert len(env.effects("ses_u3")) == 1 and len(_keys(env, "ses_u3")) == 1
