"""The ``recover-bot audit`` command group (verify, export). Wired into bot/cli.py by ``register``."""

from __future__ import annotations

import argparse
import os
import pwd
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from bot.errors import StoreError
from bot.settings import Settings
from bot.store import Store, audit
from bot.store.audit import CacheCheck

# The settings these commands read (bot/cli.py): the store and the audit chain's key, nothing else,
# so a problem elsewhere in the settings never blocks an audit.
SETTINGS_USES = frozenset({"store", "audit"})

_VERIFY_EXAMPLE = """\
example:
  recover-bot audit verify --db ./recover.db --key-file /run/secrets/recover-audit-key
  recover-bot audit verify --head 42:3f1c…e9   # the head printed by an earlier `audit export`

Exit status: 0 intact, 1 tampering found, 2 the store could not be read."""

_EXPORT_EXAMPLE = """\
example:
  recover-bot audit export --out audit-2026-11-29.jsonl
  (prints the head hash: keep it outside the database, then `audit verify --head HASH`)"""

_DB_HELP = "SQLite step store (default: RECOVER_DB or ./recover.db)"


_P = TypeVar("_P", bound=argparse.ArgumentParser)


def register(subparsers: argparse._SubParsersAction[_P], *, checks: Iterable[CacheCheck] = ()) -> _P:
    """Add ``audit verify`` and ``audit export`` to an argparse subparsers object; ``verify`` also runs
    ``checks`` (the areas' checks of their tables against the chain, passed by the composing CLI)."""
    parser = subparsers.add_parser(
        "audit",
        help="verify or export the tamper-evident step log",
        description="Verify or export the tamper-evident step log.",
        epilog="example:\n  recover-bot audit export --out steps.jsonl\n"
        "  recover-bot audit verify --head HASH",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="audit_command", metavar="{verify,export,adopt-key}")
    sub.required = True

    verify_p = sub.add_parser(
        "verify",
        help="check the hash chain; name edited, removed, reordered steps (and truncation with --head)",
        description="Recompute every step's hash and follow the chain. With --head (a head published "
        "outside the database) a truncated tail is detected too.",
        epilog=_VERIFY_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify_p.add_argument(
        "--db", default=None, help="SQLite step store (default: RECOVER_DB or ./recover.db)"
    )
    verify_p.add_argument(
        "--head", default=None, metavar="SEQ:HASH", help="a head printed by `audit export` or a hand-off"
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
    export_p.add_argument(
        "--db", default=None, help="SQLite step store (default: RECOVER_DB or ./recover.db)"
    )
    export_p.add_argument("--out", default=None, metavar="FILE", help="file to write (default: stdout)")
    export_p.set_defaults(handler=run_export, settings_uses=SETTINGS_USES)

    adopt_p = sub.add_parser(
        "adopt-key",
        help="adopt the audit key on a store written before it (a recorded, keyed marker step)",
        description="A store written before the audit key has only plain steps, which the bot refuses to serve "
        "with a key (it cannot tell it from a store whose keyed steps were turned plain). Check it first "
        "(the chain must verify, and its head should be one you published), then adopt the key: a keyed "
        "marker step carrying the key's fingerprint is recorded, and every later step must be keyed.",
        epilog="example:\n  recover-bot audit adopt-key --db ./recover.db --key-file /run/secrets/recover-audit-key "
        "--head 42:3f1c…e9",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    adopt_p.add_argument("--db", default=None, help=_DB_HELP)
    adopt_p.add_argument("--key-file", default=None, metavar="FILE", help="the audit key's file")
    adopt_p.add_argument("--head", default=None, metavar="SEQ:HASH", help="a head published before, to check first")
    adopt_p.set_defaults(handler=run_adopt_key, settings_uses=SETTINGS_USES)
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
            args.db or str(settings.db_path), head=args.head, key=_audit_key(args, settings), checks=args.cache_checks
        )
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.ok else 1


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    db = args.db or str(settings.db_path)
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


def run_adopt_key(args: argparse.Namespace, settings: Settings) -> int:
    """Verify the plain store, then record the keyed marker (bot/store/keymark.py) as this account."""
    db = args.db or str(settings.db_path)
    try:
        key = _audit_key(args, settings)
        if key is None:
            print("error: no audit key: pass --key-file or set RECOVER_AUDIT_KEY_FILE", file=sys.stderr)
            return 2
        report = audit.verify(db, head=args.head, key=key)
        if not report.ok:
            print(report.summary())
            print("error: the chain does not verify: the key is not adopted", file=sys.stderr)
            return 1
        login = pwd.getpwuid(os.getuid()).pw_name
        step = Store(db, audit_key=key, adopting_key=True).adopt_key(f"console:{login}")
    except (StoreError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"adopted the audit key: keyed marker at step {step.seq} (head before it {report.head_ref}); "
          "every later step is keyed")
    return 0
