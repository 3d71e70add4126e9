"""The SQLite step store: cases, the append-only hash-chained step log, idempotency records.

Why it looks like this:
- A new connection per unit of work: Bolt runs listeners on a thread pool and ``sqlite3`` objects
  are bound to their thread; two bot processes may share one file.
- WAL + ``synchronous=FULL``: an audit trail must not lose its last commits on power loss.
- Every write starts with ``BEGIN IMMEDIATE``: in WAL a read-then-write transaction that starts
  with a plain ``BEGIN`` can fail with SQLITE_BUSY at once, whatever the busy timeout. Appending a
  step reads the chain's head and writes the next link, so it must hold the write lock throughout.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from bot.clock import Clock, SystemClock, isoformat
from bot.errors import StoreError
from bot.store import schema
from bot.store.chain import KEYED_VERSION, PLAIN_VERSION, canonical_json, hash_matches, head_ref, step_hash

DEFAULT_BUSY_TIMEOUT = 10.0


@dataclass(frozen=True)
class Case:
    """One recovery case: opened by the first step on a session, closed when verification says so."""

    id: int
    session_id: str
    opened_at: str
    opened_by: str
    owner: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    closed_at: str | None = None
    closed_by: str | None = None
    close_reason: str | None = None

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True)
class Step:
    """One entry of the append-only step log."""

    seq: int
    case_id: int | None
    session_id: str | None
    actor: str
    at: str
    step: str
    inputs: dict[str, Any]
    outcome: str
    detail: dict[str, Any] | None
    http_status: int | None
    idempotency_key: str | None
    receipt_id: str | None
    prev_hash: str
    hash: str
    v: int = PLAIN_VERSION


@dataclass(frozen=True)
class IdempotencyRecord:
    """A POST to the control host, committed before its first send (the Idempotency-Key rule).

    ``body`` is the exact JSON text sent on every attempt; ``state`` is ``pending`` until a
    definite answer (2xx/4xx) is recorded.
    """

    key: str
    method: str
    path: str
    body: str
    purpose: str
    session_id: str | None
    created_at: str
    state: str = "pending"
    http_status: int | None = None
    response: Any = None
    answered_at: str | None = None
    attempts: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def pending(self) -> bool:
        return self.state == "pending"


def _q(db: Database, sql: str, params: Any = ()) -> sqlite3.Cursor:
    """Execute on the raw connection with dict-like rows (sqlite-utils itself expects plain tuples)."""
    cur = db.conn.cursor()
    cur.row_factory = sqlite3.Row
    return cur.execute(sql, params)


def _loads(text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _case(row: Mapping[str, Any]) -> Case:
    return Case(**{k: row[k] for k in Case.__dataclass_fields__})


def _step(row: Mapping[str, Any]) -> Step:
    values = dict(row)
    values.setdefault("v", PLAIN_VERSION)
    values["inputs"] = _loads(values["inputs"]) or {}
    values["detail"] = _loads(values["detail"])
    return Step(**{k: values[k] for k in Step.__dataclass_fields__})


def _record(row: Mapping[str, Any]) -> IdempotencyRecord:
    values = {k: row[k] for k in IdempotencyRecord.__dataclass_fields__ if k != "raw"}
    values["response"] = _loads(values["response"])
    return IdempotencyRecord(**values, raw=dict(row))


class Store:
    """The step store on one SQLite file. Cheap to construct; holds no open connection."""

    def __init__(
        self,
        path: str | Path,
        clock: Clock | None = None,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        audit_key: bytes | None = None,
    ) -> None:
        self.path = Path(path)
        self.clock: Clock = clock or SystemClock()
        self.busy_timeout = busy_timeout
        # With a key every new step is keyed (chain version 2, bot/store/chain.py).
        self._audit_key = audit_key or None
        self._migrated_sets: set[str] = set()
        self._migrate_lock = threading.Lock()
        self._enable_wal()
        self.migrate()
        self._check_key()

    @property
    def keyed(self) -> bool:
        return self._audit_key is not None

    def _check_key(self) -> None:
        """Refuse a keyed store without its key, or with another key: a process writing plain or
        wrongly keyed steps after keyed ones would make the chain fail ``audit verify``."""
        with self.read() as db:
            row = _q(
                db, "SELECT * FROM steps WHERE v = ? ORDER BY seq DESC LIMIT 1", [KEYED_VERSION]
            ).fetchone()
        if row is None:
            return
        if self._audit_key is None:
            raise StoreError(
                f"the step store {self.path} is keyed (chain version 2) but no audit key is configured",
                hint="Set RECOVER_AUDIT_KEY or RECOVER_AUDIT_KEY_FILE to the key it was written with.",
            )
        if not hash_matches(dict(row), self._audit_key):
            raise StoreError(
                f"the audit key does not match the step store {self.path} (its last keyed step, "
                f"{row['seq']}, does not verify under it)",
                hint="Use the key the store was written with; `recover-bot audit verify` names what differs.",
            )

    def verify_step(self, step: Step) -> bool | None:
        """Does a step still match its own hash (keyed with this store's key)? None: keyed, no key."""
        row = {name: getattr(step, name) for name in Step.__dataclass_fields__}
        row["inputs"] = canonical_json(step.inputs)
        row["detail"] = canonical_json(step.detail) if step.detail is not None else None
        return hash_matches(row, self._audit_key)

    def first_keyed_seq(self) -> int | None:
        """The first keyed step (chain version 2): steps after it must all be keyed."""
        with self.read() as db:
            row = _q(db, "SELECT MIN(seq) AS seq FROM steps WHERE v = ?", [KEYED_VERSION]).fetchone()
        return row["seq"] if row and row["seq"] is not None else None

    def step_at(self, seq: int) -> Step | None:
        with self.read() as db:
            row = _q(db, "SELECT * FROM steps WHERE seq = ?", [seq]).fetchone()
        return _step(row) if row else None

    # -- connections ---------------------------------------------------------------------------

    def _connect(self) -> Database:
        try:
            # isolation_level=None: no implicit BEGINs; every transaction is explicit.
            conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the step store {self.path}: {exc}") from exc
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        return Database(conn, execute_plugins=False)

    def _enable_wal(self) -> None:
        # journal_mode is persistent in the file; switching needs a moment without other writers.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            db = self._connect()
            try:
                mode = _q(db, "PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"the step store {self.path} cannot use WAL (journal_mode={mode})")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise StoreError(f"cannot prepare the step store {self.path}: {exc}") from exc
                time.sleep(0.05)
            finally:
                db.close()

    def migrate(self) -> None:
        """Apply every registered migration set (see :mod:`bot.store.schema`)."""
        with self._migrate_lock:
            sets = list(schema.MIGRATION_SETS)
            if all(m.name in self._migrated_sets for m in sets):
                return
            with self._write(migrating=True) as db:
                for m in sets:
                    m.apply(db)
            self._migrated_sets.update(m.name for m in sets)

    def _ensure_migrated(self) -> None:
        # An area imported after the store opened registers its set late: apply it now.
        if len(self._migrated_sets) < len(schema.MIGRATION_SETS):
            self.migrate()

    @contextmanager
    def read(self) -> Iterator[Database]:
        """A fresh connection for reads (autocommit; wrap several reads in ``BEGIN`` for a snapshot)."""
        self._ensure_migrated()
        db = self._connect()
        try:
            yield db
        finally:
            db.close()

    @contextmanager
    def write(self) -> Iterator[Database]:
        """A fresh connection inside ``BEGIN IMMEDIATE``: committed on exit, rolled back on error."""
        self._ensure_migrated()
        with self._write() as db:
            yield db

    @contextmanager
    def _write(self, *, migrating: bool = False) -> Iterator[Database]:
        db = self._connect()
        try:
            try:
                _q(db, "BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(
                    f"the step store {self.path} stayed locked for {self.busy_timeout:.0f} s: {exc}",
                    hint="Another process holds a long write; try again.",
                ) from exc
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

    # -- cases ---------------------------------------------------------------------------------

    def open_case(
        self, session_id: str, actor: str, channel: str | None = None, *, db: Database | None = None
    ) -> Case:
        """Return the session's open case, or open one."""
        if db is None:
            with self.write() as wdb:
                return self.open_case(session_id, actor, channel, db=wdb)
        row = _q(
            db, "SELECT * FROM cases WHERE session_id = ? AND closed_at IS NULL", [session_id]
        ).fetchone()
        if row is not None:
            return _case(row)
        cur = _q(
            db,
            "INSERT INTO cases (session_id, opened_at, opened_by, channel) VALUES (?, ?, ?, ?)",
            [session_id, self._now(), actor, channel],
        )
        row = _q(db, "SELECT * FROM cases WHERE id = ?", [cur.lastrowid]).fetchone()
        return _case(row)

    def get_case(self, case_id: int) -> Case | None:
        with self.read() as db:
            row = _q(db, "SELECT * FROM cases WHERE id = ?", [case_id]).fetchone()
        return _case(row) if row else None

    def get_open_case(self, session_id: str) -> Case | None:
        with self.read() as db:
            row = _q(
                db, "SELECT * FROM cases WHERE session_id = ? AND closed_at IS NULL", [session_id]
            ).fetchone()
        return _case(row) if row else None

    def list_open_cases(self) -> list[Case]:
        with self.read() as db:
            rows = _q(db, "SELECT * FROM cases WHERE closed_at IS NULL ORDER BY id").fetchall()
        return [_case(r) for r in rows]

    def list_cases(self, session_id: str | None = None) -> list[Case]:
        with self.read() as db:
            if session_id is None:
                rows = _q(db, "SELECT * FROM cases ORDER BY id").fetchall()
            else:
                rows = _q(db, "SELECT * FROM cases WHERE session_id = ? ORDER BY id", [session_id]).fetchall()
        return [_case(r) for r in rows]

    def close_case(self, case_id: int, actor: str, reason: str) -> Case:
        """Close a case (verification found the session needs no operator, or it is closed).

        The closing is itself a step, so the audit trail shows who closed the case and why.
        Closing an already closed case returns it unchanged.
        """
        with self.write() as db:
            row = _q(db, "SELECT * FROM cases WHERE id = ?", [case_id]).fetchone()
            if row is None:
                raise StoreError(f"no case {case_id} in the step store")
            case = _case(row)
            if not case.is_open:
                return case
            self._append(db, case.session_id, case.id, actor, "case_closed", {"reason": reason}, "closed")
            _q(
                db,
                "UPDATE cases SET closed_at = ?, closed_by = ?, close_reason = ? WHERE id = ?",
                [self._now(), actor, reason, case_id],
            )
            return _case(_q(db, "SELECT * FROM cases WHERE id = ?", [case_id]).fetchone())

    def set_owner(self, case_id: int, owner: str | None) -> Case:
        return self._set_case(case_id, owner=owner)

    def set_thread(self, case_id: int, channel: str | None, thread_ts: str | None) -> Case:
        return self._set_case(case_id, channel=channel, thread_ts=thread_ts)

    def _set_case(self, case_id: int, **values: Any) -> Case:
        with self.write() as db:
            sets = ", ".join(f"{name} = ?" for name in values)
            cur = _q(db, f"UPDATE cases SET {sets} WHERE id = ?", [*values.values(), case_id])  # noqa: S608
            if cur.rowcount == 0:
                raise StoreError(f"no case {case_id} in the step store")
            return _case(_q(db, "SELECT * FROM cases WHERE id = ?", [case_id]).fetchone())

    # -- steps ---------------------------------------------------------------------------------

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
    ) -> Step:
        """Append a step (opening the session's case if none is open).

        With ``db=`` the step joins the caller's write transaction ("state change + audit row" in
        one commit). ``session_id=None`` records an installation-wide step outside any case.
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
                )
        if not db.conn.in_transaction:
            raise StoreError("record_step(db=...) needs a connection from Store.write()")
        case_id = self.open_case(session_id, actor, db=db).id if session_id is not None else None
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
        last = _q(db, "SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
        seq = (last["seq"] + 1) if last else 1
        prev_hash = last["hash"] if last else schema.GENESIS_HASH
        row: dict[str, Any] = {
            "seq": seq,
            "case_id": case_id,
            "session_id": session_id,
            "actor": actor,
            "at": self._now(),
            "step": step,
            "inputs": canonical_json(dict(inputs or {})),
            "outcome": outcome,
            "detail": canonical_json(dict(detail)) if detail is not None else None,
            "http_status": http_status,
            "idempotency_key": idempotency_key,
            "receipt_id": receipt_id,
            "prev_hash": prev_hash,
            "v": KEYED_VERSION if self._audit_key else PLAIN_VERSION,
        }
        row["hash"] = step_hash(row, prev_hash, self._audit_key)
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        _q(db, f"INSERT INTO steps ({columns}) VALUES ({marks})", list(row.values()))  # noqa: S608
        return _step(row)

    def steps(self, session_id: str | None = None, case_id: int | None = None) -> list[Step]:
        """Steps in log order, optionally of one session or one case."""
        clauses: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if case_id is not None:
            clauses.append("case_id = ?")
            params.append(case_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.read() as db:
            rows = _q(db, f"SELECT * FROM steps {where} ORDER BY seq", params).fetchall()  # noqa: S608
        return [_step(r) for r in rows]

    def head(self) -> str:
        """The hash of the last step (the genesis value for an empty log): publish it outside."""
        with self.read() as db:
            row = _q(db, "SELECT hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
        return row["hash"] if row else schema.GENESIS_HASH

    def head_ref(self) -> str:
        """The head to publish outside the database, ``SEQ:HASH`` (``audit verify --head`` takes it)."""
        with self.read() as db:
            row = _q(db, "SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
        return head_ref(row["seq"], row["hash"]) if row else head_ref(0, schema.GENESIS_HASH)

    # -- idempotency records -------------------------------------------------------------------

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
        key = key or str(uuid.uuid4())
        if db is not None:
            if not db.conn.in_transaction:
                raise StoreError("begin_request(db=...) needs a connection from Store.write()")
            return self._insert_request(db, key, method, path, text, purpose, session_id)
        with self.write() as wdb:
            return self._insert_request(wdb, key, method, path, text, purpose, session_id)

    def _insert_request(
        self, db: Database, key: str, method: str, path: str, text: str, purpose: str, session_id: str | None
    ) -> IdempotencyRecord:
        try:
            _q(
                db,
                "INSERT INTO idempotency (key, method, path, body, purpose, session_id, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [key, method.upper(), path, text, purpose, session_id, self._now()],
            )
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"an idempotency record with this key already exists: {exc}") from exc
        return _record(_q(db, "SELECT * FROM idempotency WHERE key = ?", [key]).fetchone())

    def note_attempt(self, key: str) -> int:
        """Count one send of a stored request; returns the attempt number."""
        with self.write() as db:
            cur = _q(db, "UPDATE idempotency SET attempts = attempts + 1 WHERE key = ?", [key])
            if cur.rowcount == 0:
                raise StoreError(f"no idempotency record {key}")
            return int(_q(db, "SELECT attempts FROM idempotency WHERE key = ?", [key]).fetchone()[0])

    def finish_request(self, key: str, http_status: int, response: Any) -> IdempotencyRecord:
        """Record the definite answer (2xx/4xx) that ends a logical request."""
        with self.write() as db:
            cur = _q(
                db,
                "UPDATE idempotency SET state = 'answered', http_status = ?, response = ?, answered_at = ? "
                "WHERE key = ?",
                [http_status, canonical_json(response), self._now(), key],
            )
            if cur.rowcount == 0:
                raise StoreError(f"no idempotency record {key}")
            return _record(_q(db, "SELECT * FROM idempotency WHERE key = ?", [key]).fetchone())

    def withdraw_request(self, key: str, actor: str, why: str) -> bool:
        """End a stored request that never took effect (never sent, or every answer said nothing was
        kept), so no restart re-sends it. False when it already had an answer (nothing changed)."""
        with self.write() as db:
            cur = _q(
                db,
                "UPDATE idempotency SET state = 'answered', response = ?, answered_at = ? "
                "WHERE key = ? AND state = 'pending'",
                [canonical_json({"withdrawn": {"by": actor, "why": why}}), self._now(), key],
            )
            return cur.rowcount == 1

    def get_request(self, key: str) -> IdempotencyRecord | None:
        with self.read() as db:
            row = _q(db, "SELECT * FROM idempotency WHERE key = ?", [key]).fetchone()
        return _record(row) if row else None

    def unfinished_requests(self) -> list[IdempotencyRecord]:
        """Requests whose answer was never recorded, oldest first (replayed at start-up)."""
        with self.read() as db:
            rows = _q(
                db, "SELECT * FROM idempotency WHERE state = 'pending' ORDER BY created_at, rowid"
            ).fetchall()
        return [_record(r) for r in rows]

    def list_requests(self, session_id: str | None = None) -> list[IdempotencyRecord]:
        with self.read() as db:
            if session_id is None:
                rows = _q(db, "SELECT * FROM idempotency ORDER BY rowid").fetchall()
            else:
                rows = _q(
                    db, "SELECT * FROM idempotency WHERE session_id = ? ORDER BY rowid", [session_id]
                ).fetchall()
        return [_record(r) for r in rows]
