"""What the Slack front end remembers, in the step store's SQLite file (so a restart forgets nothing).

- ``slack_threads``: the thread of each session's case (the case row also gets ``set_thread``).
- ``slack_refs``: where a message that is updated in place lives (an approval request, by its id),
  and which messages said once were said (a request's first showing, its result: claimed before the post).

Both are keyed by :class:`bot.ids.ScopedId` (its ``key``: ``ses_1`` for the default
installation, ``ses_1@eu-1`` for eu-1), the one key the delivery that writes them and the ladder that
reads them share: a named installation's lookup never reaches the default's rows or another's.
- ``slack_events``, ``slack_deliveries``: dropped. Deliveries are de-duplicated by Slack's own key in
  the inbox (:mod:`bot.slack.inbox`), committed before the ack; a second table keyed the same way
  cost a connection and a commit per delivery and refused nothing the inbox had not.
- ``slack_home_users``: who opened the App Home tab, so it can be refreshed when cases change.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.ids import ScopedId
from bot.store import Store

slack_migrations = Migrations("slack")

EVENT_TTL_SECONDS = 3600.0  # Slack stops redelivering an event well within an hour (replays: 5 min).
RECENT_MAX = 50_000  # in-memory keys; at Slack's rates an hour's worth is far fewer
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


@slack_migrations(name="0002_deliveries")
def _m0002(db: Database) -> None:
    """Deliveries by Slack's own key, pruned by age (indexed, so pruning never scans the table)."""
    db.execute("CREATE TABLE slack_deliveries (key TEXT PRIMARY KEY, seen_at REAL NOT NULL)")
    db.execute("CREATE INDEX slack_deliveries_seen ON slack_deliveries (seen_at)")


@slack_migrations(name="0003_drop_delivery_tables")
def _m0003(db: Database) -> None:
    """The inbox's unique key de-duplicates every delivery before its ack: these two are unused."""
    db.execute("DROP TABLE IF EXISTS slack_deliveries")
    db.execute("DROP TABLE IF EXISTS slack_events")


class RecentDeliveries:
    """In-memory first check on the ack path: no I/O, so a replay costs nothing and waits for nothing.

    Only what is committed is remembered (:meth:`remember` after the inbox put): a delivery whose
    commit failed was answered 500, and Slack's retry of it must be queued, not dropped as seen.
    """

    def __init__(self, ttl: float = EVENT_TTL_SECONDS, max_keys: int = RECENT_MAX) -> None:
        self.ttl = ttl
        self.max_keys = max_keys
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def _prune(self, now: float) -> None:
        while self._seen and next(iter(self._seen.values())) < now - self.ttl:
            self._seen.popitem(last=False)

    def seen(self, key: str, now: float | None = None) -> bool:
        """True when ``key`` was remembered within the TTL (an empty key never is)."""
        if not key:
            return False
        now = time.monotonic() if now is None else now
        with self._lock:
            self._prune(now)
            return key in self._seen

    def remember(self, key: str, now: float | None = None) -> None:
        """``key`` is committed (or needs no commit): a repeat of it is refused from now on."""
        if not key:
            return
        now = time.monotonic() if now is None else now
        with self._lock:
            self._prune(now)
            if key not in self._seen and len(self._seen) >= self.max_keys:
                self._seen.popitem(last=False)
            self._seen[key] = now

    def first(self, key: str, now: float | None = None) -> bool:
        """True the first time ``key`` is seen within the TTL, remembering it at once (for a delivery
        that is acted on without a commit; an empty key is always new)."""
        if self.seen(key, now):
            return False
        self.remember(key, now)
        return True


@dataclass(frozen=True)
class Location:
    """A place to post: a channel, optionally a thread in it."""

    channel: str
    thread_ts: str | None = None


class SlackState:
    """Small typed access to the tables above, one connection per call (thread-pool safe)."""

    def __init__(self, store: Store) -> None:
        store.require(slack_migrations)
        self.store = store

    # -- threads --------------------------------------------------------------------------------

    def thread_of(self, session: ScopedId) -> Location | None:
        """The case's thread: the open case's own record first, then ours (until a new case opens).

        Only the default installation's cases live in this store (a named installation's are in its own
        file, bot/ids.py ``store_path``), so only its lookup consults them."""
        case = self.store.get_open_case(session.id) if session.is_default else None
        if case is not None and case.channel and case.thread_ts:
            return Location(case.channel, case.thread_ts)
        with self.store.read() as db:
            row = db.execute(
                "SELECT channel, thread_ts, case_id FROM slack_threads WHERE session_id = ?", [session.key]
            ).fetchone()
        if row is None:
            return None
        channel, thread_ts, case_id = row
        if case is not None and case_id is not None and case_id != case.id:
            return None  # a new case for this session: it gets a new thread
        if case is not None:
            self._adopt(session, case.id, channel, thread_ts)
        return Location(channel, thread_ts)

    def remember_thread(self, session: ScopedId, where: Location) -> None:
        assert where.thread_ts is not None
        case = self.store.get_open_case(session.id) if session.is_default else None
        with self.store.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO slack_threads (session_id, channel, thread_ts, case_id, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                [session.key, where.channel, where.thread_ts, case.id if case else None, time.time()],
            )
        if case is not None:
            self.store.set_thread(case.id, where.channel, where.thread_ts)

    def _adopt(self, session: ScopedId, case_id: int, channel: str, thread_ts: str) -> None:
        # The thread was started before the core opened the case: tie them together now.
        with self.store.write() as db:
            db.execute("UPDATE slack_threads SET case_id = ? WHERE session_id = ?", [case_id, session.key])
        self.store.set_thread(case_id, channel, thread_ts)

    # -- messages updated in place ----------------------------------------------------------------

    def ref_location(self, kind: str, ref: ScopedId) -> tuple[str, str] | None:
        """Where the message lives; None before its post is recorded (a claim's empty ``ts``)."""
        with self.store.read() as db:
            row = db.execute(
                "SELECT channel, ts FROM slack_refs WHERE kind = ? AND ref = ? AND ts != ''", [kind, ref.key]
            ).fetchone()
        return (row[0], row[1]) if row else None

    def claim_ref(self, kind: str, ref: ScopedId, channel: str) -> bool:
        """Take the one saying of a message said once (``kind`` and ``ref``: a request's first showing,
        its result) before it is posted: True for the first claimer on this store, whichever bot or
        process; its ``ts`` stays empty until :meth:`remember_ref` records the post. One ``INSERT OR IGNORE``, so two
        claimers never both win; a claimer that dies between its claim and its post leaves it unsaid
        (the window of one Web API call), never said twice."""
        with self.store.write() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO slack_refs (kind, ref, channel, ts) VALUES (?, ?, ?, '')",
                [kind, ref.key, channel],
            )
            return bool(cursor.rowcount)

    def release_ref(self, kind: str, ref: ScopedId) -> None:
        """Give back a claim whose post failed (Slack refused it): a later saying may try again."""
        with self.store.write() as db:
            db.execute("DELETE FROM slack_refs WHERE kind = ? AND ref = ? AND ts = ''", [kind, ref.key])

    def remember_ref(self, kind: str, ref: ScopedId, channel: str, ts: str) -> None:
        with self.store.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO slack_refs (kind, ref, channel, ts) VALUES (?, ?, ?, ?)",
                [kind, ref.key, channel, ts],
            )

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
            return [r[0] for r in db.execute("SELECT user_id FROM slack_home_users ORDER BY seen_at DESC").fetchall()]
