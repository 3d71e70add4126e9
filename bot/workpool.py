"""Bounded work pools for the core's control-host calls, with their depths readable by ``/healthz``.

Why bounded: under a hostile or slow control host, every command would add threads and nothing would
bound them. A pool is the standard library's ``ThreadPoolExecutor`` (``workers`` threads) behind a
``BoundedSemaphore`` of ``workers + queue`` slots: a submission that finds no free slot is refused at
once (:class:`PoolBusy`, so the caller can say "busy" instead of waiting); a slot is given back when
its work has run, before its future is resolved. An executor idle for ``idle_seconds`` is shut down
(the next submission starts a new one), so a quiet bot returns to its baseline thread count.

``snapshot()`` lists every live pool's depths: a plain function for the HTTP front end's ``/healthz``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from bot.errors import RecoverError

T = TypeVar("T")

_POOLS: weakref.WeakSet[WorkPool] = weakref.WeakSet()
_POOLS_LOCK = threading.Lock()


class PoolBusy(RecoverError):
    """Every slot of the pool is taken: the work was not accepted (nothing was started)."""


class WorkPool:
    """``workers`` threads and ``queue`` waiting places; full → :class:`PoolBusy` at once."""

    def __init__(self, name: str, *, workers: int = 8, queue: int = 64, idle_seconds: float = 2.0) -> None:
        if workers < 1 or queue < 0:
            raise ValueError("a work pool needs workers >= 1 and queue >= 0")
        self.name = name
        self.max_workers = workers
        self.max_queue = queue
        self.idle_seconds = idle_seconds
        self._slots = threading.BoundedSemaphore(workers + queue)
        self._lock = threading.Lock()  # guards the figures and which executor is current
        self._executor: ThreadPoolExecutor | None = None
        self._generation = 0
        self._threads: Counter[int] = Counter()  # worker threads started, by executor generation
        self._admitted = 0  # holding a slot: queued or running
        self._running = 0
        self._rejected = 0
        self._done = 0
        self._idle_since = 0.0
        self._retiring = False  # a retirement check is pending
        with _POOLS_LOCK:
            _POOLS.add(self)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the pool; raises :class:`PoolBusy` when every slot is taken."""
        if not self._slots.acquire(blocking=False):
            with self._lock:
                self._rejected += 1
                running, queued = self._running, self._admitted - self._running
            raise PoolBusy(f"the bot's {self.name} pool is full ({running} running, {queued} queued)")
        with self._lock:
            self._admitted += 1  # from here on the current executor is not retired under this work
            if self._executor is None:
                self._generation += 1
                self._executor = ThreadPoolExecutor(
                    self.max_workers,
                    thread_name_prefix=f"{self.name}-",
                    initializer=self._started,
                    initargs=(self._generation,),
                )
            executor = self._executor
        try:
            return executor.submit(self._run, fn)
        except BaseException:
            self._release(ran=False)
            raise

    def _started(self, generation: int) -> None:
        with self._lock:
            self._threads[generation] += 1

    def _run(self, fn: Callable[[], T]) -> T:
        with self._lock:
            self._running += 1
        try:
            return fn()
        finally:
            self._release(ran=True)

    def _release(self, *, ran: bool) -> None:
        """The slot given back; the pool idle from now on → a retirement check in ``idle_seconds``."""
        with self._lock:
            self._admitted -= 1
            if ran:
                self._running -= 1
                self._done += 1
            arm = self._admitted == 0 and not self._retiring
            if self._admitted == 0:
                self._idle_since = time.monotonic()
                self._retiring = True
        self._slots.release()
        if arm:
            self._check_later(self.idle_seconds)

    def _check_later(self, seconds: float) -> None:
        timer = threading.Timer(seconds, self._retire_if_idle)
        timer.name = f"{self.name}-idle"
        timer.daemon = True
        timer.start()

    def _retire_if_idle(self) -> None:
        with self._lock:
            self._retiring = False
            if self._admitted or self._executor is None:
                return  # busy again: the next idle moment arms a new check
            left = self._idle_since + self.idle_seconds - time.monotonic()
            if left > 0:  # busy and idle again since this check was armed
                self._retiring = True
            else:
                executor, generation, self._executor = self._executor, self._generation, None
        if left > 0:
            self._check_later(left)
            return
        executor.shutdown(wait=True)  # idle threads: they end at once
        with self._lock:
            del self._threads[generation]

    def stats(self) -> dict[str, Any]:
        """Depths: workers alive, running, queued, bounds, and how many submissions were refused."""
        with self._lock:
            return {
                "name": self.name,
                "threads": sum(self._threads.values()),
                "running": self._running,
                "queued": self._admitted - self._running,
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
