"""The on-call area: PagerDuty's stand-in (tests/fixtures/pagerduty.py) beside Slack's."""

from __future__ import annotations

from tests.fixtures.pagerduty import pagerduty_api

__all__ = ["pagerduty_api"]
