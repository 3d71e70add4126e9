"""Browse the audit trail in Datasette (``recover-bot browse``, the optional ``[datasette]`` extra).

Datasette opens a consistent snapshot taken with SQLite's backup API (:mod:`bot.store.backup`), never
the live file: opening a file that the bot is writing as immutable would show torn pages, and opening
it writable would let a browser's query compete with the bot. The snapshot is named ``recover.db`` so
the shipped metadata (``browse.yaml``: canned queries for pending approvals, who approved what,
expired and voided requests, sends per installation) applies to it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from sqlite_utils.migrations import Migrations

from bot.dburl import looks_like_url, redacted
from bot.errors import StoreError
from bot.store.backup import copy_database

if TYPE_CHECKING:
    from bot.store.pgtools import Snapshot

METADATA = Path(__file__).with_name("browse.yaml")
SNAPSHOT_NAME = "recover.db"  # the database name ("recover") the metadata's queries are filed under


def metadata() -> dict[str, Any]:
    data = yaml.safe_load(METADATA.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def snapshot(store: str | Path, folder: str | Path, *, migrations: Iterable[Migrations] = ()) -> Path:
    """A consistent copy of ``store`` in ``folder``, ready for Datasette (a PostgreSQL store: see
    :func:`pg_snapshot`, whose SQLite schema ``migrations`` build)."""
    if isinstance(store, str) and looks_like_url(store):
        return pg_snapshot(store, folder, migrations=migrations).path
    source = Path(store)
    if not source.is_file():
        raise StoreError(f"no step store at {source}: give the bot's RECOVER_DB (or --db)")
    dest = Path(folder) / SNAPSHOT_NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    copy_database(source, dest, count_steps=True)
    return dest


def pg_snapshot(url: str, folder: str | Path, *, migrations: Iterable[Migrations]) -> Snapshot:
    """A PostgreSQL store's tables, copied in one REPEATABLE READ transaction, in ``folder``."""
    from bot.store.pgtools import pg_snapshot as copy_tables

    dest = Path(folder) / SNAPSHOT_NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    return copy_tables(url, dest, migrations)


def datasette_for(snapshot_path: Path) -> Any:
    """A Datasette instance on the snapshot (immutable: it never changes) with the shipped metadata."""
    app = _datasette_app()
    return app.Datasette(immutables=[str(snapshot_path)], metadata=metadata())


def serve(store: str | Path, host: str, port: int, *, migrations: Iterable[Migrations] = ()) -> int:
    """Snapshot the store, then run Datasette on it until interrupted (the snapshot is then removed)."""
    _datasette_app()
    with tempfile.TemporaryDirectory(prefix="recover-bot-browse-") as folder:
        if isinstance(store, str) and looks_like_url(store):
            copied = pg_snapshot(store, folder, migrations=migrations)
            snap = copied.path
            print(
                f"browsing a snapshot of {redacted(store)} taken at {copied.taken_at} ({copied.steps} steps; later "
                f"writes do not show) at http://{host}:{port}/recover (Ctrl-C ends it)",
                flush=True,
            )
            if copied.left_out:
                print(f"  not in the snapshot (no SQLite table for them): {', '.join(copied.left_out)}", flush=True)
        else:
            snap = snapshot(store, folder)
            print(f"browsing a snapshot of {store} at http://{host}:{port}/recover (Ctrl-C ends it)", flush=True)
        argv = [sys.executable, "-m", "datasette", "serve", "-i", str(snap), "-m", str(METADATA)]
        try:
            return subprocess.run([*argv, "--host", host, "--port", str(port)], check=False).returncode
        except KeyboardInterrupt:
            return 0


def _datasette_app() -> Any:
    try:
        return importlib.import_module("datasette.app")
    except ModuleNotFoundError:
        raise StoreError("Datasette is not installed: pip install 'recover-bot[datasette]'") from None
