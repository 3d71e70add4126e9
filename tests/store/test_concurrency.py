"""Concurrent writers (Bolt's thread pool; two bot processes on one store) keep one valid chain, on
either engine (SQLite's write lock; PostgreSQL's advisory lock around each append)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.store import Store
from bot.store.audit import verify

WRITER = """
import sys
from bot.store import Store
store = Store(sys.argv[1])
name, count = sys.argv[2], int(sys.argv[3])
for i in range(count):
    store.record_step(f"ses_{i % 3}", name, "step", {"writer": name, "i": i}, "ok")
    if i % 5 == 0:
        store.begin_request("POST", f"/v1/sessions/ses_{i % 3}/resume", {"i": i}, "resume")
"""


def test_threads_writing_steps_keep_a_valid_chain(store_target: str | Path, clock: ManualClock) -> None:
    store = Store(store_target, clock=clock)
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            for i in range(25):
                store.record_step(f"ses_{i % 4}", name, "step", {"writer": name, "i": i}, "ok")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"T{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    report = verify(store_target)
    assert report.ok, report.summary()
    assert report.steps == 100
    steps = store.steps()
    for writer in ("T0", "T1", "T2", "T3"):
        assert [s.inputs["i"] for s in steps if s.actor == writer] == list(range(25))
    # One open case per session, however the threads interleaved.
    assert sorted(c.session_id for c in store.list_open_cases()) == ["ses_0", "ses_1", "ses_2", "ses_3"]


@pytest.mark.subprocess
def test_two_processes_writing_steps_keep_a_valid_chain(store_target: str | Path) -> None:
    # Both processes open (and migrate) the fresh store at the same moment.
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store_target), name, "40"], stderr=subprocess.PIPE, text=True
        )
        for name in ("P1", "P2")
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    report = verify(store_target)
    assert report.ok, report.summary()
    assert report.steps == 80
    store = Store(store_target)
    actors = [s.actor for s in store.steps()]
    assert actors.count("P1") == 40 and actors.count("P2") == 40
    assert len(store.unfinished_requests()) == 16
    assert len(store.list_open_cases()) == 3
