"""The Docker event follower against the real engine: this installation's worker die/stop events,
nothing else; a broken stream reconnects with backoff (said once, every attempt counted); stop ends it.

The engine is the shared one (DOCKER_HOST); the break is a relay between the follower and the engine
(tests/docker/recording_proxy.py) that is torn down under the open stream, as a network or a proxy
restart would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import docker
import pytest

from bot.dockerops import WorkerStop, WorkerStopFollower, client_factory
from tests.docker.recording_proxy import RecordingProxy
from tests.docker.tls_engine import free_port
from tests.fixtures.docker import DockerEngine, new_project

pytestmark = pytest.mark.docker


class Seen:
    def __init__(self) -> None:
        self.stops: list[WorkerStop] = []
        self.failures: list[str] = []
        self.reconnects = 0
        self.changed = threading.Condition()

    def stop(self, stop: WorkerStop) -> None:
        with self.changed:
            self.stops.append(stop)
            self.changed.notify_all()

    def failure(self, error: str) -> None:
        with self.changed:
            self.failures.append(error)
            self.changed.notify_all()

    def reconnect(self) -> None:
        with self.changed:
            self.reconnects += 1
            self.changed.notify_all()

    def wait(self, what: Callable[[], bool], timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(what, timeout)


def follower(factory: Any, project: str, seen: Seen, **kw: Any) -> WorkerStopFollower:
    return WorkerStopFollower(
        factory, project, on_stop=seen.stop, on_failure=seen.failure, on_reconnect=seen.reconnect, **kw
    )


def test_a_workers_stop_is_reported_and_nothing_else(docker_engine: DockerEngine, sleeping_worker: Any) -> None:
    project, other = new_project(), new_project()
    seen = Seen()
    f = follower(docker_engine.factory(), project, seen)
    f.start()
    try:
        assert f.connected.wait(10)
        noise = [
            sleeping_worker(other),  # another installation's worker
            sleeping_worker(project, service="reconciler"),  # this installation, not a worker
            sleeping_worker(project, name=f"{project}-worker-x", service="worker"),  # not compose's name
        ]
        worker = sleeping_worker(project, session="ses_events_1")
        for c in noise:
            c.kill()
        time.sleep(0.5)
        assert seen.stops == []
        started = time.monotonic()
        worker.stop(timeout=0)
        assert seen.wait(lambda: bool(seen.stops), 10)
        assert time.monotonic() - started < 2.0
        first = seen.stops[0]
        assert first.name == f"{project}-worker-1" and first.session_id == "ses_events_1"
        assert seen.wait(lambda: {s.action for s in seen.stops} == {"die", "stop"}, 5)
        assert seen.failures == []
    finally:
        began = time.monotonic()
        f.stop()
        assert time.monotonic() - began < 2.0  # the open stream is closed, not waited out
    assert f._thread is not None and not f._thread.is_alive()


def test_a_broken_stream_reconnects_with_backoff_said_once_and_counted(
    docker_engine: DockerEngine, sleeping_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    if not docker_engine.host.startswith("unix://"):
        pytest.skip("the relay forwards to a unix socket engine")
    socket_path = docker_engine.host.removeprefix("unix://")
    relay = {"proxy": RecordingProxy(socket_path)}
    dead_url = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there: connection refused

    target = {"url": relay["proxy"].url}

    def factory() -> docker.DockerClient:
        return client_factory(target["url"], timeout=5)()

    project = new_project()
    seen = Seen()
    f = follower(factory, project, seen, backoff=(0.05, 0.2))
    caplog.set_level(logging.INFO, logger="bot.dockerops._events")
    f.start()
    try:
        assert f.connected.wait(10) and seen.wait(lambda: seen.reconnects == 1)
        target["url"] = dead_url
        relay["proxy"].stop()  # the open stream breaks under the follower
        assert seen.wait(lambda: len(seen.failures) >= 3, 10)  # it keeps trying, each attempt counted
        assert f.failures >= 3 and not f.connected.is_set()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "retrying with backoff" in warnings[0].getMessage()  # said once

        relay["proxy"] = RecordingProxy(socket_path)
        target["url"] = relay["proxy"].url
        assert seen.wait(lambda: seen.reconnects == 2, 10)  # back: one wake for the gap's events
        assert f.failures == 0
        assert any("following the engine again" in r.getMessage() for r in caplog.records)
        sleeping_worker(project).stop(timeout=0)
        assert seen.wait(lambda: bool(seen.stops), 10)
        calls = {p.split("/", 2)[-1] for _, p in relay["proxy"].recorded()}
        assert "events" in calls
    finally:
        f.stop()
        relay["proxy"].stop()
    assert f._thread is not None and not f._thread.is_alive()


def test_an_engine_that_never_answers_is_retried_until_stop(sleeping_worker: Any) -> None:
    proxy = RecordingProxy("/nonexistent/docker.sock")  # accepts, then hangs up: no engine behind it
    seen = Seen()
    f = follower(client_factory(proxy.url, timeout=5), new_project(), seen, backoff=(0.05, 0.1))
    f.start()
    try:
        assert seen.wait(lambda: len(seen.failures) >= 2, 10)
        assert all("Docker engine" in e for e in seen.failures), seen.failures
    finally:
        f.stop()
        proxy.stop()
    assert f._thread is not None and not f._thread.is_alive() and seen.stops == []


def test_a_stream_is_renewed_without_counting_a_failure(docker_engine: DockerEngine, sleeping_worker: Any) -> None:
    project = new_project()
    seen = Seen()
    f = follower(docker_engine.factory(), project, seen, renew_after=0.3)
    f.start()
    try:
        assert seen.wait(lambda: seen.reconnects >= 3, 10)
        assert seen.failures == [] and f.failures == 0
        assert f.connected.wait(5)
        sleeping_worker(project).stop(timeout=0)
        assert seen.wait(lambda: bool(seen.stops), 10)
    finally:
        f.stop()


def test_a_proxy_that_refuses_events_is_named_and_retried(docker_engine: DockerEngine) -> None:
    if not docker_engine.host.startswith("unix://"):
        pytest.skip("the relay forwards to a unix socket engine")
    # An allowlist from before watch mode: everything the bot did then, but not GET /events.
    proxy = RecordingProxy(docker_engine.host.removeprefix("unix://"), allow=lambda m, p: not p.endswith("/events"))
    seen = Seen()
    f = follower(client_factory(proxy.url, timeout=5), new_project(), seen, backoff=(0.05, 0.1))
    f.start()
    try:
        assert seen.wait(lambda: len(seen.failures) >= 2, 10)
        assert seen.failures[0] == (
            "Following the Docker engine's events: the Docker API refused it "
            "(403 socket proxy: GET /v1.41/events is not allowed)."
        )
        assert not f.connected.is_set()
    finally:
        f.stop()
        proxy.stop()
