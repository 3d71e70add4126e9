"""Leases with fencing tokens (bot/store/leases.py), on both engines, attacked as a deposed holder would.

Work is claimed, not assumed; a bot paused or cut off past its lease records nothing late.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.store import Store
from bot.store.leases import LeaseLost, holder_id, take_over


def test_a_running_lease_is_refused_to_another_holder_and_renewed_for_its_own(store: Store, clock: ManualClock) -> None:
    first = store.leases.acquire("ladder:req_1", "bot-a", ttl=30)
    assert first is not None and first.token == 1
    assert store.leases.acquire("ladder:req_1", "bot-b", ttl=30) is None  # still running: not b's
    clock.advance(10)
    again = store.leases.acquire("ladder:req_1", "bot-a", ttl=30)
    assert again is not None and again.token == 1 and again.until > first.until  # renewed, same token


def test_taking_over_a_run_out_lease_raises_the_token_and_fences_the_old_holder_out(
    store: Store, clock: ManualClock
) -> None:
    old = store.leases.acquire("send:key-1", "bot-a", ttl=30)
    assert old is not None
    clock.advance(31)  # bot-a paused past its lease
    new = store.leases.acquire("send:key-1", "bot-b", ttl=30)
    assert new is not None and new.token == old.token + 1
    # bot-a wakes up and records its send under its old lease, in one transaction with the fence:
    with pytest.raises(LeaseLost, match="taken over"), store.write() as db:
        store.open_case("ses_x", "bot-a", db=db)
        store.leases.fence(db, old)
    assert store.get_open_case("ses_x") is None  # nothing it wrote in that transaction was kept
    with store.write() as db:
        store.leases.fence(db, new)  # the new holder's record goes through
    assert store.leases.renew(old, ttl=30) is None  # and the old holder cannot renew its way back


def test_a_lease_that_ran_out_fences_even_before_anyone_takes_it_over(store: Store, clock: ManualClock) -> None:
    lease = store.leases.acquire("watch-poll:default", "bot-a", ttl=5)
    assert lease is not None
    clock.advance(6)
    with pytest.raises(LeaseLost, match="ran out"), store.write() as db:
        store.leases.fence(db, lease)


def test_a_released_lease_keeps_its_token_so_the_next_holder_fences_the_last(store: Store) -> None:
    lease = store.leases.acquire("handoff:2026-12-03T08:00", "bot-a", ttl=30)
    assert lease is not None and store.leases.release(lease)
    released = store.leases.get("handoff:2026-12-03T08:00")  # readable as released: before any real time
    assert released is not None and released.token == 1 and released.until.year == 1
    assert not store.leases.release(lease)  # released once
    nxt = store.leases.acquire("handoff:2026-12-03T08:00", "bot-b", ttl=30)
    assert nxt is not None and nxt.token == 2
    with pytest.raises(LeaseLost), store.write() as db:
        store.leases.fence(db, lease)
    stored = store.leases.get("handoff:2026-12-03T08:00")
    assert stored is not None and (stored.holder, stored.token) == ("bot-b", 2)


def test_a_released_lease_reads_back_as_run_out_with_its_holder_and_token(store: Store, clock: ManualClock) -> None:
    lease = store.leases.acquire("send:key-r", "bot-a", ttl=30)
    assert lease is not None and store.leases.release(lease)
    stored = store.leases.get("send:key-r")
    assert stored is not None and (stored.holder, stored.token) == ("bot-a", 1)
    assert stored.until < clock.now()  # released: run out for every clock


def test_holders_are_told_apart_across_restarts_of_one_process() -> None:
    assert holder_id("worker") != holder_id("worker")
    assert holder_id("worker").startswith("worker:")


def test_take_over_leaves_a_running_lease_alone_even_its_own_and_takes_a_run_out_one(
    store: Store, clock: ManualClock
) -> None:
    with store.write() as db:
        first = take_over(db, "watch:k1", "bot-a", now=clock.now(), ttl=30)
        assert first is not None and first.token == 1  # never leased (a claim from before leases): run out
        assert take_over(db, "watch:k1", "bot-a", now=clock.now(), ttl=30) is None  # its own live claim
        assert take_over(db, "watch:k1", "bot-b", now=clock.now(), ttl=30) is None
    clock.advance(31)
    with store.write() as db:
        nxt = take_over(db, "watch:k1", "bot-b", now=clock.now(), ttl=30)
    assert nxt is not None and nxt.token == 2


def test_posting_records_the_token_and_refuses_a_deposed_holder(store: Store, clock: ManualClock) -> None:
    old = store.leases.acquire("ladder:req_1:0", "bot-a", ttl=30)
    assert old is not None
    assert store.leases.posting(old, "step 0")
    assert (store.leases.posting_of("ladder:req_1:0") or "").startswith("step 0 at ")
    clock.advance(31)
    new = store.leases.acquire("ladder:req_1:0", "bot-b", ttl=30)
    assert new is not None and new.token == 2
    assert not store.leases.posting(old, "step 0 late")  # deposed: refused, not raised
    assert (store.leases.posting_of("ladder:req_1:0") or "").startswith("step 0 at ")  # nothing recorded


RACER = """
import sys
from bot.store import Store
store = Store(sys.argv[1])
won = [n for n in range(int(sys.argv[3])) if store.leases.acquire(f"job-{n}", sys.argv[2], ttl=600) is not None]
print(" ".join(map(str, won)))
"""


@pytest.mark.subprocess
def test_two_processes_racing_for_the_same_jobs_each_win_a_job_at_most_once(store_target: str | Path) -> None:
    Store(store_target)  # migrated before the race
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(store_target), name, "60"], stdout=subprocess.PIPE, text=True
        )
        for name in ("bot-a", "bot-b")
    ]
    won = [set(map(int, p.communicate(timeout=120)[0].split())) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert not (won[0] & won[1]), "a job was won by both processes"
    assert won[0] | won[1] == set(range(60))
