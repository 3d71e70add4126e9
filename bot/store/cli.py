"""The ``recover-bot audit`` command group (verify, export). Wired into bot/cli.py by ``register``."""

from __future__ import annotations

import argparse
import os
import pwd
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from sqlite_utils.migrations import Migrations

from bot.errors import StoreError
from bot.settings import Settings
from bot.store import Store, audit
from bot.store._engine import engine_for
from bot.store._store import DEFAULT_BUSY_TIMEOUT
from bot.store.audit import CacheCheck
from bot.store.rebind import HostOf, add_rebind
from bot.store.vouch import add_vouching, head_argument, vouched_report

# The settings these commands read (bot/cli.py): the store and the audit chain's key, nothing else,
# so a problem elsewhere in the settings never blocks an audit.
SETTINGS_USES = frozenset({"store", "audit"})
# `audit verify` found no damage, but no step's content was authenticated with the audit key: a store
# written unkeyed (RECOVER_AUDIT_KEY=none, or before the key), or keyed steps checked without the key.
# Its own status, so a script never takes it for "verified" (0), "tampered" (1) or a usage error (2).
EXIT_UNAUTHENTICATED = 3
UNKEYED_LINE = "unkeyed: detects accidental damage, not a writer"

EXIT_CODES = """\
Exit status:
  0  intact, every step's content checked with the audit key
  1  TAMPERED (a step, a link, the key's marker or a table beside the chain fails), or FLAGGED
     (steps after the published head given, which it does not vouch for)
  2  a usage error (a malformed --head), or the store could not be read
  3  intact but not authenticated: an unkeyed store (RECOVER_AUDIT_KEY=none), or keyed steps
     checked without the key"""

_VERIFY_EXAMPLE = f"""\
example:
  recover-bot audit verify --db ./recover.db --key-file /run/secrets/recover-audit-key
  # --head is SEQ:HASH, the head printed by an earlier `audit export`:
  recover-bot audit verify --head 42:17bd80171e3e0f61a26f8d61477086c461c3f29cba634673210f837c4835967e

{EXIT_CODES}"""

_EXPORT_EXAMPLE = """\
example:
  recover-bot audit export --out audit-2026-11-29.jsonl
  (prints the head as SEQ:HASH: keep it outside the database, then `audit verify --head SEQ:HASH`)"""


_DB_HELP = "SQLite step store (default: RECOVER_DB or ./recover.db)"


_P = TypeVar("_P", bound=argparse.ArgumentParser)


