"""The step store: its connections, transactions and schema, and its public calls.

Why it looks like this:
- A new connection per unit of work: Bolt runs listeners on a thread pool and ``sqlite3`` objects
  are bound to their thread; two bot processes may share one file.
- WAL + ``synchronous=FULL``: an audit trail must not lose its last commits on power loss.
- Every write starts with ``BEGIN IMMEDIATE``: in WAL a read-then-write transaction that starts
  with a plain ``BEGIN`` can fail with SQLITE_BUSY at once, whatever the busy timeout. Appending a
  step reads the chain's head and writes the next link, so it must hold the write lock throughout.
- The schema is the store's own migration set plus the sets it is given: whoever composes the app
  (bot/app/services.py, a front's builder, a test's fixture) names the areas whose tables it needs.
- One store file per installation (bot/installations/spec.py): every step records ``installation``,
  and the store's binding to its installation and control host is bot/store/binding.py.
- The engine is SQLite (the embedded default) or PostgreSQL (bot/store/_engine.py, bot/store/_pg.py):
  the three moments that differ (connect, begin a write, serialise the chain's append) are the
  engine's; on PostgreSQL an append holds a transaction-scoped advisory lock, so any number of bots
  append in one order.
- The tables' SQL lives in one module per table (``_cases``, ``_steps``, ``_requests``); this class
  decides where each transaction begins and ends.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.clock import Clock, SystemClock, isoformat
from bot.errors import StoreError
from bot.ids import DEFAULT_INSTALLATION, qualified_id
from bot.store import _cases, _requests, _steps, keymark, schema
from bot.store._engine import Engine, engine_for
from bot.store._rows import Case, IdempotencyRecord, Step

if TYPE_CHECKING:
    import psycopg  # the optional extra: only a PostgreSQL store's companions use it
from bot.store.chain import canonical_json, hash_matches, head_ref
from bot.store.leases import Leases

DEFAULT_BUSY_TIMEOUT = 10.0
BOT_ACTOR = "recover-bot"


class Store:
    """The step store on one SQLite file. Cheap to construct; holds no open connection."""

    def __init__(
        self,
        path: str | Path,
        clock: Clock | None = None,
        *,
        migrations: Iterable[Migrations] = (),
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        audit_key: bytes | None = None,
        adopting_key: bool = False,
        installation: str = DEFAULT_INSTALLATION,
    ) -> None:
        # A SQLite file path, or a postgresql:// URL (bot/store/_engine.py): the only place that knows.
        self.engine: Engine = engine_for(path, busy_timeout)
        # The SQLite file (None on PostgreSQL), and what messages call the store (a URL's password masked).
        self.path: Path | None = self.engine.path
        self.where = self.engine.where
        # Every step this store records carries it; the gate relies only on steps of it.
        self.installation = installation
        self.clock: Clock = clock or SystemClock()
        self.busy_timeout = busy_timeout
        # With a key every new step is keyed (chain version 2, bot/store/chain.py).
        self._audit_key = audit_key or None
        self._applied: dict[str, Migrations] = {}
        self._migrate_lock = threading.Lock()
        self.engine.prepare()
        self.migrate([schema.core, *migrations])
        self._check_key(adopting_key)

    @property
    def leases(self) -> Leases:
        """The store's leases with fencing tokens (bot/store/leases.py): the once-only jobs' claims."""
        return Leases(self)

    @property
    def keyed(self) -> bool:
        return self._audit_key is not None

    # -- schema ----------------------------------------------------------------------------------

    def migrate(self, sets: Iterable[Migrations]) -> None:
        """Apply these areas' migration sets (sets already applied here are skipped).

        Two different sets under one name would share one record of applied migrations: refused.
        """
        with self._migrate_lock:
            todo: dict[str, Migrations] = {}
            for m in sets:
                known = self._applied.get(m.name) or todo.get(m.name)
                if known is None:
                    todo[m.name] = m
                elif known is not m:
                    raise ValueError(f"two different migration sets are named {m.name!r}")
            if not todo:
                return
            with self._write() as db:
                self.engine.lock_chain(db)  # two bots migrating one fresh database: one after the other
                for m in todo.values():
                    m.apply(db)
            self._applied.update(todo)

    def applied(self, name: str) -> bool:
        """Was the area's migration set named ``name`` applied to this store (its tables exist)?"""
        return name in self._applied

    def local_file(self, what: str) -> Path:
        """The SQLite file a companion goes beside (``what``: the Slack inbox, a backup); refused in one
        line on PostgreSQL, where a companion lives in the server's schema (:meth:`server_connection`)."""
        if self.path is None:
            raise StoreError(
                f"{what} needs a SQLite RECOVER_DB today; the step store is on PostgreSQL ({self.where})",
                hint="Run this on a bot whose RECOVER_DB is a SQLite file path, or use the console.",
            )
        return self.path

    def server_connection(self, what: str) -> psycopg.Connection[tuple[Any, ...]]:
        """A psycopg connection of ``what``'s own (the Slack inbox) to the store's PostgreSQL server and
        schema, autocommit; refused in one line on SQLite, whose companions are files (:meth:`local_file`)."""
        open_connection = getattr(self.engine, "open_connection", None)
        if open_connection is None:
            raise StoreError(f"{what} needs a PostgreSQL RECOVER_DB here; the step store is the file {self.where}")
        conn: psycopg.Connection[tuple[Any, ...]] = open_connection()
        return conn

    def require(self, migrations: Migrations) -> None:
        """Refuse, in one clear line, an area's use of a store opened without that area's tables."""
        if self._applied.get(migrations.name) is not migrations:
            raise StoreError(
                f"the step store {self.where} was opened without the {migrations.name!r} migrations",
                hint="Pass the area's migration set to Store(..., migrations=...) where the app is composed.",
            )

    def _check_key(self, adopting: bool = False) -> None:
        """Refuse a keyed store without its key, or with another key: a process writing plain or
        wrongly keyed steps after keyed ones would make the chain fail ``audit verify``. With a key,
        keyed stays keyed (bot/store/keymark.py): the store's marker is checked, or written."""
        with self.read() as db:
            row = _steps.last_keyed(db)
        if row is None:
            if self._audit_key is not None and not adopting:
                self._check_marker()
            return
        if self._audit_key is None:
            raise StoreError(
                f"the step store {self.where} is keyed (chain version 2) but no audit key is configured",
                hint="Set RECOVER_AUDIT_KEY or RECOVER_AUDIT_KEY_FILE to the key it was written with.",
            )
        if not hash_matches(row, self._audit_key):
            raise StoreError(
                f"the audit key does not match the step store {self.where} (its last keyed step, "
                f"{row['seq']}, does not verify under it)",
                hint="Use the key the store was written with; `recover-bot audit verify` names what differs.",
            )
        self._check_marker()

    def _check_marker(self) -> None:
        """Keyed stays keyed: refuse a store stripped of its keyed steps; mark an unmarked keyed one."""
        why = self.keyed_problem()
        if why is not None:
            raise StoreError(why, hint=keymark.REFUSED_HINT)
        assert self._audit_key is not None
        with self.write() as db:
            if keymark.needs_marker(db):
                self._append(
                    db,
                    None,
                    None,
                    BOT_ACTOR,
                    keymark.MARKER,
                    keymark.marker_inputs(self._audit_key, "first keyed step"),
                    "keyed",
                )

    def keyed_problem(self) -> str | None:
        """Why this store may not be served with its key (keyed steps vanished or turned plain), or None.

        The gate asks it before every send; None for a store opened without a key."""
        if self._audit_key is None:
            return None
        with self.read() as db:
            return keymark.problem(db, self._audit_key)

    def adopt_key(self, actor: str, vouched: Mapping[str, Any] | None = None) -> Step:
        """``recover-bot audit adopt-key``: a store written before the key gets its marker, recorded as a
        keyed step by ``actor``, with what the operator vouched for (``vouched``: the published head it
        was checked against and each step after it they accepted). Refused when the store is marked
        already or has no key."""
        if self._audit_key is None:
            raise StoreError("no audit key is configured: nothing to adopt", hint="Set RECOVER_AUDIT_KEY_FILE.")
        with self.write() as db:
            marker = keymark.marker_row(db)
            if marker is not None:
                raise StoreError(f"the step store {self.where} already has its keyed marker (step {marker['seq']})")
            inputs = {**keymark.marker_inputs(self._audit_key, "adopted"), **(vouched or {})}
            return self._append(db, None, None, actor, keymark.MARKER, inputs, "keyed")

    # -- connections -----------------------------------------------------------------------------

    def _connect(self) -> Database:
        return self.engine.connect()

    @contextmanager
    def read(self) -> Iterator[Database]:
        """A fresh connection for reads (autocommit; wrap several reads in ``BEGIN`` for a snapshot)."""
        db = self._connect()
        try:
            yield db
        finally:
            db.close()

    @contextmanager
    def write(self) -> Iterator[Database]:
        """A fresh connection inside ``BEGIN IMMEDIATE``: committed on exit, rolled back on error."""
        with self._write() as db:
            yield db

    @contextmanager
    def _write(self) -> Iterator[Database]:
        db = self._connect()
        try:
            self.engine.begin_write(db)
            try:
                yield db
            except BaseException:
                if db.conn.in_transaction:
                    db.conn.execute("ROLLBACK")
                raise
            else:
                db.conn.execute("COMMIT")
        finally:
            db.close()

    def _now(self) -> str:
        text = isoformat(self.clock.now())
        assert text is not None
        return text

    @staticmethod
    def _joined(db: Database, call: str) -> None:
        if not db.conn.in_transaction:
            raise StoreError(f"{call}(db=...) needs a connection from Store.write()")

    # -- cases -----------------------------------------------------------------------------------

    def open_case(self, session_id: str, actor: str, channel: str | None = None, *, db: Database | None = None) -> Case:
        """Return the session's open case, or open one."""
        if db is None:
            with self.write() as wdb:
                return _cases.open_case(wdb, session_id, actor, channel, self._now())
        return _cases.open_case(db, session_id, actor, channel, self._now())

    def get_open_case(self, session_id: str) -> Case | None:
        with self.read() as db:
            return _cases.find_open(db, session_id)

    def list_open_cases(self) -> list[Case]:
        with self.read() as db:
            return _cases.listed_open(db)

    def close_case(self, case_id: int, actor: str, reason: str, *, evidence: Mapping[str, Any] | None = None) -> Case:
        """Close a case (verification found the session needs no operator, or it is closed).

        The closing is itself a step, so the audit trail shows who closed the case and why;
        ``evidence``: what the closing relied on (verification's observed facts, R5.1), in the step.
        Closing an already closed case returns it unchanged.
        """
        inputs: dict[str, Any] = {"reason": reason}
        if evidence:
            inputs["evidence"] = dict(evidence)
        with self.write() as db:
            case = _cases.get(db, case_id)
            if not case.is_open:
                return case
            self._append(db, case.session_id, case.id, actor, "case_closed", inputs, "closed")
            return _cases.close(db, case_id, actor, reason, self._now())

    def set_owner(self, case_id: int, owner: str | None) -> Case:
        with self.write() as db:
            return _cases.update(db, case_id, {"owner": owner})

    def set_thread(self, case_id: int, channel: str | None, thread_ts: str | None) -> Case:
        with self.write() as db:
            return _cases.update(db, case_id, {"channel": channel, "thread_ts": thread_ts})

    # -- steps -----------------------------------------------------------------------------------

    def record_step(
        self,
        session_id: str | None,
        actor: str,
        step: str,
        inputs: Mapping[str, Any] | None,
        outcome: str,
        *,
        detail: Mapping[str, Any] | None = None,
        http_status: int | None = None,
        idempotency_key: str | None = None,
        receipt_id: str | None = None,
        db: Database | None = None,
        opens_case: bool = True,
    ) -> Step:
        """Append a step (opening the session's case if none is open).

        With ``db=`` the step joins the caller's write transaction ("state change + audit row" in
        one commit). ``session_id=None`` records an installation-wide step outside any case. With
        ``opens_case=False`` (a refusal: nothing happened to the session) the step joins the session's
        open case if there is one and never opens or re-opens one.
        """
        if db is None:
            with self.write() as wdb:
                return self.record_step(
                    session_id,
                    actor,
                    step,
                    inputs,
                    outcome,
                    detail=detail,
                    http_status=http_status,
                    idempotency_key=idempotency_key,
                    receipt_id=receipt_id,
                    db=wdb,
                    opens_case=opens_case,
                )
        self._joined(db, "record_step")
        case_id: int | None = None
        if session_id is not None and opens_case:
            case_id = self.open_case(session_id, actor, db=db).id
        elif session_id is not None:
            found = _cases.find_open(db, session_id)
            case_id = found.id if found is not None else None
        return self._append(
            db,
            session_id,
            case_id,
            actor,
            step,
            inputs,
            outcome,
            detail=detail,
            http_status=http_status,
            idempotency_key=idempotency_key,
            receipt_id=receipt_id,
        )

    def _append(
        self,
        db: Database,
        session_id: str | None,
        case_id: int | None,
        actor: str,
        step: str,
        inputs: Mapping[str, Any] | None,
        outcome: str,
        *,
        detail: Mapping[str, Any] | None = None,
        http_status: int | None = None,
        idempotency_key: str | None = None,
        receipt_id: str | None = None,
    ) -> Step:
        self.engine.lock_chain(db)
        return _steps.append(
            db,
            session_id=session_id,
            case_id=case_id,
            actor=actor,
            step=step,
            inputs=inputs,
            outcome=outcome,
            detail=detail,
            http_status=http_status,
            idempotency_key=idempotency_key,
            receipt_id=receipt_id,
            at=self._now(),
            key=self._audit_key,
            installation=self.installation,
        )

    def steps(self, session_id: str | None = None, case_id: int | None = None) -> list[Step]:
        """Steps in log order, optionally of one session or one case."""
        with self.read() as db:
            return _steps.listed(db, session_id, case_id)

    def steps_named(self, *names: str, after_seq: int = 0, since: str | None = None) -> list[Step]:
        """Steps of these names across every session, in log order, after step ``after_seq`` and (with
        ``since``) at or after that time; read through the index on (step, seq)."""
        with self.read() as db:
            return _steps.named(db, names, after_seq, since)

    def step_at(self, seq: int) -> Step | None:
        with self.read() as db:
            return _steps.at_seq(db, seq)

    def head(self) -> str:
        """The hash of the last step (the genesis value for an empty log): publish it outside."""
        with self.read() as db:
            return _steps.last_link(db)[1]

    def head_ref(self) -> str:
        """The head to publish outside the database, ``SEQ:HASH`` (``audit verify --head`` takes it)."""
        with self.read() as db:
            return head_ref(*_steps.last_link(db))

    def first_keyed_seq(self) -> int | None:
        """The first keyed step (chain version 2): steps after it must all be keyed."""
        with self.read() as db:
            return _steps.first_keyed_seq(db)

    def verify_step(self, step: Step) -> bool | None:
        """Does a step still match its own hash (keyed with this store's key)? None: keyed, no key."""
        row = {name: getattr(step, name) for name in Step.__dataclass_fields__}
        row["inputs"] = canonical_json(step.inputs)
        row["detail"] = canonical_json(step.detail) if step.detail is not None else None
        return hash_matches(row, self._audit_key)

    # -- idempotency records ---------------------------------------------------------------------

    def begin_request(
        self,
        method: str,
        path: str,
        body: str | Mapping[str, Any],
        purpose: str,
        key: str | None = None,
        *,
        session_id: str | None = None,
        db: Database | None = None,
    ) -> IdempotencyRecord:
        """Commit a new logical request (key + exact body text) before anything is sent.

        A mapping body is serialised once here; the stored text is what every attempt sends. With
        ``db=`` the record joins the caller's write transaction (a batch stores a member's state and
        its record in one commit).
        """
        text = body if isinstance(body, str) else json.dumps(dict(body), separators=(",", ":"))
        # A named installation's keys carry its name, as its ids do (the default's stay plain uuid4s).
        key = key or qualified_id(str(uuid.uuid4()), self.installation)
        if db is not None:
            self._joined(db, "begin_request")
            return _requests.insert(db, key, method, path, text, purpose, session_id, self._now())
        with self.write() as wdb:
            return _requests.insert(wdb, key, method, path, text, purpose, session_id, self._now())

    def note_attempt(self, key: str) -> int:
        """Count one send of a stored request; returns the attempt number."""
        with self.write() as db:
            return _requests.note_attempt(db, key)

    def finish_request(
        self, key: str, http_status: int, response: object, *, fence: Callable[[Database], None] | None = None
    ) -> IdempotencyRecord:
        """Record the definite answer (2xx/4xx) that ends a logical request; ``fence`` (the sender's
        lease) runs first in the same transaction and raises to record nothing (a deposed sender)."""
        with self.write() as db:
            if fence is not None:
                fence(db)
            return _requests.finish(db, key, http_status, response, self._now())

    def withdraw_request(self, key: str, actor: str, why: str) -> bool:
        """End a stored request that never took effect (never sent, or every answer said nothing was
        kept), so no restart re-sends it. False when it already had an answer (nothing changed)."""
        with self.write() as db:
            return _requests.withdraw(db, key, actor, why, self._now())

    def get_request(self, key: str) -> IdempotencyRecord | None:
        with self.read() as db:
            return _requests.get(db, key)

    def unfinished_requests(self) -> list[IdempotencyRecord]:
        """Requests whose answer was never recorded, oldest first (replayed at start-up)."""
        with self.read() as db:
            return _requests.listed(db, pending_only=True)

    def list_requests(self, session_id: str | None = None) -> list[IdempotencyRecord]:
        with self.read() as db:
            return _requests.listed(db, session_id)
