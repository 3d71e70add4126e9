"""The step store on PostgreSQL (psycopg 3): the calls the store's tables make, in SQLite's dialect.

:class:`PgDatabase` is a sqlite-utils ``Database`` to everything above it: ``execute``, ``conn``
(``execute``, ``executemany``, ``cursor``, ``in_transaction``), ``table(name)`` with ``insert``,
``insert_all``, ``get``, ``update``, ``rows_where``, and what sqlite-utils' ``Migrations.apply`` uses
(``exists``, ``create``, ``create_index``, ``pks``, ``atomic``). A call it does not implement falls
through to sqlite-utils, which then sends SQLite's SQL to PostgreSQL: a loud error, never a quiet
difference. Statements are translated by bot/store/_dialect.py; errors come back as ``sqlite3``'s
(``IntegrityError`` for a constraint or an append-only trigger, ``OperationalError`` otherwise), so
the store's callers catch one family.

Why a statement inside a transaction runs under a savepoint: in SQLite a failed statement leaves its
transaction usable (a caller may catch a duplicate insert and go on); in PostgreSQL it aborts the
whole transaction unless the statement had a savepoint of its own.

The connection's ``options`` (e.g. ``?options=-csearch_path%3Dtenant``) pick a schema: the tests give
each test a schema of its own on one server.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeAlias, cast

from sqlite_utils import Database
from sqlite_utils.db import NotFoundError, Table

from bot.dburl import redacted
from bot.errors import StoreError
from bot.store import _dialect

try:
    import psycopg
    from psycopg import pq
except ImportError:  # pragma: no cover - the optional extra is missing
    psycopg = None  # type: ignore[assignment]

# The chain's append lock: one transaction-scoped advisory lock, the same number in every bot ("recoverb"
# in ASCII), so appends from any number of bots run in one order.
CHAIN_LOCK_KEY = 0x7265636F76657262
# Idle connections an engine keeps between units of work: a bot's threads reuse them instead of paying
# a server backend's start per transaction; few, so many bots (and test workers) stay far below
# PostgreSQL's max_connections (100 by default).
IDLE_CONNECTIONS = 2
_INHERITED: list[Any] = []
_SQLITE_BEGIN = re.compile(r"^BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\b")
# SQLite keeps each table's and trigger's statement in sqlite_master; here a table of the same
# rows does (bot/store/_dialect.py reads sqlite_master from it), so a migration that rebuilds a
# table from its own statement text runs unchanged.
_SCHEMA_TABLE = (
    "CREATE TABLE IF NOT EXISTS _sqlite_schema (name TEXT PRIMARY KEY, type TEXT NOT NULL, "
    "tbl_name TEXT NOT NULL, sql TEXT)"
)
_CREATED = re.compile(
    r"^\s*CREATE\s+(?P<kind>TABLE|TRIGGER)\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(?P<name>\w+)\"?"
    r"(?:.*?\bON\s+(?P<table>\w+))?",
    re.IGNORECASE | re.DOTALL,
)
_DROP_TABLE = re.compile(r"^\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?\"?(?P<name>\w+)", re.IGNORECASE)
_DROP_TRIGGER = re.compile(r"^\s*DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?\"?(?P<name>\w+)\"?\s*;?\s*$", re.IGNORECASE)
_RENAME = re.compile(r"^\s*ALTER\s+TABLE\s+\"?(?P<old>\w+)\"?\s+RENAME\s+TO\s+\"?(?P<new>\w+)", re.IGNORECASE)
_INSERT_INTO = re.compile(r"^\s*INSERT\s+(?:OR\s+\w+\s+)?INTO\s+\"?(?P<table>\w+)\"?", re.IGNORECASE)
_INSERT_OR_REPLACE = re.compile(
    r"^(?P<head>\s*INSERT\s+OR\s+REPLACE\s+INTO)\s+\"?(?P<table>\w+)\"?\s*\((?P<columns>[^)]*)\)",
    re.IGNORECASE,
)
_WRITES = ("INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP")


# What a column holds here (psycopg's values for TEXT, BIGINT, DOUBLE PRECISION, BYTEA, NULL).
Value = Any
Raw: TypeAlias = "psycopg.Connection[Any]"  # in autocommit mode
Cursor: TypeAlias = "psycopg.Cursor[Any]"
RowMaker = Callable[[Cursor], Callable[[Sequence[Value]], "Row"]]
Release = Callable[[Raw], None]


class Row(tuple):  # type: ignore[type-arg]
    """A result row read by position (``row[0]``, unpacking) or by name (``row["seq"]``), like
    ``sqlite3.Row``; callers of either form get what they expect."""

    _names: tuple[str, ...]

    def __new__(cls, values: Sequence[Any], names: tuple[str, ...]) -> Row:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: int | str) -> Value:  # type: ignore[override]
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise IndexError(f"no column {key!r}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _rows(hide_rowid: bool) -> RowMaker:
    """A psycopg row factory making :class:`Row`; with ``hide_rowid`` the hidden ``rowid`` column (SQLite's
    implicit one, bot/store/_dialect.py) is left out, as ``SELECT *`` leaves it out on SQLite."""

    def factory(cursor: Cursor) -> Callable[[Sequence[Value]], Row]:
        names = tuple(c.name for c in cursor.description or ())
        if not hide_rowid or _dialect.ROWID not in names:
            return lambda values: Row(values, names)
        keep = [i for i, n in enumerate(names) if n != _dialect.ROWID]
        kept = tuple(names[i] for i in keep)
        return lambda values: Row([values[i] for i in keep], kept)

    return factory


def _as_sqlite_error(exc: Exception) -> sqlite3.Error:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.errors.IntegrityError):
        return sqlite3.IntegrityError(message)
    return sqlite3.OperationalError(message)


class Catalog:
    """What an engine's connections learnt of the tables (columns, keys), shared by them; cleared on
    any schema change made here (another bot's migrations only add tables and columns, never keys)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[str]] = {}
        self.keys: dict[str, list[str]] = {}


class PgCursor:
    """What ``sqlite3.Cursor`` offers the store's callers: fetchone, fetchall, iteration, rowcount."""

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self._cur: Cursor | None = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.row_factory: object = None  # accepted (rows read by name already)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> PgCursor:
        self._cur = self._conn.run(sql, params)
        self.rowcount = self._cur.rowcount
        self.lastrowid = self._conn.lastrowid
        return self

    def fetchone(self) -> Row | None:
        if self._cur is None or self._cur.description is None:
            return None
        return cast(Row | None, self._cur.fetchone())

    def fetchall(self) -> list[Row]:
        if self._cur is None or self._cur.description is None:
            return []
        return cast(list[Row], self._cur.fetchall())

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())

    def close(self) -> None:
        if self._cur is not None:
            self._cur.close()


