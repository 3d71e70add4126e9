"""On-call sources: who is on call for a tier, as Slack user ids (the approver rule's directory).

:class:`OnCallDirectory` is the interface; Slack user groups (bot/slack/web.py: ``SlackDirectory``) and
PagerDuty escalation policies (:class:`PagerDutyDirectory`) implement it; :func:`oncall_directory`
picks one per tier from the settings. A source that cannot answer raises :class:`OnCallUnavailable`
and the approval is refused, never allowed.
"""

from __future__ import annotations

from bot.oncall._build import SlackSource, oncall_directory
from bot.oncall._directory import OnCall, OnCallDirectory, OnCallUnavailable, RoutedDirectory
from bot.oncall._pagerduty import PagerDutyDirectory, SlackPeople

__all__ = [
    "OnCall",
    "OnCallDirectory",
    "OnCallUnavailable",
    "PagerDutyDirectory",
    "RoutedDirectory",
    "SlackPeople",
    "SlackSource",
    "oncall_directory",
]
