"""The inbox between the ack and the work (bot/slack/inbox.py), on a real SQLite file.

Puts from many threads at once are committed in groups: each gets its own row, a repeated key gets
none (the durable de-duplication of Slack's retries), and a claim is a compare-and-set.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from bot.slack.inbox import Inbox
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
    assert Inbox(Store(tmp_path / "inbox.db", migrations=[slack_migrations])).put("command", "command:T1:trig-3", {"body": {}}) is None


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
