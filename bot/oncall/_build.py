"""The directory the Slack app resolves approver groups through: Slack user groups, and the tiers that
RECOVER_ONCALL_PAGERDUTY_POLICIES maps to PagerDuty escalation policies read from PagerDuty."""

from __future__ import annotations

from typing import Protocol

from bot.errors import SettingsError
from bot.oncall._directory import OnCallDirectory, RoutedDirectory
from bot.oncall._pagerduty import TOKEN_SETTING, PagerDutyDirectory, SlackPeople
from bot.settings import Settings, reveal


class SlackSource(OnCallDirectory, SlackPeople, Protocol):
    """Slack as an on-call source: user groups, and the email → user id look-up PagerDuty needs."""


def oncall_directory(settings: Settings, slack: SlackSource) -> OnCallDirectory:
    """``slack`` alone when no tier is mapped to PagerDuty; else mapped tiers through PagerDuty.

    Raises :class:`SettingsError` when tiers are mapped but no key is set, or a schedule is set for a tier
    no policy maps (start-up problems, named).
    """
    policies = settings.oncall_pagerduty_policies
    schedules = settings.oncall_pagerduty_schedules
    unmapped = sorted(set(schedules) - set(policies))
    if unmapped:
        raise SettingsError(
            [
                f"RECOVER_ONCALL_PAGERDUTY_SCHEDULES names {', '.join(unmapped)}, which "
                "RECOVER_ONCALL_PAGERDUTY_POLICIES does not map: a schedule narrows a tier's escalation policy, "
                "so map the tier to its policy there too (or drop it here)"
            ]
        )
    if not policies:
        return slack
    token = reveal(settings.oncall_pagerduty_token)
    if not token:
        raise SettingsError(
            [
                f"{TOKEN_SETTING} is not set: RECOVER_ONCALL_PAGERDUTY_POLICIES maps tiers to PagerDuty, "
                "which needs a REST API key (or set RECOVER_ONCALL_PAGERDUTY_TOKEN_FILE)"
            ]
        )
    pagerduty = PagerDutyDirectory(
        api_url=settings.oncall_pagerduty_url, token=token, policies=policies, people=slack, schedules=schedules
    )
    return RoutedDirectory(slack, {group: pagerduty for group in policies})
