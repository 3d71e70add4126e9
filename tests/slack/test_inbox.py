"""The inbox between the ack and the work (bot/slack/inbox.py), on a real SQLite file.

Puts from many threads at once are committed in groups: each gets its own row, a repeated key gets
none (the durable de-duplication of Slack's retries), and a claim is a compare-and-set.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

from bot.slack.inbox import Inbox, inbox_path
from bot.slack.state import slack_migrations
from bot.store import Store


def test_concurrent_puts_each_commit_once_and_a_repeated_key_gets_no_row(tmp_path) -> None:
    inbox = Inbox(Store(tmp_path / "inbox.db", migrations=[slack_migrations]))
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
    # A fresh Inbox over the same file (another process, a restart) sees the same keys.
    assert (
        Inbox(Store(tmp_path / "inbox.db", migrations=[slack_migrations])).put(
            "command", "command:T1:trig-3", {"body": {}}
        )
        is None
    )


def test_a_claim_is_a_compare_and_set_between_workers(tmp_path) -> None:
    db = tmp_path / "inbox.db"
    inbox = Inbox(Store(db, migrations=[slack_migrations]))
    for i in range(50):
        inbox.put("command", f"k{i}", {"body": {"n": i}})
    others = [Inbox(Store(db, migrations=[slack_migrations])) for _ in range(4)]
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


def test_a_row_that_is_not_a_delivery_is_marked_never_raised_also_as_an_orphan(tmp_path) -> None:
    """A claim (and the take-over of a dead worker's claims) reads every row it moved: one that is not
    UTF-8 JSON of an object comes out marked with its damage, the others as they were."""
    db = tmp_path / "inbox.db"
    inbox = Inbox(Store(db, migrations=[slack_migrations]))
    inbox.put("command", "k-good-1", {"body": {"text": "help"}})
    with sqlite3.connect(inbox_path(db)) as conn:
        for key, raw in [
            ("k-utf8", b'{"body": {"user_id": "U1", "text": "\xff"}}'),
            ("k-json", b"{"),
            ("k-list", b"[1, 2]"),
            ("k-deep", b"[" * 100_000),
        ]:
            conn.execute(
                "INSERT INTO slack_inbox (key, kind, payload, state, created_at) "
                "VALUES (?, 'command', CAST(? AS TEXT), 'queued', 0)",
                [key, raw],
            )
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
