"""Bounded work pools (ThreadPoolExecutor behind a BoundedSemaphore): fixed workers, a bounded queue
that refuses at once, idle workers that exit."""

from __future__ import annotations

import threading
import time

import pytest

from bot.workpool import PoolBusy, WorkPool, health_lines, snapshot
from tests.fixtures.waiting import eventually


def test_workers_and_queue_are_bounded_and_a_full_queue_refuses_at_once() -> None:
    pool = WorkPool("test-bounded", workers=2, queue=3, idle_seconds=0.2)
    release = threading.Event()
    futures = [pool.submit(release.wait) for _ in range(5)]  # 2 running + 3 queued
    # a loaded machine may take seconds to schedule the new threads
    eventually(lambda: pool.stats()["running"] >= 2, 30, "both workers running")
    stats = pool.stats()
    assert (stats["threads"], stats["running"], stats["queued"]) == (2, 2, 3)
    started = time.monotonic()
    with pytest.raises(PoolBusy, match="test-bounded pool is full"):
        pool.submit(lambda: None)
    # At once, not after a wait for room (a blocked submit would wait for release forever); the bound is
    # loose so a loaded machine cannot fail it.
    assert time.monotonic() - started < 2.0
    assert pool.stats()["rejected"] == 1
    assert any(s["name"] == "test-bounded" and s["queued"] == 3 for s in snapshot())
    assert "pool test-bounded: 2 running, 3 queued (max 2 workers, 3 queued), 1 refused" in health_lines()
    release.set()
    assert all(f.result(5) is True for f in futures)
    assert pool.stats()["completed"] == 5


def test_idle_workers_exit_and_come_back_on_demand() -> None:
    pool = WorkPool("test-idle", workers=3, queue=10, idle_seconds=0.2)
    baseline = threading.active_count()
    assert [f.result(5) for f in [pool.submit(lambda i=i: i * 2) for i in range(6)]] == [0, 2, 4, 6, 8, 10]
    eventually(lambda: pool.stats()["threads"] == 0, 5, "the idle workers to exit")
    assert pool.stats()["threads"] == 0
    # the thread that retired the idle workers ends right after
    eventually(lambda: threading.active_count() <= baseline, 5, "the retiring thread to end")
    assert threading.active_count() <= baseline
    assert pool.submit(lambda: "again").result(5) == "again"


def test_an_exception_reaches_the_caller_and_the_worker_survives() -> None:
    pool = WorkPool("test-errors", workers=1, queue=2, idle_seconds=0.2)

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        pool.submit(boom).result(5)
    assert pool.submit(lambda: 7).result(5) == 7


def test_a_burst_before_the_workers_start_is_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine a burst can queue before the new threads reach their loop.

    The items those threads are about to take are not waiting, so 2 running + 3 queued still fits a
    pool of 2 workers and 3 queued, and only the sixth is refused. The workers' start is held back
    here (the standard library's Thread.start, not the pool) to make the slow machine certain.
    """
    go = threading.Event()
    started: list[threading.Thread] = []
    real_thread = threading.Thread

    class HeldThread(real_thread):
        def start(self) -> None:
            if self.name.startswith("test-burst-"):
                started.append(self)  # held until the burst is in
            else:
                super().start()

    monkeypatch.setattr(threading, "Thread", HeldThread)
    pool = WorkPool("test-burst", workers=2, queue=3, idle_seconds=0.2)
    futures = [pool.submit(go.wait) for _ in range(5)]
    with pytest.raises(PoolBusy):
        pool.submit(lambda: None)
    assert len(started) == 2 and pool.stats()["queued"] == 5
    for thread in started:
        real_thread.start(thread)
    go.set()
    assert all(f.result(5) is True for f in futures)
    assert pool.stats()["rejected"] == 1


def test_a_slot_is_free_again_before_the_caller_sees_the_result() -> None:
    """The http pool has no queue (workers=256, queue=0): a keep-alive connection's next request is
    submitted as soon as the last one is answered, so the slot must be back by then, not later."""
    pool = WorkPool("test-slot", workers=1, queue=0, idle_seconds=0.2)
    for i in range(300):
        assert pool.submit(lambda i=i: i).result(5) == i
    assert pool.stats()["rejected"] == 0 and pool.stats()["completed"] == 300
