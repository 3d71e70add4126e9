"""``recover-bot backup DEST`` on a PostgreSQL store: a ``pg_dump`` that ``pg_restore`` loads into a fresh
database whose ``audit verify`` passes, the URL's password never on pg_dump's command line."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from bot.app.services import MIGRATIONS
from bot.clock import ManualClock
from bot.errors import StoreError
from bot.store import Store, pgtools
from bot.store.pgtools import pg_tool, without_password

pytestmark = pytest.mark.subprocess

KEY = "backup-test-audit-key-0123456789abcdef"
REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECOVER_")}
    env["PYTHONPATH"] = str(REPO)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@pytest.fixture
def new_database(pg_server_url: str) -> Iterator[Callable[[], str]]:
    """Empty databases of this test's own on the test server (a restore's target), dropped after it."""
    names: list[str] = []

    def make() -> str:
        names.append(f"restore_{uuid.uuid4().hex[:12]}")
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {names[-1]}")
        return _with_database(pg_server_url, names[-1])

    try:
        yield make
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            for name in names:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def fresh_database(new_database: Callable[[], str]) -> str:
    return new_database()


def test_a_pg_backup_restores_into_a_fresh_database_whose_audit_verifies(
    pg_url: str, fresh_database: str, tmp_path: Path
) -> None:
    store = Store(pg_url, ManualClock(), migrations=MIGRATIONS, audit_key=KEY.encode())
    for i in range(7):
        store.record_step(f"ses_{i % 3}", "U1", "note", {"i": i}, "ok")
    steps = len(store.steps())  # the keyed marker and the 7 notes
    store.engine.close()  # type: ignore[attr-defined]
    key_file = tmp_path / "audit.key"
    key_file.write_text(KEY + "\n")
    dest = tmp_path / "recover.pgdump"
    # A shim first on PATH records what pg_dump is given, then runs the real one.
    shim = tmp_path / "bin"
    shim.mkdir()
    seen = tmp_path / "seen"
    (shim / "pg_dump").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}.argv\nprintf "%s" "$PGPASSWORD" > {seen}.pw\n'
        f'exec {pg_tool("pg_dump")} "$@"\n'
    )
    (shim / "pg_dump").chmod(0o755)
    parts = urlsplit(pg_url)
    secret = "s3cret-" + uuid.uuid4().hex[:8]  # the server trusts loopback: any password is accepted
    with_password = urlunsplit(
        (parts.scheme, f"{parts.username}:{secret}@{parts.hostname}:{parts.port}", parts.path, parts.query, "")
    )
    res = _cli("backup", str(dest), "--db", with_password, cwd=tmp_path, path=f"{shim}:{os.environ['PATH']}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("backed up postgresql://") and "(schema t_" in res.stdout
    assert f", {steps} steps) to {dest} with pg_dump" in res.stdout and "pg_restore" in res.stdout
    assert secret not in res.stdout + res.stderr
    argv = Path(f"{seen}.argv").read_text()
    assert secret not in argv and "--format=custom" in argv
    assert Path(f"{seen}.pw").read_text() == secret  # the password went by the environment
    assert dest.is_file() and not list(tmp_path.glob("*.partial"))

    restored = subprocess.run(
        [pg_tool("pg_restore"), f"--dbname={fresh_database}", str(dest)], capture_output=True, text=True, timeout=120
    )
    assert restored.returncode == 0, restored.stderr
    schema = res.stdout.split("(schema ", 1)[1].split(",", 1)[0]
    restored_url = f"{fresh_database}?options=-csearch_path%3D{schema}"
    verify = _cli("audit", "verify", "--db", restored_url, "--key-file", str(key_file), cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.startswith(f"OK: {steps} steps"), verify.stdout

    # A backup never overwrites.
    again = _cli("backup", str(dest), "--db", pg_url, cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: {dest} exists: a backup never overwrites; give a new file name"


def test_the_password_is_taken_out_of_the_url_given_to_the_tools() -> None:
    plain, password = without_password("postgresql://recover:p%40ss@db.example:5432/recover?options=-cx%3Dy")
    assert (plain, password) == ("postgresql://recover@db.example:5432/recover?options=-cx%3Dy", "p@ss")
    plain, password = without_password("postgresql://recover@db.example/recover?password=pw&sslmode=require")
    assert (plain, password) == ("postgresql://recover@db.example/recover?sslmode=require", "pw")
    assert without_password("postgresql://db.example/recover") == ("postgresql://db.example/recover", None)


def test_a_missing_pg_dump_names_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(pgtools, "_TOOL_FOLDERS", str(tmp_path / "postgresql" / "*" / "bin"))
    with pytest.raises(StoreError, match=r"^pg_dump is not installed .*apt-get install postgresql-client"):
        pg_tool("pg_dump")


def test_a_store_in_the_public_schema_restores_into_a_fresh_database_as_it_is(
    new_database: Callable[[], str], tmp_path: Path
) -> None:
    # Every database has a public schema: a dump that created it would fail to restore.
    source, target = new_database(), new_database()
    empty = _cli("backup", str(tmp_path / "empty.pgdump"), "--db", source, cwd=tmp_path)
    assert empty.returncode == 2 and "is not a readable step store" in empty.stderr, empty.stderr
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA other_app")
        conn.execute("CREATE TABLE other_app.theirs (a int)")
    store = Store(source, ManualClock(), migrations=MIGRATIONS)
    store.record_step("ses_1", "U1", "note", {}, "ok")
    store.engine.close()  # type: ignore[attr-defined]
    dest = tmp_path / "public.pgdump"
    res = _cli("backup", str(dest), "--db", source, cwd=tmp_path)
    assert res.returncode == 0 and "(schema public, 1 steps)" in res.stdout, res.stdout + res.stderr
    restored = subprocess.run(
        [pg_tool("pg_restore"), f"--dbname={target}", str(dest)], capture_output=True, text=True, timeout=120
    )
    assert restored.returncode == 0, restored.stderr
    verify = _cli("audit", "verify", "--db", target, cwd=tmp_path)
    assert verify.stdout.startswith("OK: 1 steps"), verify.stdout + verify.stderr
    with psycopg.connect(target, autocommit=True) as conn:  # only the store's schema was dumped
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'other_app'").fetchone() == (0,)
