"""A tier read from PagerDuty in the two-person rule: the decisions service against the sandbox control host,
the approver group resolved through the directory the Slack app builds (PagerDuty and Slack stand-ins).

The approver rule is the existing one (RECOVER_APPROVERS naming a group, checked by the core); only the
directory behind the group is PagerDuty's on-call list.
"""

from __future__ import annotations

import pytest

from bot.oncall import PagerDutyDirectory, RoutedDirectory
from bot.slack.web import SlackDirectory, approver_directory, make_client
from tests.fixtures.decisions import APPROVER, CHANNEL, OUTSIDER, REQUESTER
from tests.fixtures.pagerduty import PD_TOKEN
from tests.fixtures.slack import slack_settings

TIER = "S0ONCALL2"
POLICY = "PTIER01"


def _service(env, pagerduty_api, slack_api, tmp_path, *, token: str = PD_TOKEN):
    settings = slack_settings(
        slack_api, tmp_path / "slack.db", oncall_pagerduty_policies={TIER: POLICY},
        oncall_pagerduty_token=token, oncall_pagerduty_url=pagerduty_api.base_url,
    )  # fmt: skip
    return env.service(approvers=(TIER,), directory=approver_directory(settings, make_client(settings)))


def _abandon(env, svc, sid="ses_oc1"):
    reply = svc.decide(
        REQUESTER, CHANNEL, sid, "abandon", turn="turn_9", effects="none checked",
        reason="engine hung; effects checked", reporter=env.reporter,
    )  # fmt: skip
    msg = reply.messages[0]
    assert msg.kind == "approval_request", msg.plain_text()
    return msg.ref


def test_the_on_call_approver_is_allowed_and_someone_off_call_refused(decision_env, pagerduty_api, slack_api, tmp_path):
    env = decision_env
    env.outcome_unknown("ses_oc1")
    pagerduty_api.on_call(POLICY, "PAPPROV", "Ann Approver", "ann@example.com")
    pagerduty_api.on_call("POTHER9", "POUTSID", "Otto Outsider", "otto@example.com")  # on call elsewhere
    slack_api.emails.update({"ann@example.com": APPROVER, "otto@example.com": OUTSIDER})
    svc = _service(env, pagerduty_api, slack_api, tmp_path)
    rid = _abandon(env, svc)
    refused = svc.approve(OUTSIDER, CHANNEL, rid, env.reporter)
    assert not refused.ok and "not an allowed approver" in refused.messages[-1].headline
    assert svc.requests.get(rid).state == "requested" and env.posts("ses_oc1") == []
    ok = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert ok.ok, [m.plain_text() for m in ok.messages]
    assert svc.requests.get(rid).approved_by == APPROVER
    assert len(env.effects("ses_oc1")) == 1
    # What allowed the approver, recorded with the approval (never looked up again): the tier, as read now.
    (allowed_by,) = [s.inputs["allowed_by"] for s in env.store.steps(session_id="ses_oc1") if "allowed_by" in s.inputs]
    assert allowed_by == {"kind": "group", "id": TIER, "member": APPROVER}


def test_the_requester_on_call_still_cannot_approve(decision_env, pagerduty_api, slack_api, tmp_path):
    env = decision_env
    env.outcome_unknown("ses_oc1")
    pagerduty_api.on_call(POLICY, "PREQUES", "Rita Requester", "rita@example.com")
    slack_api.emails["rita@example.com"] = REQUESTER
    svc = _service(env, pagerduty_api, slack_api, tmp_path)
    rid = _abandon(env, svc)
    reply = svc.approve(REQUESTER, CHANNEL, rid, env.reporter)
    assert not reply.ok and "cannot approve your own request" in reply.messages[-1].headline
    assert env.posts("ses_oc1") == []


def test_a_rejected_pagerduty_key_refuses_the_approval_and_says_which_setting(
    decision_env, pagerduty_api, slack_api, tmp_path, caplog
):
    env = decision_env
    env.outcome_unknown("ses_oc1")
    pagerduty_api.on_call(POLICY, "PAPPROV", "Ann Approver", "ann@example.com")
    slack_api.emails["ann@example.com"] = APPROVER
    wrong = "pd-revoked-key-8Hq2Zr5Tx"
    svc = _service(env, pagerduty_api, slack_api, tmp_path, token=wrong)
    rid = _abandon(env, svc)
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    text = "\n".join(m.plain_text() for m in reply.messages)
    assert not reply.ok and "RECOVER_ONCALL_PAGERDUTY_TOKEN" in text and "401" in text
    assert wrong not in text and wrong not in caplog.text
    assert svc.requests.get(rid).state == "requested" and env.posts("ses_oc1") == []


