"""Bounded work pools for the core's control-host calls, with their depths readable by ``/healthz``.

Why not a ThreadPoolExecutor per call: under a hostile or slow control host, every command would add
threads and nothing would bound them. A pool here has a fixed number of workers and a bounded queue
(a full queue refuses at once, so the caller can say "busy" instead of waiting), and idle workers end
after a short while, so a quiet bot returns to its baseline thread count.

``snapshot()`` lists every live pool's depths: a plain function for the HTTP front end's ``/healthz``.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from bot.errors import RecoverError

T = TypeVar("T")

_POOLS: weakref.WeakSet[WorkPool] = weakref.WeakSet()
_POOLS_LOCK = threading.Lock()


class PoolBusy(RecoverError):
    """The pool's queue is full: the work was not accepted (nothing was started)."""


class WorkPool:
    """A fixed-size thread pool with a bounded queue and idle workers that exit."""

    def __init__(self, name: str, *, workers: int = 8, queue: int = 64, idle_seconds: float = 2.0) -> None:
        if workers < 1 or queue < 0:
            raise ValueError("a work pool needs workers >= 1 and queue >= 0")
        self.name = name
        self.max_workers = workers
        self.max_queue = queue
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._threads = 0
        self._idle = 0
        self._starting = 0  # threads started that have not yet reached their loop: each will take an item
        self._busy = 0
        self._rejected = 0
        self._done = 0
        with _POOLS_LOCK:
            _POOLS.add(self)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn``; raises :class:`PoolBusy` when the queue is full."""
        future: Future[T] = Future()
        with self._lock:
            # Items that an idle or just-started worker is about to take are not waiting: on a loaded
            # machine a burst can queue faster than new threads reach their loop, and counting those
            # items against the bound would refuse work the pool has room for.
            waiting = len(self._queue) - self._idle - self._starting
            if waiting >= self.max_queue and self._threads >= self.max_workers:
                self._rejected += 1
                raise PoolBusy(
                    f"the bot's {self.name} pool is full ({self._busy} running, {len(self._queue)} queued)"
                )
            self._queue.append((future, fn))
            self._ready.notify()
            if len(self._queue) > self._idle + self._starting and self._threads < self.max_workers:
                self._threads += 1
                self._starting += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()
        return future

    def _work(self) -> None:
        starting = True
        while True:
            with self._lock:
                if starting:
                    # No longer "about to take an item" only once it is idle or holds one: in the same
                    # critical section, so a submit never sees this worker as neither.
                    self._starting -= 1
                    starting = False
                while not self._queue:
                    self._idle += 1
                    woke = self._ready.wait(self.idle_seconds)
                    self._idle -= 1
                    if not woke and not self._queue:
                        self._threads -= 1
                        return
                future, fn = self._queue.popleft()
                self._busy += 1
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
                        future.set_exception(exc)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._done += 1

    def stats(self) -> dict[str, Any]:
        """Depths: workers alive, running, queued, bounds, and how many submissions were refused."""
        with self._lock:
            return {
                "name": self.name,
                "threads": self._threads,
                "running": self._busy,
                "queued": len(self._queue),
                "max_workers": self.max_workers,
                "max_queue": self.max_queue,
                "rejected": self._rejected,
                "completed": self._done,
            }


def snapshot() -> list[dict[str, Any]]:
    """Every live pool's :meth:`WorkPool.stats`, by name (for ``/healthz``)."""
    with _POOLS_LOCK:
        pools = list(_POOLS)
    return sorted((p.stats() for p in pools), key=lambda s: str(s["name"]))


def health_lines() -> list[str]:
    """One line per live pool, for ``/healthz`` (e.g. a ``SlackFront(health=…)`` hook's details)."""
    return [
        f"pool {s['name']}: {s['running']} running, {s['queued']} queued "
        f"(max {s['max_workers']} workers, {s['max_queue']} queued), {s['rejected']} refused"
        for s in snapshot()
    ]
