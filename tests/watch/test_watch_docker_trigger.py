"""Watch mode's Docker trigger end to end: the real engine, the sandbox control host, the real Bolt app
over signed HTTP and the Slack Web API stand-in.

A container named and labelled like a worker of a test installation is stopped; the sandbox marks
the session stopped (recovery_required); the watcher, whose interval is five minutes, posts the case
within a second or two because the engine's ``die`` woke it. When the control host marks the session
only after the worker died, a later poll (the trigger's settle, 1 s and 3 s on) finds it. Without the Docker
engine configured there is no trigger. Stopping the watcher stops the follower.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from bot.sandbox import SandboxHandle
from bot.watch import Watcher
from bot.watch.docker_trigger import DockerTrigger
from tests.fixtures.docker import DockerEngine, new_project
from tests.fixtures.triage import clone
from tests.fixtures.waiting import eventually

CHANNEL = "C0WATCHD"
INTERVAL = 300.0  # far beyond the test: only the trigger can make the watcher poll in time


def posted_within(h: Any, session_id: str, timeout: float) -> float | None:
    """Seconds until a top-level post in the watch channel names the session, or None."""
    began = time.monotonic()

    def posted() -> float | None:
        return time.monotonic() - began if any(session_id in m.all_text() for m in h.api.roots(CHANNEL)) else None

    with contextlib.suppress(pytest.fail.Exception):
        return eventually(posted, timeout, f"a post naming {session_id}")
    return None


def watched_worker(
    sandbox: SandboxHandle, slack_harness: Any, host: str, sleeping_worker: Any, sid: str
) -> tuple[Any, Any, Watcher]:
    """A session, its sleeping worker of a fresh installation, and the bot's watcher running over Slack
    with the Docker trigger, after its first poll: (harness, worker container, watcher)."""
    project = new_project()
    sandbox.admin.create_session(clone("healthy", sid))
    worker = sleeping_worker(project, session=sid)
    h = slack_harness.real(
        sandbox, watch_channel=CHANNEL, compose_project=project, docker_host=host, watch_interval=INTERVAL
    )
    watcher = h.composed.watchers["default"]
    threading.Thread(target=watcher.run, name="recover-watch-default", daemon=True).start()  # as serve's is
    assert watcher is not None and isinstance(watcher.trigger, DockerTrigger)
    assert watcher.trigger.follower.connected.wait(10), "the follower did not reach the engine"
    # the first poll (the one at start) is done before the stop
    eventually(lambda: watcher.last_poll is not None, 10, "the watcher's first poll")
    time.sleep(0.2)
    return h, worker, watcher


@pytest.mark.docker
@pytest.mark.parametrize(
    ("record_after", "within"),
    [
        (None, 2.0),  # the control host has the stop first: the poll at the event finds it (~1 s goal)
        (0.5, 6.0),  # it marks the session only after the worker died: a settle poll (1 s, 3 s) finds it
    ],
    ids=["stop-then-die", "die-then-stop"],
)
def test_a_workers_stop_makes_the_watcher_post_at_once(
    incident_sandbox: SandboxHandle,
    slack_harness: Any,
    docker_engine: DockerEngine,
    sleeping_worker: Any,
    record_after: float | None,
    within: float,
) -> None:
    sid = "ses_dtrig_001"
    h, worker, watcher = watched_worker(incident_sandbox, slack_harness, docker_engine.host, sleeping_worker, sid)
    try:
        assert h.api.roots(CHANNEL) == []
        if record_after is None:
            incident_sandbox.admin.stop(sid)  # the control host's side: recovery_required
        began = time.monotonic()
        worker.stop(timeout=0)  # the engine's side: die, then stop
        if record_after is not None:
            time.sleep(record_after)  # the poll at the event reads the listing before the stop is there
            incident_sandbox.admin.stop(sid)
        assert posted_within(h, sid, 10) is not None, "no post: the worker's stop did not wake the watcher"
        latency = time.monotonic() - began  # from the worker's stop
        assert latency < within, latency  # the bench measures it: bench/watch_docker_trigger.py
        assert watcher.trigger is not None and watcher.trigger.stops_seen >= 1
        assert watcher.errors == 0
    finally:
        watcher.stop()
    assert watcher.trigger is not None
    thread = watcher.trigger.follower._thread
    assert thread is not None and not thread.is_alive()


def test_without_the_docker_engine_there_is_no_trigger(incident_sandbox: SandboxHandle, slack_harness: Any) -> None:
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL, docker_host=None)
    watcher = h.composed.watchers.get("default")
    assert watcher is not None and watcher.trigger is None  # no RECOVER_INSTALLATION: no worker to follow


def test_wake_ends_the_wait_and_stop_ends_the_loop(incident_sandbox: SandboxHandle, slack_harness: Any) -> None:
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL, watch_interval=INTERVAL)
    watcher = h.composed.watchers.get("default")
    assert watcher is not None
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: watcher.last_poll is not None, 10, "the watcher's first poll")
        first = watcher.last_poll
        incident_sandbox.admin.advance(1)  # the sandbox's clock: a later poll has a later time
        watcher.wake()
        eventually(lambda: watcher.last_poll != first, 5, "a poll after wake()")
        assert watcher.last_poll != first, "wake() did not make the watcher poll"
    finally:
        watcher.stop()
        thread.join(5)
    assert not thread.is_alive()
