"""Fixtures for driving OUR client against the sandbox control host over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.clock import ManualClock
from bot.controlhost import ControlHostClient, RetryPolicy
from bot.sandbox import SandboxHandle, start_sandbox
from bot.store import Store

# Short waits: the client sleeps on the test's ManualClock, so retries cost no real time.
FAST = RetryPolicy(attempts=4, base_delay=0.5, max_delay=2.0, jitter=0.5, max_retry_after=30)


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    """An empty sandbox (sessions are created per test, so no test depends on scenario files)."""
    handle = start_sandbox(scenarios=None)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def client(sbx: SandboxHandle, store: Store, clock: ManualClock) -> Iterator[ControlHostClient]:
    with ControlHostClient(sbx.url, sbx.api_key, store=store, clock=clock, retry=FAST, timeout=5.0) as c:
        yield c
