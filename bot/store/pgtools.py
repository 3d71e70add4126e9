"""``backup`` and ``browse`` on a PostgreSQL step store: ``pg_dump`` of its tables, a snapshot into SQLite.

Why ``pg_dump`` and not a row copy for ``backup``: it is the server's own consistent dump, restored
with the server's own ``pg_restore`` (schema, triggers, identity columns and all). It runs on a
snapshot this module exports from one REPEATABLE READ transaction, so the step count printed is the
dump's own. The URL's password reaches it through ``PGPASSWORD``, never its command line.

Why ``browse`` copies rows into SQLite: Datasette reads SQLite files. The file's schema is built by
the store's own migrations (:class:`bot.store.Store` on the file), exactly as the SQLite engine builds
it, then every table's rows are copied from one REPEATABLE READ READ ONLY transaction (one moment).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from sqlite_utils.migrations import Migrations

from bot.dburl import redacted
from bot.errors import StoreError

try:
    import psycopg
except ImportError:  # pragma: no cover - the optional extra is missing
    psycopg = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from bot.store._pg import Raw  # a psycopg connection in autocommit mode

_PSYCOPG = "pip install 'recover-bot[postgres]'"
DUMP_FORMAT = "custom"  # pg_dump --format=custom: restored with pg_restore
_TOOL_FOLDERS = "/usr/lib/postgresql/*/bin"
_INSTALL_HINT = (
    "install PostgreSQL's client tools (e.g. apt-get install postgresql-client), the server's major version or newer"
)


def pg_tool(name: str) -> str:
    """``pg_dump``/``pg_restore``/``psql`` on PATH, else the newest under /usr/lib/postgresql/*/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"{_TOOL_FOLDERS}/{name}"), key=_major_version)
    if candidates:
        return candidates[-1]
    raise StoreError(f"{name} is not installed (not on PATH nor in {_TOOL_FOLDERS}): {_INSTALL_HINT}")


def _major_version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def without_password(url: str) -> tuple[str, str | None]:
    """The URL with no password in it (its netloc or a ``password=`` parameter), and the password."""
    parts = urlsplit(url)
    password = unquote(parts.password) if parts.password is not None else None
    query = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in query if k != "password"]
    password = password or next((v for k, v in query if k == "password"), None)
    userinfo, at, host = parts.netloc.rpartition("@")
    netloc = f"{userinfo.split(':', 1)[0]}@{host}" if at else host
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(kept, quote_via=quote), parts.fragment)), password


def tool_env(password: str | None) -> dict[str, str]:
    """The environment a client tool runs in: ours, plus the URL's password as ``PGPASSWORD``."""
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = password
    return env


def _connect(url: str) -> Raw:
    if psycopg is None:
        raise StoreError("the step store is a postgresql:// URL but psycopg is not installed", hint=_PSYCOPG)
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise StoreError(f"cannot open the step store {redacted(url)}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """A server error's first line (never the URL: psycopg's messages name the host, not the password)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Dumped:
    """A ``pg_dump`` written: of which store (password masked), its schema, where, its step count."""

    source: str
    schema: str
    dest: Path
    steps: int


def pg_backup(url: str, dest: str | Path) -> Dumped:
    """``pg_dump --format=custom`` of the store's schema into ``dest`` (written beside it, then renamed)."""
    target = Path(dest)
    if target.exists():
        raise StoreError(f"{target} exists: a backup never overwrites; give a new file name")
    if not target.parent.is_dir():
        raise StoreError(f"{target.parent} is not a folder: create it first, or give another DEST")
    pg_dump = pg_tool("pg_dump")
    plain, password = without_password(url)
    conn = _connect(url)
    partial = target.with_name(target.name + ".partial")
    try:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        schema = str(_value(conn, "SELECT current_schema()"))
        try:
            steps = int(str(_value(conn, "SELECT count(*) FROM steps")))
        except psycopg.Error as exc:
            raise StoreError(f"{redacted(url)} is not a readable step store: {_reason(exc)}") from None
        snap = str(_value(conn, "SELECT pg_export_snapshot()"))
        argv = [
            pg_dump, f"--format={DUMP_FORMAT}", *_schema_options(conn, schema), f"--snapshot={snap}",
            f"--file={partial}", f"--dbname={plain}",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=tool_env(password), check=False)
        if done.returncode != 0:
            lines = (done.stderr or "").strip().splitlines()
            raise StoreError(f"pg_dump of {redacted(url)} failed: {lines[0] if lines else done.returncode}")
        os.replace(partial, target)
    except psycopg.Error as exc:
        raise StoreError(f"cannot back up {redacted(url)}: {_reason(exc)}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        conn.close()
    return Dumped(redacted(url), schema, target, steps)


def _value(conn: Raw, sql: str) -> object:
    """The one value a one-row query answers."""
    row = conn.execute(sql).fetchone()
    if row is None:
        raise StoreError(f"the server answered no row to {sql!r}")
    return row[0]


def _schema_options(conn: Raw, schema: str) -> list[str]:
    """Only the store's schema. Named with ``--schema`` unless it is ``public``: a dump that names
    ``public`` creates it, which fails on restore into any database (every one has it); so for ``public``
    every other schema is left out instead, and the dump restores into a fresh database as it is."""
    if schema != "public":
        return [f"--schema={_quoted(schema)}"]
    others = conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname != 'public' AND nspname != 'information_schema' "
        "AND nspname NOT LIKE 'pg\\_%' ORDER BY nspname"
    ).fetchall()
    return [f"--exclude-schema={_quoted(str(r[0]))}" for r in others]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Snapshot:
    """A PostgreSQL store copied into a SQLite file: when, how many steps, tables left out."""

    path: Path
    taken_at: str
    steps: int
    left_out: tuple[str, ...]


def pg_snapshot(url: str, dest: Path, migrations: Iterable[Migrations]) -> Snapshot:
    """Every table of the store at ``url`` copied, in one REPEATABLE READ transaction, into ``dest``, a
    SQLite file whose schema the store's own migrations build. A PostgreSQL table those migrations do
    not create is left out (named in the result)."""
    from bot.store import Store

    if dest.exists():
        raise StoreError(f"{dest} exists: a backup never overwrites; give a new file name")
    partial = dest.with_name(dest.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    pg = _connect(url)
    try:
        Store(partial, migrations=migrations)  # the schema, as the SQLite engine builds it
        pg.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        taken_at = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        tables = [
            str(r[0])
            for r in pg.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                "AND table_type = 'BASE TABLE' AND table_name != '_sqlite_schema' ORDER BY table_name"
            )
        ]
        lite = sqlite3.connect(partial, isolation_level=None)
        try:
            left_out = _copy_tables(pg, lite, tables)
            pg.execute("COMMIT")
            steps = int(lite.execute("SELECT count(*) FROM steps").fetchone()[0])
            lite.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            (check,) = lite.execute("PRAGMA quick_check").fetchone()
            if check != "ok":
                raise StoreError(f"the snapshot of {redacted(url)} failed its check ({check})")
        finally:
            lite.close()
        os.replace(partial, dest)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot snapshot {redacted(url)} into {dest}: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreError(f"cannot snapshot {redacted(url)}: {_reason(exc)}") from None
    finally:
        pg.close()
        for leftover in (partial, *(partial.with_name(partial.name + s) for s in ("-wal", "-shm"))):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return Snapshot(dest, taken_at, steps, tuple(left_out))


def _copy_tables(pg: Raw, lite: sqlite3.Connection, tables: list[str]) -> list[str]:
    """Each PostgreSQL table's rows into the SQLite table of its name (the columns both have; the
    hidden ``rowid`` kept as SQLite's, so insertion order holds). The tables SQLite lacks come back."""
    left_out: list[str] = []
    lite.execute("BEGIN")
    for table in tables:
        have = [str(r[1]) for r in lite.execute(f"PRAGMA table_info({_quoted(table)})")]
        if not have:
            left_out.append(table)
            continue
        pg_columns = [
            str(r[0])
            for r in pg.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s ORDER BY ordinal_position",
                [table],
            )
        ]
        columns = [c for c in pg_columns if c in have or c == "rowid"]
        order = " ORDER BY rowid" if "rowid" in pg_columns else ""
        names = ", ".join(_quoted(c) for c in columns)
        rows = pg.execute(f"SELECT {names} FROM {_quoted(table)}{order}").fetchall()  # noqa: S608
        lite.execute(f"DELETE FROM {_quoted(table)}")  # noqa: S608 - what the migrations wrote (their record)
        marks = ", ".join("?" for _ in columns)
        lite.executemany(f"INSERT INTO {_quoted(table)} ({names}) VALUES ({marks})", rows)  # noqa: S608
    lite.execute("COMMIT")
    return left_out