@pytest.mark.parametrize("failure", ["5xx", "timeout", "429 for too long"])
def test_pagerduty_unable_to_answer_refuses_the_approval(decision_env, pagerduty_api, slack_api, tmp_path, failure):
    env = decision_env
    env.outcome_unknown("ses_oc1")
    pagerduty_api.on_call(POLICY, "PAPPROV", "Ann Approver", "ann@example.com")
    slack_api.emails["ann@example.com"] = APPROVER
    {"5xx": lambda: pagerduty_api.fail(503, times=None),
     "timeout": lambda: setattr(pagerduty_api, "delay", 1.0),
     "429 for too long": lambda: pagerduty_api.rate_limit(times=None, retry_after="60")}[failure]()  # fmt: skip
    slack = SlackDirectory(make_client(slack_settings(slack_api, tmp_path / "slack.db")))
    pagerduty = PagerDutyDirectory(
        api_url=pagerduty_api.base_url, token=PD_TOKEN, policies={TIER: POLICY}, people=slack,
        timeout=0.3, attempts=2, backoff=0.01,
    )  # fmt: skip
    svc = env.service(approvers=(TIER,), directory=RoutedDirectory(slack, {TIER: pagerduty}))
    rid = _abandon(env, svc)
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    text = "\n".join(m.plain_text() for m in reply.messages)
    assert not reply.ok and "not an allowed approver" in text and "PagerDuty" in text, text
    assert svc.requests.get(rid).state == "requested" and env.posts("ses_oc1") == []


def _close(env, svc, sid="ses_oc2"):
    env.restore_failed(sid)
    reply = svc.decide(REQUESTER, CHANNEL, sid, "close", reason="give up; effects checked", reporter=env.reporter)
    msg = reply.messages[0]
    assert msg.kind == "approval_request", msg.plain_text()
    return msg.ref


def test_an_on_call_of_another_policy_in_the_answer_cannot_approve_a_close(
    decision_env, pagerduty_api, slack_api, tmp_path, caplog
):
    # A proxy or cache that loses the escalation_policy_ids[] filter: the answer lists the whole account.
    env = decision_env
    pagerduty_api.ignores_filter = True
    pagerduty_api.on_call("PTWO", "POUTSID", "Otto Outsider", "otto@example.com")
    pagerduty_api.on_call(POLICY, "PAPPROV", "Ann Approver", "ann@example.com")
    slack_api.emails.update({"ann@example.com": APPROVER, "otto@example.com": OUTSIDER})
    svc = _service(env, pagerduty_api, slack_api, tmp_path)
    rid = _close(env, svc)
    with caplog.at_level("WARNING", logger="recover_bot.oncall"):
        refused = svc.approve(OUTSIDER, CHANNEL, rid, env.reporter)
    assert not refused.ok and "not an allowed approver" in refused.messages[-1].headline
    assert svc.requests.get(rid).state == "requested" and env.posts("ses_oc2") == []
    assert (
        "1 on-call(s) outside what was asked for (escalation policy PTWO: 1) when asked for escalation policy PTIER01"
        in caplog.text
    )
    assert PD_TOKEN not in caplog.text
    assert [r.values("escalation_policy_ids[]") for r in pagerduty_api.oncall_requests()] == [[POLICY]]
    # The one on call for the policy asked for still approves: the check drops, it does not refuse everyone.
    ok = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert ok.ok, [m.plain_text() for m in ok.messages]
    assert len(env.effects("ses_oc2")) == 1


def _no_policy(entry):
    return {k: v for k, v in entry.items() if k != "escalation_policy"}


def _policy_id_number(entry):
    return {**entry, "escalation_policy": {"id": 7, "type": "escalation_policy_reference"}}


def _policy_a_string(entry):
    return {**entry, "escalation_policy": POLICY}


def _user_id_number(entry):
    return {**entry, "user": {**entry["user"], "id": 12345}}


@pytest.mark.parametrize("mangle", [_no_policy, _policy_id_number, _policy_a_string, _user_id_number])
def test_an_on_call_answer_that_cannot_be_checked_refuses_the_approval(
    decision_env, pagerduty_api, slack_api, tmp_path, mangle
):
    env = decision_env
    pagerduty_api.on_call(POLICY, "PAPPROV", "Ann Approver", "ann@example.com")
    slack_api.emails["ann@example.com"] = APPROVER
    pagerduty_api.mangle = mangle
    svc = _service(env, pagerduty_api, slack_api, tmp_path)
    rid = _close(env, svc)
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    text = "\n".join(m.plain_text() for m in reply.messages)
    assert not reply.ok and "not an allowed approver" in text and "PagerDuty's on-call answer was unusable" in text
    assert svc.requests.get(rid).state == "requested" and env.posts("ses_oc2") == []
