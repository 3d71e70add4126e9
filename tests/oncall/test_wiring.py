"""The settings of the PagerDuty source, and the directory the Slack app builds from them: a tier named in
RECOVER_ONCALL_PAGERDUTY_POLICIES is read from PagerDuty, every other group from Slack user groups."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import SettingsError
from bot.redact import redact
from bot.settings import load_settings
from bot.slack.web import SlackDirectory, approver_directory, make_client
from tests.fixtures.pagerduty import PD_TOKEN
from tests.fixtures.slack import slack_settings

MAPPED, SLACK_GROUP = "S0ONCALL2", "S0SLACKGRP"


def test_policies_parse_and_bad_pairs_are_named() -> None:
    env = {"RECOVER_ONCALL_PAGERDUTY_POLICIES": "S0ONCALL2:PABC123, S0TIER3:PDEF456"}
    s = load_settings(env, dotenv=None, uses=("oncall",))
    assert s.oncall_pagerduty_policies == {"S0ONCALL2": "PABC123", "S0TIER3": "PDEF456"}
    assert s.oncall_pagerduty_url == "https://api.pagerduty.com"
    with pytest.raises(SettingsError) as info:
        load_settings({"RECOVER_ONCALL_PAGERDUTY_POLICIES": "oncall:PABC123,S0X1:"}, dotenv=None, uses=("oncall",))
    assert "RECOVER_ONCALL_PAGERDUTY_POLICIES: 'oncall:PABC123', 'S0X1' is not GroupId:PolicyId" in str(info.value)
    with pytest.raises(SettingsError, match="RECOVER_ONCALL_PAGERDUTY_URL must be an http"):
        load_settings({"RECOVER_ONCALL_PAGERDUTY_URL": "api.pagerduty.com"}, dotenv=None, uses=("oncall",))


def test_the_key_is_a_secret(tmp_path: Path) -> None:
    """Read from its _FILE form, never shown; the one logging filter masks it (tests/core/test_log_redaction.py)."""
    key = "u+Zk3xQ9wVb7-pd-settings-key"
    (tmp_path / "pd").write_text(key + "\n")
    s = load_settings({"RECOVER_ONCALL_PAGERDUTY_TOKEN_FILE": str(tmp_path / "pd")}, dotenv=None, uses=("oncall",))
    assert s.oncall_pagerduty_token is not None and s.oncall_pagerduty_token.get_secret_value() == key
    assert key not in repr(s) and key not in str(s)
    assert redact(f"sent {key}") == "sent ***"
    assert redact("Authorization: Token token=abcDEF123") == "Authorization: Token token=***"


def test_mapped_tiers_go_to_pagerduty_and_other_groups_to_slack(pagerduty_api, slack_api, tmp_path):
    pagerduty_api.on_call("PTIER01", "PUSER01", "Pat Oncall", "pat@example.com")
    slack_api.emails["pat@example.com"] = "UPAT000001"
    slack_api.groups[SLACK_GROUP] = ["USLACK0001"]
    settings = slack_settings(
        slack_api, tmp_path / "s.db", oncall_pagerduty_policies={MAPPED: "PTIER01"},
        oncall_pagerduty_token=PD_TOKEN, oncall_pagerduty_url=pagerduty_api.base_url,
    )  # fmt: skip
    directory = approver_directory(settings, make_client(settings))
    assert directory.members(MAPPED) == {"UPAT000001"}
    assert directory.members(SLACK_GROUP) == {"USLACK0001"}
    assert len(pagerduty_api.oncall_requests()) == 1  # only the mapped tier asked PagerDuty
    assert [c.params["usergroup"] for c in slack_api.calls_to("usergroups.users.list")] == [SLACK_GROUP]


def test_without_policies_the_slack_directory_is_used_as_before(slack_api, tmp_path):
    settings = slack_settings(slack_api, tmp_path / "s.db")
    directory = approver_directory(settings, make_client(settings))
    assert isinstance(directory, SlackDirectory)  # an OnCallDirectory: members() as before


def test_policies_without_a_key_is_a_settings_problem(slack_api, tmp_path):
    settings = slack_settings(slack_api, tmp_path / "s.db", oncall_pagerduty_policies={MAPPED: "PTIER01"})
    with pytest.raises(SettingsError, match="RECOVER_ONCALL_PAGERDUTY_TOKEN is not set"):
        approver_directory(settings, make_client(settings))


def test_a_schedule_narrows_its_tier_and_one_for_an_unmapped_tier_is_refused(pagerduty_api, slack_api, tmp_path):
    s = load_settings({"RECOVER_ONCALL_PAGERDUTY_SCHEDULES": "S0ONCALL2:PSCHED1"}, dotenv=None, uses=("oncall",))
    assert s.oncall_pagerduty_schedules == {"S0ONCALL2": "PSCHED1"}
    with pytest.raises(SettingsError, match="RECOVER_ONCALL_PAGERDUTY_SCHEDULES: 'S0X1' is not GroupId:ScheduleId"):
        load_settings({"RECOVER_ONCALL_PAGERDUTY_SCHEDULES": "S0X1:"}, dotenv=None, uses=("oncall",))
    pagerduty_api.on_call("PTIER01", "PUSER01", "Pat Oncall", "pat@example.com", schedule="PSCHED1")
    pagerduty_api.on_call("PTIER01", "PUSER02", "Dee Direct", "dee@example.com")  # a direct target: no schedule
    slack_api.emails.update({"pat@example.com": "UPAT000001", "dee@example.com": "UDEE000001"})
    settings = slack_settings(
        slack_api, tmp_path / "s.db", oncall_pagerduty_policies={MAPPED: "PTIER01"},
        oncall_pagerduty_schedules={MAPPED: "PSCHED1"},
        oncall_pagerduty_token=PD_TOKEN, oncall_pagerduty_url=pagerduty_api.base_url,
    )  # fmt: skip
    assert approver_directory(settings, make_client(settings)).members(MAPPED) == {"UPAT000001"}
    assert [r.values("schedule_ids[]") for r in pagerduty_api.oncall_requests()] == [["PSCHED1"]]
    unmapped = slack_settings(
        slack_api, tmp_path / "s.db", oncall_pagerduty_policies={MAPPED: "PTIER01"},
        oncall_pagerduty_schedules={"S0OTHER9": "PSCHED1"}, oncall_pagerduty_token=PD_TOKEN,
    )  # fmt: skip
    with pytest.raises(SettingsError, match="RECOVER_ONCALL_PAGERDUTY_SCHEDULES names S0OTHER9, which"):
        approver_directory(unmapped, make_client(unmapped))
