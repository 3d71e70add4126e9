"""The inbox between the ack and the work (bot/slack/inbox.py), on both engines: a real SQLite file
beside the store, and the tables in a real PostgreSQL store's schema (``store_target``).

Puts from many threads at once are committed in groups: each gets its own row, a repeated key gets
none (the durable de-duplication of Slack's retries), and a claim is a compare-and-set; on PostgreSQL
the same holds between processes (two bots on one store).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import psycopg
import pytest

from bot.slack.inbox import INBOX_LOCK_KEY, FileInbox, Inbox, ServerInbox, inbox_path
from bot.slack.state import slack_migrations
from bot.store import Store
from tests.fixtures.waiting import eventually


def _open(target: str | Path) -> Inbox:
    return Inbox(Store(target, migrations=[slack_migrations]))


def _insert_raw(target: str | Path, key: str, raw: bytes) -> None:
    """A row written past the inbox (bytes as stored), to see what a claim makes of it."""
    if isinstance(target, Path):
        with sqlite3.connect(inbox_path(target)) as conn:
            conn.execute(
                "INSERT INTO slack_inbox (key, kind, payload, state, created_at) "
                "VALUES (?, 'command', CAST(? AS TEXT), 'queued', 0)",
                [key, raw],
            )
        return
    with psycopg.connect(str(target), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO slack_inbox (key, kind, payload, state, created_at) VALUES (%s, 'command', %s, 'queued', 0)",
            [key, raw],
        )


def test_the_engine_is_picked_from_the_store(store_target) -> None:
    inbox = _open(store_target)
    assert isinstance(inbox, FileInbox if isinstance(store_target, Path) else ServerInbox)


def test_concurrent_puts_each_commit_once_and_a_repeated_key_gets_no_row(store_target) -> None:
    inbox = _open(store_target)
    barrier = threading.Barrier(40)

    def put(i: int) -> int | None:
        barrier.wait()
        # Half the threads send the same delivery twice over (Slack's retry racing the first).
        return inbox.put("command", f"command:T1:trig-{i // 2}", {"body": {"text": "help", "n": i}})

    with ThreadPoolExecutor(40) as pool:
        ids = list(pool.map(put, range(40)))
    kept = [i for i in ids if i is not None]
    assert len(kept) == 20 and len(set(kept)) == 20, ids
    assert inbox.states() == {"queued": 20}
    assert inbox.put("command", "command:T1:trig-3", {"body": {}}) is None  # still refused later
    # A fresh Inbox over the same store (another process, a restart) sees the same keys.
    assert _open(store_target).put("command", "command:T1:trig-3", {"body": {}}) is None


def test_a_claim_is_a_compare_and_set_between_workers(store_target) -> None:
    inbox = _open(store_target)
    for i in range(50):
        inbox.put("command", f"k{i}", {"body": {"n": i}})
    others = [_open(store_target) for _ in range(4)]
    barrier = threading.Barrier(4)

    def drain(w: int) -> list[int]:
        barrier.wait()
        got: list[int] = []
        while items := others[w].claim(f"worker-{w}", limit=3):
            got.extend(item.id for item in items)
        return got

    with ThreadPoolExecutor(4) as pool:
        claimed = [i for got in pool.map(drain, range(4)) for i in got]
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 50
    assert inbox.finish(claimed[0], "someone-else") is False  # only the claimer finishes its item
    assert inbox.states() == {"claimed": 50}


def test_a_row_that_is_not_a_delivery_is_marked_never_raised_also_as_an_orphan(store_target) -> None:
    """A claim (and the take-over of a dead worker's claims) reads every row it moved: one that is not
    UTF-8 JSON of an object comes out marked with its damage, the others as they were."""
    inbox = _open(store_target)
    inbox.put("command", "k-good-1", {"body": {"text": "help"}})
    for key, raw in [
        ("k-utf8", b'{"body": {"user_id": "U1", "text": "\xff"}}'),
        ("k-json", b"{"),
        ("k-list", b"[1, 2]"),
        ("k-deep", b"[" * 100_000),
    ]:
        _insert_raw(store_target, key, raw)
    inbox.put("command", "k-good-2", {"body": {"text": "help"}})
    items = inbox.claim("w1", limit=10)
    assert [i.damage is None for i in items] == [True, False, False, False, False, True]
    assert items[1].payload == {"body": {"user_id": "U1", "text": "\ufffd"}}  # enough to tell its author
    assert [i.damage for i in items[2:5]] == [
        "its payload is not JSON",
        "its payload is a JSON list, not an object",
        "its payload is not JSON",
    ]
    assert inbox.quarantine(items[1].id, "w2") is False  # only by the claimer
    assert inbox.quarantine(items[1].id, "w1") is True and inbox.quarantined() == (1, items[1].id)
    inbox.beat("w1")
    inbox.mark_dead("w1")
    orphans = inbox.take_orphans()
    assert len(orphans) == 5 and sum(o.damage is not None for o in orphans) == 3
    assert inbox.states() == {"quarantined": 1, "interrupted": 5}


# --- between processes: two bots on one store -----------------------------------------------------

_PROCESS = """
import json, os, sys, time
from pathlib import Path
from bot.slack.inbox import Inbox
from bot.slack.state import slack_migrations
from bot.store import Store
target, role, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
inbox = Inbox(Store(Path(target) if "://" not in target else target, migrations=[slack_migrations]))
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
if role == "put":
    ids = [inbox.put("command", f"k{i}", {"body": {"n": i, "pid": os.getpid()}}) for i in range(100)]
else:
    ids = []
    while items := inbox.claim(f"claimer-{os.getpid()}", limit=3):
        ids.extend(item.id for item in items)
print(json.dumps(ids), flush=True)
"""


def _in_two_processes(target: str | Path, role: str, tmp_path: Path) -> list[list[int | None]]:
    """Run ``role`` (put the same 100 keys, or claim until nothing is left) in two processes at once."""
    go = tmp_path / f"go-{role}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS, str(target), role, str(go)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        go.touch()
        outs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [p.returncode for p in procs] == [0, 0]
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


@pytest.mark.subprocess
def test_two_processes_putting_the_same_keys_queue_each_once(store_target, tmp_path) -> None:
    _open(store_target)  # the tables, before either process
    first, second = _in_two_processes(store_target, "put", tmp_path)
    kept = [i for i in first + second if i is not None]
    assert len(kept) == 100 and len(set(kept)) == 100  # each key queued by one of them, once
    assert all((a is None) != (b is None) for a, b in zip(first, second, strict=True))
    assert _open(store_target).states() == {"queued": 100}


@pytest.mark.subprocess
def test_two_processes_claiming_never_take_one_item_twice(store_target, tmp_path) -> None:
    inbox = _open(store_target)
    for i in range(150):
        inbox.put("command", f"k{i}", {"body": {"n": i}})
    first, second = _in_two_processes(store_target, "claim", tmp_path)
    assert not set(first) & set(second)  # (which of them claimed how many is the scheduler's)
    assert len(first + second) == len(set(first + second)) == 150
    assert inbox.states() == {"claimed": 150}


def test_a_dead_workers_claims_are_taken_over_once_by_racing_takers(store_target) -> None:
    """Two live workers (two bots) see one dead worker's claims at once: each item is moved to
    interrupted by one of them, so its person is told once (R0.3: never re-run)."""
    inbox = _open(store_target)
    for i in range(30):
        inbox.put("command", f"k{i}", {"body": {"n": i}})
    inbox.beat("dead-worker")
    assert len(inbox.claim("dead-worker", limit=30)) == 30
    inbox.mark_dead("dead-worker")
    takers = [_open(store_target) for _ in range(4)]
    barrier = threading.Barrier(4)

    def take(i: int) -> list[int]:
        barrier.wait()
        return [item.id for item in takers[i].take_orphans()]

    with ThreadPoolExecutor(4) as pool:
        moved = [item_id for got in pool.map(take, range(4)) for item_id in got]
    assert len(moved) == 30 and len(set(moved)) == 30
    assert inbox.states() == {"interrupted": 30}


def test_a_silent_worker_is_taken_for_dead_only_after_the_stale_time(store_target) -> None:
    """A worker of another host that stopped beating (SIGKILLed with its host): its claims are taken
    over only once it has been silent for ``stale_after``; a worker that beats keeps its own."""
    inbox = _open(store_target)
    inbox.put("command", "k-silent", {"body": {}})
    inbox.put("command", "k-alive", {"body": {}})
    inbox.beat("silent")
    inbox.beat("alive")
    inbox.claim("silent", limit=1)
    inbox.claim("alive", limit=1)
    assert inbox.take_orphans(stale_after=30) == []

    def taken() -> list[str | None]:
        inbox.beat("alive")
        return [item.key for item in inbox.take_orphans(stale_after=0.5)]

    assert eventually(taken, 10, "the silent worker's claim taken over") == ["k-silent"]
    assert inbox.states() == {"claimed": 1, "interrupted": 1}


def test_on_postgresql_ids_are_committed_in_the_order_they_are_drawn(pg_url) -> None:
    """A worker reads what is queued after the highest id it read: a put of another bot that drew a
    smaller id and committed later would never be read. So a put waits for another's open put
    transaction (its advisory lock) and draws its id after that one committed."""
    inbox = _open(pg_url)
    inbox.put("command", "k-first", {"body": {}})
    other = psycopg.connect(pg_url, autocommit=True)
    try:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", [INBOX_LOCK_KEY])  # another bot's put, uncommitted
        other.execute(
            "INSERT INTO slack_inbox (key, kind, payload, state, created_at) VALUES ('k-other', 'command', %s, "
            "'queued', 0)",
            [b"{}"],
        )
        with ThreadPoolExecutor(1) as pool:
            mine = pool.submit(inbox.put, "command", "k-mine", {"body": {}})
            done, _ = wait([mine], timeout=0.5)
            assert not done  # it waits for the other's commit (the lock is held: not a matter of time)
            other.execute("COMMIT")
            mine_id = mine.result(timeout=10)
    finally:
        other.close()
    seen = [item.key for item in inbox.queued_after(0, 10)]
    assert seen == ["k-first", "k-other", "k-mine"] and mine_id is not None
