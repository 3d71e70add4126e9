"""The PagerDuty on-call source against its stand-in over real HTTP, people mapped through Slack's.

Every failure refuses eligibility (raises OnCallUnavailable): the approver rule then refuses, never allows.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from bot.oncall import OnCallUnavailable, PagerDutyDirectory
from bot.slack.web import SlackDirectory, SlackDirectoryError, make_client
from tests.fixtures.pagerduty import PD_TOKEN, PagerDutyStandIn
from tests.fixtures.slack import SlackStandIn, slack_settings

TIER = "S0ONCALL2"
POLICY = "PTIER01"


def _directory(pd: PagerDutyStandIn, slack: SlackStandIn, tmp_path: Path, **kw: object) -> PagerDutyDirectory:
    people = SlackDirectory(make_client(slack_settings(slack, tmp_path / "x.db")))
    kw.setdefault("token", PD_TOKEN)
    return PagerDutyDirectory(api_url=pd.base_url, policies={TIER: POLICY}, people=people, **kw)  # type: ignore[arg-type]


def _people(pd: PagerDutyStandIn, slack: SlackStandIn, n: int) -> set[str]:
    ids = set()
    for i in range(n):
        pd.on_call(POLICY, f"PUSER{i:02d}", f"Person {i}", f"person{i}@example.com")
        slack.emails[f"person{i}@example.com"] = f"UPERSON{i:03d}"
        ids.add(f"UPERSON{i:03d}")
    return ids


def test_on_call_users_over_several_pages_are_slack_ids(pagerduty_api, slack_api, tmp_path):
    pd = pagerduty_api
    expected = _people(pd, slack_api, 5)
    pd.on_call(POLICY, "PUSER00", "Person 0", "person0@example.com", level=2)  # a second level: once
    pd.on_call("POTHER9", "PUSER99", "Other", "other@example.com")  # another policy: not asked for
    slack_api.emails["other@example.com"] = "UOTHER0099"
    pd.max_limit = 2  # the API lowers the limit: the echoed limit drives the paging
    found = _directory(pd, slack_api, tmp_path).on_call(TIER)
    assert found.slack_ids == expected and found.unmatched == ()
    assert found.source == f"PagerDuty escalation policy {POLICY}"
    requests = pd.oncall_requests()
    assert [r.values("offset") for r in requests] == [["0"], ["2"], ["4"]]
    for r in requests:
        assert r.authorized and r.accept == "application/vnd.pagerduty+json;version=2"
        assert r.values("escalation_policy_ids[]") == [POLICY]
        assert r.values("include[]") == ["users"] and r.values("earliest") == ["true"]
        assert r.values("limit") == ["100"]


def test_email_to_slack_id_is_cached_and_on_calls_are_read_each_time(pagerduty_api, slack_api, tmp_path):
    expected = _people(pagerduty_api, slack_api, 3)
    directory = _directory(pagerduty_api, slack_api, tmp_path)
    assert directory.members(TIER) == expected
    assert directory.members(TIER) == expected
    assert len(slack_api.calls_to("users.lookupByEmail")) == 3  # once per person
    assert len(pagerduty_api.oncall_requests()) == 2  # who is on call changes: asked each time


def test_a_user_without_a_slack_match_is_reported_not_dropped(pagerduty_api, slack_api, tmp_path, caplog):
    expected = _people(pagerduty_api, slack_api, 1)
    pagerduty_api.on_call(POLICY, "PNOSLACK", "Nora Noslack", "nora@example.com")
    pagerduty_api.on_call(POLICY, "PNOMAIL", "Mo Nomail", None)
    directory = _directory(pagerduty_api, slack_api, tmp_path)
    with caplog.at_level(logging.WARNING, logger="recover_bot.oncall"):
        found = directory.on_call(TIER)
    assert found.slack_ids == expected
    assert found.unmatched == ("Nora Noslack (PNOSLACK)", "Mo Nomail (PNOMAIL, no email in PagerDuty)")
    assert "not matched to a Slack user" in caplog.text and "Nora Noslack" in caplog.text
    # A match not found is asked again next time (a fix in Slack counts at once).
    slack_api.emails["nora@example.com"] = "UNORA00001"
    assert "UNORA00001" in directory.members(TIER)


def test_429_then_success_waits_as_told(pagerduty_api, slack_api, tmp_path):
    expected = _people(pagerduty_api, slack_api, 2)
    pagerduty_api.rate_limit(times=1, retry_after="1")
    started = time.monotonic()
    assert _directory(pagerduty_api, slack_api, tmp_path).members(TIER) == expected
    first, second = pagerduty_api.oncall_requests()
    assert second.at - first.at >= 0.95  # Retry-After: 1 was honoured
    assert time.monotonic() - started < 5


def test_429_ratelimit_reset_header_is_honoured(pagerduty_api, slack_api, tmp_path):
    _people(pagerduty_api, slack_api, 1)
    pagerduty_api.rate_limit(times=1, retry_after=None, reset="0.3")
    waits: list[float] = []
    directory = _directory(pagerduty_api, slack_api, tmp_path, sleep=lambda s: (waits.append(s), time.sleep(s)))
    assert directory.members(TIER)
    assert waits == [0.3]


def test_429_asking_for_longer_than_the_budget_refuses_at_once(pagerduty_api, slack_api, tmp_path):
    _people(pagerduty_api, slack_api, 1)
    pagerduty_api.rate_limit(times=1, retry_after="120")
    started = time.monotonic()
    with pytest.raises(OnCallUnavailable, match="rate limited"):
        _directory(pagerduty_api, slack_api, tmp_path, max_wait=10.0).members(TIER)
    assert time.monotonic() - started < 2 and len(pagerduty_api.oncall_requests()) == 1


def test_429_without_headers_backs_off_a_bounded_number_of_times(pagerduty_api, slack_api, tmp_path):
    _people(pagerduty_api, slack_api, 1)
    pagerduty_api.rate_limit(times=None, retry_after=None)  # always, and never says how long
    waits: list[float] = []
    directory = _directory(pagerduty_api, slack_api, tmp_path, backoff=0.05, sleep=waits.append)
    with pytest.raises(OnCallUnavailable, match="rate limited"):
        directory.members(TIER)
    assert waits == [0.05, 0.1]  # doubling, no hot loop
    assert len(pagerduty_api.oncall_requests()) == 3


def test_401_refuses_naming_the_setting_and_never_the_key(pagerduty_api, slack_api, tmp_path, caplog):
    _people(pagerduty_api, slack_api, 1)
    wrong = "pd-wrong-key-Qx7Lm2Vn9R"
    with caplog.at_level(logging.DEBUG), pytest.raises(OnCallUnavailable) as info:
        _directory(pagerduty_api, slack_api, tmp_path, token=wrong).members(TIER)
    text = str(info.value)
    assert "RECOVER_ONCALL_PAGERDUTY_TOKEN" in text and "401" in text
    assert wrong not in text and wrong not in caplog.text and wrong not in repr(info.value.args)
    (request,) = pagerduty_api.oncall_requests()  # a wrong key is not retried
    assert not request.authorized


def test_5xx_is_retried_then_refuses(pagerduty_api, slack_api, tmp_path):
    expected = _people(pagerduty_api, slack_api, 1)
    pagerduty_api.fail(503, times=1)
    assert _directory(pagerduty_api, slack_api, tmp_path, backoff=0.01).members(TIER) == expected
    pagerduty_api.fail(502, times=None)
    with pytest.raises(OnCallUnavailable, match="answered 502"):
        _directory(pagerduty_api, slack_api, tmp_path, backoff=0.01).members(TIER)
    assert len(pagerduty_api.oncall_requests()) == 2 + 3


def test_a_timeout_refuses(pagerduty_api, slack_api, tmp_path):
    _people(pagerduty_api, slack_api, 1)
    pagerduty_api.delay = 1.0
    started = time.monotonic()
    with pytest.raises(OnCallUnavailable, match="did not answer"):
        _directory(pagerduty_api, slack_api, tmp_path, timeout=0.2, attempts=2, backoff=0.01).members(TIER)
    assert time.monotonic() - started < 3


def test_slack_unable_to_look_up_emails_refuses(pagerduty_api, slack_api, tmp_path):
    _people(pagerduty_api, slack_api, 1)
    slack_api.fail("users.lookupByEmail", "missing_scope", times=None)
    with pytest.raises(SlackDirectoryError, match="users:read.email"):
        _directory(pagerduty_api, slack_api, tmp_path).members(TIER)


def test_an_unmapped_tier_refuses(pagerduty_api, slack_api, tmp_path):
    with pytest.raises(OnCallUnavailable, match="RECOVER_ONCALL_PAGERDUTY_POLICIES"):
        _directory(pagerduty_api, slack_api, tmp_path).members("S0NOTMAPPED")
    assert pagerduty_api.oncall_requests() == []


def test_entries_of_another_policy_are_dropped_counted_and_logged(pagerduty_api, slack_api, tmp_path, caplog):
    expected = _people(pagerduty_api, slack_api, 2)
    pagerduty_api.on_call("PTWO", "PUSER77", "Other", "other@example.com")
    pagerduty_api.on_call("PTWO", "PUSER78", "Other 2", "other2@example.com", level=2)
    slack_api.emails.update({"other@example.com": "UOTHER0077", "other2@example.com": "UOTHER0078"})
    pagerduty_api.ignores_filter = True  # a proxy that loses the escalation_policy_ids[] filter
    with caplog.at_level(logging.WARNING, logger="recover_bot.oncall"):
        found = _directory(pagerduty_api, slack_api, tmp_path).on_call(TIER)
    assert found.slack_ids == expected and found.dropped == 2
    assert (
        "2 on-call(s) outside what was asked for (escalation policy PTWO: 2) when asked for escalation policy PTIER01"
        in caplog.text
    )
    assert PD_TOKEN not in caplog.text
    assert slack_api.calls_to("users.lookupByEmail") and all(
        "other" not in str(c) for c in slack_api.calls_to("users.lookupByEmail")
    )  # a dropped entry is never even looked up


def test_with_a_schedule_entries_of_another_schedule_or_none_are_dropped(pagerduty_api, slack_api, tmp_path, caplog):
    pd = pagerduty_api
    pd.on_call(POLICY, "PUSER01", "In Schedule", "in@example.com", schedule="PSCHED1")
    pd.on_call(POLICY, "PUSER02", "Other Schedule", "other@example.com", schedule="PSCHED2")
    pd.on_call(POLICY, "PUSER03", "Direct Target", "direct@example.com")
    slack_api.emails.update({"in@example.com": "UIN0000001", "other@example.com": "UOTH000002",
                             "direct@example.com": "UDIR000003"})  # fmt: skip
    pd.ignores_filter = True
    directory = _directory(pd, slack_api, tmp_path, schedules={TIER: "PSCHED1"})
    with caplog.at_level(logging.WARNING, logger="recover_bot.oncall"):
        found = directory.on_call(TIER)
    assert found.slack_ids == {"UIN0000001"} and found.dropped == 2
    assert found.source == f"PagerDuty escalation policy {POLICY}, schedule PSCHED1"
    assert "(no schedule: 1, schedule PSCHED2: 1) when asked for escalation policy PTIER01, schedule PSCHED1" in (
        caplog.text
    )
    assert pd.oncall_requests()[0].values("schedule_ids[]") == ["PSCHED1"]
    # A schedule that cannot be checked refuses the whole answer.
    pd.mangle = lambda entry: {**entry, "schedule": "PSCHED1"}
    with pytest.raises(OnCallUnavailable, match="schedule has no id"):
        directory.on_call(TIER)
    # Without a schedule configured for the tier, the schedule is not looked at.
    assert _directory(pd, slack_api, tmp_path).on_call(TIER).slack_ids == {"UIN0000001", "UOTH000002", "UDIR000003"}