class PgConnection:
    """``db.conn``: one psycopg connection in autocommit mode; ``BEGIN``/``COMMIT`` are explicit, as
    they are on the store's SQLite connections."""

    def __init__(self, raw: Raw, catalog: Catalog | None = None, release: Release | None = None) -> None:
        self.raw = raw
        self._savepoints = 0
        catalog = catalog if catalog is not None else Catalog()
        self._catalog = catalog
        self._keys = catalog.keys
        self._columns = catalog.columns
        self._release = release
        self.lastrowid: int | None = None  # the last INSERT's (what sqlite3's cursor gives)
        self.row_factory: object = None  # accepted (rows are read by position and by name already)

    @property
    def in_transaction(self) -> bool:
        return bool(self.raw.info.transaction_status != pq.TransactionStatus.IDLE)

    def run(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Cursor:
        """Execute one SQLite statement (translated); errors as ``sqlite3``'s."""
        head = sql.lstrip().upper()
        if head.startswith(("CREATE", "DROP", "ALTER")):
            return self._schema_change(sql, params)
        return self._send(sql, params)

    def columns(self, name: str) -> list[str]:
        """The table's columns in order (empty: no such table; not cached then, a migration may make it)."""
        if name not in self._columns:
            rows = self.raw.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s ORDER BY ordinal_position",
                [name],
            ).fetchall()
            if not rows:
                return []
            self._columns[name] = [str(r[0]) for r in rows]
        return self._columns[name]

    def rowid_column(self, name: str) -> str:
        """The column that is SQLite's rowid in this table: the hidden ``rowid``, or the integer key."""
        if _dialect.ROWID in self.columns(name):
            return _dialect.ROWID
        keys = self.primary_key(name)
        return keys[0] if len(keys) == 1 else _dialect.ROWID

    def _upsert(self, sql: str) -> str:
        """``INSERT OR REPLACE`` as PostgreSQL says it: on a conflict of the table's key, the new values."""
        match = _INSERT_OR_REPLACE.match(sql)
        assert match is not None
        table, columns = match["table"], [c.strip().strip('"') for c in match["columns"].split(",")]
        keys = self.primary_key(table)
        if not keys:
            raise sqlite3.OperationalError(f"INSERT OR REPLACE into {table}: the table has no primary key here")
        sets = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in columns if c not in keys)
        action = f"DO UPDATE SET {sets}" if sets else "DO NOTHING"
        body = sql[match.end("head") :].rstrip().rstrip(";")
        return f"INSERT INTO{body} ON CONFLICT ({', '.join(keys)}) {action}"

    def primary_key(self, name: str) -> list[str]:
        """The table's primary key columns, in order (empty: none, or no such table)."""
        if name not in self._keys:
            rows = self.raw.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)",
                [f'"{name}"'],
            ).fetchall()
            if not rows:
                return []
            self._keys[name] = [str(r[0]) for r in rows]
        return self._keys[name]

    def _send(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> Cursor:
        if _INSERT_OR_REPLACE.match(sql):
            sql = self._upsert(sql)
        head = sql.lstrip().upper()
        if _SQLITE_BEGIN.match(head):
            sql = "BEGIN"
        inserted = _INSERT_INTO.match(sql)
        back = None
        self.lastrowid = None
        if inserted is not None and not _dialect.RETURNING.search(sql):
            # lastrowid, as SQLite's cursor gives it: the new row's integer key (or its hidden rowid).
            back = self.rowid_column(inserted["table"])
            sql = f'{sql.rstrip().rstrip(";")} RETURNING "{back}"'
        statements = _dialect.translate(sql, bool(params))
        guarded = self.in_transaction and head.startswith(_WRITES)
        select_list = sql.split("FROM", 1)[0] if head.startswith("SELECT") else sql
        cur = self.raw.cursor(row_factory=_rows(_dialect.ROWID not in select_list.lower()))
        try:
            if guarded:
                self.raw.execute("SAVEPOINT rb_statement")
            for text in statements:
                cur.execute(text, params or None)
            if back is not None:
                row = cur.fetchone() if cur.rowcount == 1 else None
                self.lastrowid = int(row[back]) if row is not None else None
            if guarded:
                self.raw.execute("RELEASE SAVEPOINT rb_statement")
        except psycopg.Error as exc:
            if guarded and self.raw.info.transaction_status == pq.TransactionStatus.INERROR:
                self.raw.execute("ROLLBACK TO SAVEPOINT rb_statement")
                self.raw.execute("RELEASE SAVEPOINT rb_statement")
            raise _as_sqlite_error(exc) from None
        return cur

    def _schema_change(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> Cursor:
        """A CREATE, DROP or ALTER, and its row in ``_sqlite_schema`` (SQLite's ``sqlite_master``)."""
        self._keys.clear()  # the catalog this process read is stale now
        self._columns.clear()
        self.raw.execute(_SCHEMA_TABLE)
        created = _CREATED.match(sql)
        dropped_trigger = _DROP_TRIGGER.match(sql)
        if dropped_trigger is not None:
            name = dropped_trigger["name"]
            row = self.raw.execute("SELECT tbl_name FROM _sqlite_schema WHERE name = %s", [name]).fetchone()
            if row is None:
                raise sqlite3.OperationalError(f"no such trigger: {name}")
            cur = self._send(f'DROP TRIGGER "{name}" ON "{row[0]}"', None)
            self.raw.execute("DELETE FROM _sqlite_schema WHERE name = %s", [name])
            return cur
        cur = self._send(sql, params)
        if created is not None:
            kind, name = created["kind"].lower(), created["name"]
            table = name if kind == "table" else created["table"]
            self.raw.execute(
                "INSERT INTO _sqlite_schema (name, type, tbl_name, sql) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (name) DO NOTHING",
                [name, kind, table, sql.strip()],
            )
        dropped = _DROP_TABLE.match(sql)
        if dropped is not None:
            self.raw.execute("DELETE FROM _sqlite_schema WHERE tbl_name = %s", [dropped["name"]])
        renamed = _RENAME.match(sql)
        if renamed is not None:
            old, new = renamed["old"], renamed["new"]
            self.raw.execute(
                "UPDATE _sqlite_schema SET sql = regexp_replace(sql, %s, %s, 'i') WHERE name = %s AND type = 'table'",
                [rf"^CREATE\s+TABLE\s+{old}\b", f'CREATE TABLE "{new}"', old],
            )
            self.raw.execute(
                "UPDATE _sqlite_schema SET name = CASE WHEN name = %s THEN %s ELSE name END, tbl_name = %s "
                "WHERE tbl_name = %s",
                [old, new, new, old],
            )
        return cur

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> PgCursor:
        return PgCursor(self).execute(sql, params)

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        last = PgCursor(self)
        total = 0
        for params in seq:
            last.execute(sql, params)
            total += max(last.rowcount, 0)
        last.rowcount = total
        return last

    def cursor(self) -> PgCursor:
        return PgCursor(self)

    def close(self) -> None:
        """Back to its engine's few idle connections (or closed, with an open transaction or none kept)."""
        if self._release is not None:
            self._release(self.raw)
        else:
            self.raw.close()


class PgTable(Table):
    """``db.table(name)`` on PostgreSQL: the row calls the store's tables make."""

    def __init__(self, db: PgDatabase, name: str) -> None:  # no super().__init__: it inspects SQLite
        self.db = db
        self.pgdb = db
        self.name = name
        self.last_rowid: int | None = None
        self.last_pk: Any | None = None

    @property
    def conn(self) -> PgConnection:
        return self.pgdb.pg

    def exists(self) -> bool:
        return self.pgdb.table_columns(self.name) != []

    @property
    def pks(self) -> list[str]:
        return self.pgdb.primary_key(self.name) or [_dialect.ROWID]

    def _rowid(self) -> str:
        return self.pgdb.pg.rowid_column(self.name)

    def _visible(self, row: Row) -> dict[str, Any]:
        return dict(zip(row.keys(), row, strict=True))

    def rows_where(  # type: ignore[override]
        self,
        where: str | None = None,
        where_args: Sequence[Any] | Mapping[str, Any] | None = None,
        order_by: str | None = None,
        select: str = "*",
        limit: int | None = None,
        offset: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        sql = f'SELECT {select} FROM "{self.name}"'  # noqa: S608 - names are the store's own
        if where:
            sql += f" WHERE {where}"
        if order_by:
            rowid = self._rowid()
            sql += " ORDER BY " + ", ".join(
                rowid + part.strip()[len(_dialect.ROWID) :] if part.strip().split(" ")[0] == _dialect.ROWID else part
                for part in order_by.split(",")
            )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        if offset is not None:
            sql += f" OFFSET {int(offset)}"
        for row in self.conn.execute(sql, list(where_args or [])).fetchall():
            yield self._visible(row)

    def get(self, pk_values: Value) -> dict[str, Any]:
        keys = self.pks
        values = list(pk_values) if isinstance(pk_values, list | tuple) else [pk_values]
        where = " AND ".join(f'"{k}" = ?' for k in keys)
        row = next(self.rows_where(where, values), None)
        if row is None:
            raise NotFoundError
        return row

    def insert(self, record: Mapping[str, Any], **_: object) -> PgTable:  # type: ignore[override]
        columns = list(record)
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join("?" for _ in columns)
        back = self._rowid()
        cur = self.conn.execute(
            f'INSERT INTO "{self.name}" ({names}) VALUES ({marks}) RETURNING "{back}"',  # noqa: S608
            [record[c] for c in columns],
        )
        row = cur.fetchone()
        self.last_rowid = int(row[0]) if row is not None else None
        keys = self.pgdb.primary_key(self.name)
        if len(keys) == 1:
            self.last_pk = record.get(keys[0], self.last_rowid)
        return self

    def insert_all(self, records: Iterable[Mapping[str, Any]], **_: object) -> PgTable:  # type: ignore[override]
        for record in records:
            self.insert(record)
        return self

    def update(  # type: ignore[override]
        self, pk_values: Value, updates: Mapping[str, Any] | None = None, **_: object
    ) -> PgTable:
        if not updates:
            return self
        self.get(pk_values)
        keys = self.pks
        values = list(pk_values) if isinstance(pk_values, list | tuple) else [pk_values]
        sets = ", ".join(f'"{c}" = ?' for c in updates)
        where = " AND ".join(f'"{k}" = ?' for k in keys)
        self.conn.execute(
            f'UPDATE "{self.name}" SET {sets} WHERE {where}',  # noqa: S608
            [*updates.values(), *values],
        )
        self.last_pk = values[0] if len(values) == 1 else values
        return self

    def create(  # type: ignore[override]
        self, columns: Mapping[str, Any], pk: str | None = None, **_: object
    ) -> PgTable:
        """The one table sqlite-utils creates itself: its record of applied migrations."""
        types = {int: "INTEGER", str: "TEXT", float: "REAL", bytes: "BLOB"}
        parts = []
        for name, kind in columns.items():
            sql_type = types.get(kind, "TEXT")
            parts.append(f'"{name}" {sql_type}{" PRIMARY KEY" if name == pk else ""}')
        self.conn.execute(f'CREATE TABLE "{self.name}" ({", ".join(parts)})')
        return self

    def create_index(  # type: ignore[override]
        self, columns: Sequence[str], index_name: str | None = None, unique: bool = False, **_: object
    ) -> PgTable:
        name = index_name or f"idx_{self.name}_{'_'.join(columns)}"
        cols = ", ".join(f'"{c}"' for c in columns)
        self.conn.execute(f'CREATE {"UNIQUE " if unique else ""}INDEX "{name}" ON "{self.name}" ({cols})')
        return self


class PgDatabase(Database):
    """A sqlite-utils ``Database`` whose connection is PostgreSQL's (see the module's docstring)."""

    def __init__(self, raw: Raw, catalog: Catalog | None = None, release: Release | None = None) -> None:
        # no super().__init__: it opens SQLite
        self.pg = PgConnection(raw, catalog, release)
        self.conn = cast(sqlite3.Connection, self.pg)  # the calls callers make on it are PgConnection's
        self._tracer = None

    def execute(self, sql: str, parameters: Iterable[Any] | dict[str, Any] | None = None) -> PgCursor:  # type: ignore[override]
        args = parameters if isinstance(parameters, dict) or parameters is None else list(parameters)
        return self.pg.execute(sql, args)

    def query(
        self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> Generator[dict[str, Any], None, None]:
        for row in self.execute(sql, params).fetchall():
            yield dict(zip(row.keys(), row, strict=True))

    def table(self, table_name: str, **_: object) -> PgTable:
        return PgTable(self, table_name)

    def __getitem__(self, table_name: str) -> PgTable:
        return self.table(table_name)

    @contextmanager
    def atomic(self) -> Iterator[PgDatabase]:
        """A savepoint inside the caller's transaction, or a transaction of its own."""
        name = f"rb_atomic_{self.pg._savepoints}"
        self.pg._savepoints += 1
        outer = self.pg.in_transaction
        self.pg.raw.execute(f"SAVEPOINT {name}" if outer else "BEGIN")
        try:
            yield self
        except BaseException:
            self.pg.raw.execute(f"ROLLBACK TO SAVEPOINT {name}" if outer else "ROLLBACK")
            raise
        else:
            self.pg.raw.execute(f"RELEASE SAVEPOINT {name}" if outer else "COMMIT")
        finally:
            self.pg._savepoints -= 1

    def table_names(self, fts4: bool = False, fts5: bool = False) -> list[str]:
        rows = self.pg.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' AND table_name != '_sqlite_schema' ORDER BY table_name"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def table_columns(self, name: str) -> list[str]:
        return self.pg.columns(name)

    def primary_key(self, name: str) -> list[str]:
        return self.pg.primary_key(name)

    def close(self) -> None:
        self.pg.close()


class PgEngine:
    """A PostgreSQL server: a fresh connection per unit of work (closed after it), and a write that
    holds a transaction-scoped advisory lock (the chain's append takes it too)."""

    name = "postgresql"

    def __init__(self, url: str, busy_timeout: float) -> None:
        if psycopg is None:
            raise StoreError(
                "RECOVER_DB is a postgresql:// URL but psycopg is not installed",
                hint="pip install 'recover-bot[postgres]'",
            )
        self.url = url
        self.where = redacted(url)
        self.path: Path | None = None
        self.busy_timeout = busy_timeout
        self.catalog = Catalog()
        self._idle: list[Any] = []
        self._idle_lock = threading.Lock()
        self._pid = os.getpid()

    def connect(self) -> Database:
        """A connection for one unit of work: an idle one of this engine's, or a new one."""
        with self._idle_lock:
            if self._pid != os.getpid():  # a forked child: the parent's sockets are not its own
                _INHERITED.extend(self._idle)  # kept referenced, never closed here (that would end the parent's)
                self._idle, self._pid = [], os.getpid()
            raw = self._idle.pop() if self._idle else None
        if raw is not None and not raw.closed:
            return PgDatabase(raw, self.catalog, self._release)
        return PgDatabase(self._open(), self.catalog, self._release)

    def _release(self, raw: Raw) -> None:
        idle = not raw.closed and raw.info.transaction_status == pq.TransactionStatus.IDLE
        with self._idle_lock:
            if idle and self._pid == os.getpid() and len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(raw)
                return
        raw.close()

    def close(self) -> None:
        """Close the idle connections (a Store going away; tests, so a server's connections stay few)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for raw in idle:
            raw.close()

    def _open(self) -> Raw:
        try:
            raw = psycopg.connect(self.url, autocommit=True, connect_timeout=max(2, int(self.busy_timeout)))
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"cannot open the step store {self.where}: {reason}") from None
        # A lock wait is bounded like SQLite's busy timeout, so a stuck writer is an error, not a hang.
        raw.execute(f"SET lock_timeout = '{int(self.busy_timeout * 1000)}ms'")
        return raw

    def open_connection(self) -> Raw:
        """A psycopg connection of the caller's own (autocommit, the same lock timeout), not one of the
        engine's: a companion that keeps one per thread (the Slack inbox) opens it here, so every
        connection to the server is made, bounded and reported one way."""
        return self._open()

    def prepare(self) -> None:
        db = self.connect()
        db.close()

    def begin_write(self, db: Database) -> None:
        """``BEGIN`` and the store's write lock, as SQLite's ``BEGIN IMMEDIATE`` gives it: every area's
        read-then-write (is a case open? is this request still pending?) was written for one writer at
        a time, so on PostgreSQL too a write transaction holds the lock from its first statement."""
        try:
            db.conn.execute("BEGIN")
            self.lock_chain(db)
        except sqlite3.Error as exc:
            if db.conn.in_transaction:
                db.conn.execute("ROLLBACK")
            raise StoreError(
                f"the step store {self.where} stayed locked for {self.busy_timeout:.0f} s: {exc}",
                hint="Another bot holds a long write; try again.",
            ) from exc

    def lock_chain(self, db: Database) -> None:
        """Appends from any number of bots run in one order: each holds this lock until its commit
        (re-entrant: a write transaction already holds it from its start)."""
        db.conn.execute("SELECT pg_advisory_xact_lock(?)", [CHAIN_LOCK_KEY])
