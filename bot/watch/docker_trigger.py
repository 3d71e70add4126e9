"""Watch mode's Docker trigger: a worker container of this installation dies or stops → poll now.

The follower (bot.dockerops.WorkerStopFollower) reads the engine's events; this adapter turns them
into ``Watcher.wake`` calls and its failures into the watcher's error state (counted, shown by
``/recover watch``). A worker usually dies a moment before the control host marks its session
``recovery_required``, so each stop wakes the watcher at once and again after each ``settle`` delay.
"""

from __future__ import annotations

import threading
from typing import Protocol

from bot.dockerops import DockerClientFactory, WorkerLogConfig, WorkerStop, WorkerStopFollower

#: Seconds after a worker's stop for the later polls (the control host records the stop after it).
SETTLE_SECONDS = (1.0, 3.0)


class Wakeable(Protocol):
    errors: int
    last_error: str | None

    def wake(self) -> None: ...


class DockerTrigger:
    """A :class:`bot.watch.trigger.Trigger`: started and stopped with the watcher's loop."""

    def __init__(
        self,
        watcher: Wakeable,
        docker_client_factory: DockerClientFactory,
        installation: str,
        *,
        config: WorkerLogConfig | None = None,
        settle: tuple[float, ...] = SETTLE_SECONDS,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self.watcher = watcher
        self.settle = settle
        self.stops_seen = 0
        self._timers: dict[float, threading.Timer] = {}
        self._lock = threading.Lock()
        self.follower = WorkerStopFollower(
            docker_client_factory,
            installation,
            config=config,
            backoff=backoff,
            on_stop=self._stopped,
            on_failure=self._failed,
            on_reconnect=watcher.wake,
        )

    def start(self) -> None:
        self.follower.start()

    def stop(self) -> None:
        self.follower.stop()
        with self._lock:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()

    def _stopped(self, stop: WorkerStop) -> None:
        self.stops_seen += 1
        self.watcher.wake()
        with self._lock:  # one pending poll per delay covers a burst of stops
            for delay in self.settle:
                if delay not in self._timers:
                    timer = threading.Timer(delay, self._settled, args=(delay,))
                    timer.daemon = True
                    self._timers[delay] = timer
                    timer.start()

    def _settled(self, delay: float) -> None:
        with self._lock:
            self._timers.pop(delay, None)
        self.watcher.wake()

    def _failed(self, error: str) -> None:
        self.watcher.errors += 1
        self.watcher.last_error = f"Docker events: {error}"
