"""Fixtures for driving OUR client against the sandbox control host over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


def starting(sid: str, *, checkpoint: bool = True, revision: int = 1) -> dict[str, Any]:
    """A session whose fresh worker is starting (restoring a checkpoint, or preparing without one)."""
    session: dict[str, Any] = {
        "id": sid,
        "status": "running",
        "admission_state": "open",
        "revision": revision,
        "execution": {"state": "running", "alive": True, "phase": "starting"},
    }
    if checkpoint:
        session["checkpoint"] = {"id": f"ckpt_{sid}", "committed_at": "-10m", "covers_turn_id": f"{sid}_t1"}
    return {
        "session": session,
        "turns": [{"id": f"{sid}_t1", "status": "completed", "started_at": "-20m", "ended_at": "-11m"}],
    }


def running(sid: str, revision: int = 5) -> dict[str, Any]:
    """A healthy session with a ready worker and a checkpoint covering its first turn."""
    spec = starting(sid, revision=revision)
    spec["session"]["execution"]["phase"] = "ready"
    return spec
