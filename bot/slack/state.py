"""What the Slack front end remembers, in the step store's SQLite file (so a restart forgets nothing).

- ``slack_threads``: the thread of each session's case (the case row also gets ``set_thread``).
- ``slack_refs``: where a message that is updated in place lives (an approval request, by its id).
- ``slack_events``: Events API ids already handled; Slack redelivers when an ack is late (TTL pruned).
- ``slack_home_users``: who opened the App Home tab, so it can be refreshed when cases change.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.store import Store, register_migrations

slack_migrations = Migrations("slack")

EVENT_TTL_SECONDS = 3600.0  # Slack stops redelivering an event well within an hour.
MAX_HOME_USERS = 200


@slack_migrations(name="0001_threads_refs_events_home")
def _m0001(db: Database) -> None:
    """The Slack front end's four small tables."""
    for sql in (
        """CREATE TABLE slack_threads (
            session_id TEXT PRIMARY KEY, channel TEXT NOT NULL, thread_ts TEXT NOT NULL,
            case_id INTEGER, created_at REAL NOT NULL)""",
        """CREATE TABLE slack_refs (
            kind TEXT NOT NULL, ref TEXT NOT NULL, channel TEXT NOT NULL, ts TEXT NOT NULL,
            PRIMARY KEY (kind, ref))""",
        "CREATE TABLE slack_events (event_id TEXT PRIMARY KEY, seen_at REAL NOT NULL)",
        "CREATE TABLE slack_home_users (user_id TEXT PRIMARY KEY, seen_at REAL NOT NULL)",
    ):
        db.execute(sql)


register_migrations(slack_migrations)


@dataclass(frozen=True)
class Location:
    """A place to post: a channel, optionally a thread in it."""

    channel: str
    thread_ts: str | None = None


class SlackState:
    """Small typed access to the tables above, one connection per call (thread-pool safe)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- threads --------------------------------------------------------------------------------

    def thread_of(self, session_id: str) -> Location | None:
        """The case's thread: the open case's own record first, then ours (until a new case opens)."""
        case = self.store.get_open_case(session_id)
        if case is not None and case.channel and case.thread_ts:
            return Location(case.channel, case.thread_ts)
        with self.store.read() as db:
            row = db.execute(
                "SELECT channel, thread_ts, case_id FROM slack_threads WHERE session_id = ?", [session_id]
            ).fetchone()
        if row is None:
            return None
        channel, thread_ts, case_id = row
        if case is not None and case_id is not None and case_id != case.id:
            return None  # a new case for this session: it gets a new thread
        if case is not None:
            self._adopt(session_id, case.id, channel, thread_ts)
        return Location(channel, thread_ts)

    def remember_thread(self, session_id: str, where: Location) -> None:
        assert where.thread_ts is not None
        case = self.store.get_open_case(session_id)
        with self.store.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO slack_threads (session_id, channel, thread_ts, case_id, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                [session_id, where.channel, where.thread_ts, case.id if case else None, time.time()],
            )
        if case is not None:
            self.store.set_thread(case.id, where.channel, where.thread_ts)

    def _adopt(self, session_id: str, case_id: int, channel: str, thread_ts: str) -> None:
        # The thread was started before the core opened the case: tie them together now.
        with self.store.write() as db:
            db.execute("UPDATE slack_threads SET case_id = ? WHERE session_id = ?", [case_id, session_id])
        self.store.set_thread(case_id, channel, thread_ts)

    # -- messages updated in place ----------------------------------------------------------------

    def ref_location(self, kind: str, ref: str) -> tuple[str, str] | None:
        with self.store.read() as db:
            row = db.execute(
                "SELECT channel, ts FROM slack_refs WHERE kind = ? AND ref = ?", [kind, ref]
            ).fetchone()
        return (row[0], row[1]) if row else None

    def remember_ref(self, kind: str, ref: str, channel: str, ts: str) -> None:
        with self.store.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO slack_refs (kind, ref, channel, ts) VALUES (?, ?, ?, ?)",
                [kind, ref, channel, ts],
            )

    # -- Events API redeliveries -----------------------------------------------------------------

    def first_sighting(self, event_id: str, now: float | None = None) -> bool:
        """True the first time an event id is seen; False for a redelivery (drop it)."""
        now = time.time() if now is None else now
        with self.store.write() as db:
            db.execute("DELETE FROM slack_events WHERE seen_at < ?", [now - EVENT_TTL_SECONDS])
            try:
                db.execute("INSERT INTO slack_events (event_id, seen_at) VALUES (?, ?)", [event_id, now])
            except sqlite3.IntegrityError:
                return False
        return True

    # -- App Home ----------------------------------------------------------------------------------

    def home_opened(self, user_id: str) -> None:
        with self.store.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO slack_home_users (user_id, seen_at) VALUES (?, ?)",
                [user_id, time.time()],
            )
            db.execute(
                "DELETE FROM slack_home_users WHERE user_id NOT IN "
                "(SELECT user_id FROM slack_home_users ORDER BY seen_at DESC LIMIT ?)",
                [MAX_HOME_USERS],
            )

    def home_users(self) -> list[str]:
        with self.store.read() as db:
            return [
                r[0]
                for r in db.execute("SELECT user_id FROM slack_home_users ORDER BY seen_at DESC").fetchall()
            ]
