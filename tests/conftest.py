"""Shared test configuration. Area fixtures live in tests/fixtures/<area>.py (pytest plugins)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# On 2 cores with synchronous=FULL every commit fsyncs: no deadlines, bounded and repeatable examples.
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=60,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("dev", deadline=None, max_examples=40)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

pytest_plugins = [
    "tests.fixtures.common",
    "tests.fixtures.sandbox",
    "tests.fixtures.store",
    "tests.fixtures.runbook",
    "tests.fixtures.logs",
    "tests.fixtures.docker",
    "tests.fixtures.decisions",
    "tests.fixtures.escalation",
    "tests.fixtures.slack",
    "tests.fixtures.triage",
    "tests.fixtures.install",
    "tests.fixtures.repo_bounds",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every hypothesis test ``property``: hypothesis flags its own (``@given`` tests and a state
    machine's ``runTest``), so no test is marked by hand."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)