def register(subparsers: argparse._SubParsersAction[_P], *, host_of: HostOf, checks: Iterable[CacheCheck] = ()) -> _P:
    """Add ``audit verify``, ``export``, ``adopt-key`` and ``rebind`` to an argparse subparsers object;
    ``verify`` also runs ``checks`` (the areas' checks of their tables against the chain) and ``rebind``
    binds to ``host_of``'s host, both passed by the composing CLI."""
    parser = subparsers.add_parser(
        "audit",
        help="verify or export the tamper-evident step log",
        description="Verify or export the tamper-evident step log.",
        epilog="example:\n  recover-bot audit export --out steps.jsonl      # prints the head, SEQ:HASH\n"
        "  recover-bot audit verify --head 42:17bd80171e3e0f61a26f8d61477086c461c3f29cba634673210f837c4835967e\n\n"
        + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="audit_command", metavar="{verify,export,verify-pack,adopt-key,rebind}")
    sub.required = True

    verify_p = sub.add_parser(
        "verify",
        help="check the hash chain; name edited, removed, reordered steps (and truncation with --head)",
        description="Recompute every step's hash and follow the chain. With --head (a head published "
        "outside the database) a truncated tail is detected too.",
        epilog=_VERIFY_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify_p.add_argument("--db", default=None, help="SQLite step store (default: RECOVER_DB or ./recover.db)")
    verify_p.add_argument(
        "--head",
        default=None,
        type=head_argument,
        metavar="SEQ:HASH",
        help="a head printed by `audit export` or a hand-off",
    )
    verify_p.add_argument(
        "--key-file",
        default=None,
        metavar="FILE",
        help="the audit key's file (default: RECOVER_AUDIT_KEY or RECOVER_AUDIT_KEY_FILE)",
    )
    verify_p.set_defaults(handler=run_verify, settings_uses=SETTINGS_USES, cache_checks=tuple(checks))

    export_p = sub.add_parser(
        "export",
        help="write the step log as JSON lines and print the head hash",
        description="Write every step as one JSON object per line (stdout or --out) and print the head.",
        epilog=_EXPORT_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export_p.add_argument("--db", default=None, help="SQLite step store (default: RECOVER_DB or ./recover.db)")
    export_p.add_argument("--out", default=None, metavar="FILE", help="file to write (default: stdout)")
    export_p.set_defaults(handler=run_export, settings_uses=SETTINGS_USES)
    add_evidence_pack(sub, export_p)

    adopt_p = sub.add_parser(
        "adopt-key",
        help="adopt the audit key on a store written before it (a recorded, keyed marker step)",
        description="A store written before the audit key has only plain steps, which the bot refuses to serve "
        "with a key (it cannot tell it from a store whose keyed steps were turned plain). The chain must "
        "verify, with its tables, up to the head you published (--head), with nothing after it: anyone "
        "who can write the file can append plain steps. Steps after the head are listed and refused unless "
        "you read each and pass --accept-after SEQ for it (recorded with the marker). Then a keyed marker "
        "step carrying the key's fingerprint is recorded, and every later step must be keyed.",
        epilog="example:\n  recover-bot audit adopt-key --db ./recover.db --key-file /run/secrets/recover-audit-key "
        "--head 42:17bd80171e3e0f61a26f8d61477086c461c3f29cba634673210f837c4835967e\n  (and --accept-after 43 "
        "--accept-after 44 for steps after it you read and vouch for)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    adopt_p.add_argument("--db", default=None, help=_DB_HELP)
    adopt_p.add_argument("--key-file", default=None, metavar="FILE", help="the audit key's file")
    add_vouching(adopt_p)
    adopt_p.set_defaults(handler=run_adopt_key, settings_uses=SETTINGS_USES, cache_checks=tuple(checks))
    add_rebind(sub, host_of, checks=tuple(checks))
    return parser


def _read_key_file(path: str | Path) -> bytes:
    """The key is the file's first line (e.g. a mounted secret)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise StoreError(f"cannot read the audit key file {path}: {exc.strerror or exc}") from exc
    key = lines[0].strip() if lines else ""
    if not key:
        raise StoreError(f"the audit key file {path} is empty; its first line is the key")
    return key.encode("utf-8")


def _audit_key(args: argparse.Namespace, settings: Settings) -> bytes | None:
    if args.key_file:
        return _read_key_file(args.key_file)
    return settings.audit_key_bytes()  # RECOVER_AUDIT_KEY or RECOVER_AUDIT_KEY_FILE


def run_verify(args: argparse.Namespace, settings: Settings) -> int:
    try:
        report = audit.verify(
            args.db or str(settings.store_target),
            head=args.head,
            key=_audit_key(args, settings),
            checks=args.cache_checks,
        )
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return verify_status(report)


def verify_status(report: audit.AuditReport) -> int:
    """0 verified with the key, 1 findings, :data:`EXIT_UNAUTHENTICATED` intact but not authenticated.

    Plain sha256 links catch accidental damage; whoever can write the file can recompute them, so an
    unkeyed store is said to be one, never reported as plainly verified.
    """
    if not report.ok or report.flagged:
        return 1  # FLAGGED is not OK: the published head does not vouch for what follows it
    if report.steps and not report.keyed_steps:
        print(UNKEYED_LINE)
        return EXIT_UNAUTHENTICATED
    if report.unchecked_steps:
        return EXIT_UNAUTHENTICATED  # the summary says NOT CHECKED and how to give the key
    return 0


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    db = args.db or str(settings.store_target)
    try:
        if args.out:
            with open(args.out, "w", encoding="utf-8") as out:
                head = audit.export(db, out)
            print(f"head {head}")
        else:
            head = audit.export(db, sys.stdout)
            # The head goes to stderr so stdout stays pure JSON lines.
            print(f"head {head}", file=sys.stderr)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


# -- recover-bot backup DEST (its own command; bot/cli.py registers it) -------------------------------------

BACKUP_EPILOG = """example:
  recover-bot backup /backups/recover-2026-11-29.db      # also /backups/recover-2026-11-29.db.inbox
  (while the bot runs; to restore: stop the bot, put both files at RECOVER_DB and RECOVER_DB.inbox,
  start it, then `recover-bot audit verify --head HASH` with the last head you published)

on PostgreSQL (RECOVER_DB is a postgresql:// URL):
  recover-bot backup /backups/recover-2026-11-29.pgdump
  (pg_dump of the store's schema in pg_dump's custom format, from one snapshot; the URL's password goes
  to pg_dump as PGPASSWORD. To restore into an empty database: pg_restore --dbname=URL FILE, then
  `recover-bot audit verify --head HASH`)"""


def register_backup(
    subparsers: argparse._SubParsersAction[_P], *, companions: Iterable[Callable[[Path], Path]] = ()
) -> _P:
    """Add ``backup DEST``; ``companions`` name the files beside the store to copy too (the inbox)."""
    parser = subparsers.add_parser(
        "backup",
        help="Take a consistent online copy of the step store and its inbox (the bot may keep running).",
        description="Take a consistent online copy of the step store and its inbox (SQLite's backup API); "
        "on PostgreSQL, a pg_dump of the store's tables in pg_dump's custom format (restore with pg_restore).",
        epilog=BACKUP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dest", metavar="DEST", help="the copy's file name (must not exist)")
    parser.add_argument("--db", default=None, help="SQLite step store (default: RECOVER_DB or ./recover.db)")
    parser.set_defaults(handler=run_backup, settings_uses=frozenset({"store"}), backup_companions=tuple(companions))
    return parser


def _server_url(target: str | Path) -> str | None:
    """The store's URL when its engine is a server (PostgreSQL), None for a SQLite file; another URL is
    refused by the one reading of ``RECOVER_DB`` (bot/store/_engine.py)."""
    return str(target) if engine_for(target, DEFAULT_BUSY_TIMEOUT).path is None else None


def run_backup(args: argparse.Namespace, settings: Settings) -> int:
    from bot.store.backup import backup

    target = args.db or settings.store_target
    try:
        url = _server_url(target)
        if url is not None:
            from bot.store.pgtools import pg_backup

            dumped = pg_backup(url, args.dest)
            print(
                f"backed up {dumped.source} (schema {dumped.schema}, {dumped.steps} steps) to {dumped.dest} "
                "with pg_dump (custom format: restore with pg_restore); keep it off this host"
            )
            return 0
        copies = backup(target, args.dest, companions=args.backup_companions)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    store, *others = copies
    print(f"backed up {store.source} ({store.steps} steps) to {store.dest}; keep it off this host")
    for copy in others:
        print(f"  {copy.source} to {copy.dest}")
    return 0


# -- recover-bot browse (Datasette on a snapshot; the [datasette] extra) -------------------------------------


def register_browse(
    subparsers: argparse._SubParsersAction[_P], *, migrations: Callable[[], Iterable[Migrations]] = tuple
) -> _P:
    """Add ``browse``: the audit trail in Datasette, on a consistent snapshot of the store; ``migrations``
    gives the areas' migration sets (called only on PostgreSQL, whose snapshot's SQLite schema they build)."""
    parser = subparsers.add_parser(
        "browse",
        help="Browse the audit trail in Datasette on a consistent snapshot (pip install 'recover-bot[datasette]').",
        description="Browse the audit trail in Datasette on a consistent snapshot of the store, with canned "
        "queries: pending approvals, who approved what, expired and voided requests, sends per installation. "
        "On PostgreSQL the snapshot is the store's tables copied, in one transaction, into a temporary SQLite file.",
        epilog="example:\n  recover-bot browse --port 8001      # then open http://127.0.0.1:8001/recover",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", default=None, help="SQLite step store (default: RECOVER_DB or ./recover.db)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.set_defaults(handler=run_browse, settings_uses=frozenset({"store"}), browse_migrations=migrations)
    return parser


def run_browse(args: argparse.Namespace, settings: Settings) -> int:
    from bot.store.browse import serve

    target = args.db or settings.store_target
    try:
        url = _server_url(target)
        migrations = tuple(args.browse_migrations()) if url is not None else ()
        return serve(target, args.host, args.port, migrations=migrations)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


# -- evidence packs: `audit export --pack` and `audit verify-pack` (bot/store/evidence.py) ------------------


def add_evidence_pack(sub: argparse._SubParsersAction[_P], export_p: argparse.ArgumentParser) -> None:
    """``export --pack FILE [--session ID] [--since T] [--until T]`` and ``verify-pack FILE``."""
    export_p.add_argument("--pack", default=None, metavar="FILE", help="write a signed evidence pack instead")
    export_p.add_argument("--session", default=None, help="with --pack: only this session's steps")
    export_p.add_argument("--since", default=None, metavar="ISO", help="with --pack: steps at or after this time")
    export_p.add_argument("--until", default=None, metavar="ISO", help="with --pack: steps before this time")
    export_p.add_argument("--key-file", default=None, metavar="FILE", help="with --pack: the audit key's file")
    export_p.set_defaults(handler=run_export_or_pack)
    pack_p = sub.add_parser(
        "verify-pack",
        help="check a signed evidence pack offline (signature, every step's hash)",
        description="Check an evidence pack from `audit export --pack` without the database.",
        epilog=(
            "example:\n  recover-bot audit verify-pack ses_7f3a.evidence.json --key-file /run/secrets/recover_audit_key"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pack_p.add_argument("pack", metavar="FILE")
    pack_p.add_argument("--key-file", default=None, metavar="FILE", help="the audit key's file")
    pack_p.set_defaults(handler=run_verify_pack, settings_uses=SETTINGS_USES)


def _pack_key(args: argparse.Namespace, settings: Settings) -> bytes:
    key = _audit_key(args, settings)
    if key is None:
        raise StoreError("an evidence pack is signed with the audit key: set RECOVER_AUDIT_KEY or pass --key-file")
    return key


def run_export_or_pack(args: argparse.Namespace, settings: Settings) -> int:
    if not args.pack:
        if args.session or args.since or args.until:
            print("error: --session, --since and --until go with --pack FILE", file=sys.stderr)
            return 2
        return run_export(args, settings)
    from bot.store.evidence import PackFilter, build_pack, write_pack

    try:
        selection = PackFilter(session_id=args.session, since=args.since, until=args.until)
        pack = build_pack(args.db or str(settings.store_target), _pack_key(args, settings), selection)
        write_pack(pack, Path(args.pack))
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(pack['steps'])} steps to {args.pack}, signed; head {pack['store_head']}")
    return 0


def run_verify_pack(args: argparse.Namespace, settings: Settings) -> int:
    from bot.store.evidence import verify_pack

    if not Path(args.pack).is_file():
        print(f"error: no evidence pack at {args.pack}: pass the file `audit export --pack` wrote", file=sys.stderr)
        return 2
    try:
        report = verify_pack(args.pack, _pack_key(args, settings))
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.ok else 1


def run_adopt_key(args: argparse.Namespace, settings: Settings) -> int:
    """Verify the plain store up to the published head, then record the keyed marker
    (bot/store/keymark.py) as this account, with what it vouched for."""
    db = args.db or str(settings.store_target)
    try:
        key = _audit_key(args, settings)
        if key is None:
            print("error: no audit key: pass --key-file or set RECOVER_AUDIT_KEY_FILE", file=sys.stderr)
            return 2
        report, vouched = vouched_report(db, args, key, args.cache_checks)
        if vouched is None:
            return 1
        login = pwd.getpwuid(os.getuid()).pw_name
        step = Store(db, audit_key=key, adopting_key=True).adopt_key(f"console:{login}", vouched)
    except (StoreError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    accepted = vouched["accepted_after_head"]
    print(
        f"adopted the audit key: keyed marker at step {step.seq} (checked against the published head "
        f"{args.head[:24]}…"
        + (f", steps {accepted} accepted after it" if accepted else ", nothing after it")
        + "); every later step is keyed"
    )
    return 0
