"""``recover-bot audit rebind --install NAME``: record that an installation's control host really moved.

The store's binding (bot/store/binding.py) refuses a store pointed at another host; when the host did
move (a new address, a rotated key), an operator records the new binding as a step of their own,
naming the binding it replaces. The installation itself never changes: a store of another
installation is refused here too. The new host is the one the bot would serve the installation from:
the composing CLI passes that resolution (``host_of``: the installations file's entry, or today's
CONTROL_HOST_URL and key for ``default``), so the store package imports no installations code and a
rebinding can never bind eu-1's store to a URL meant for another installation.
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from bot.errors import RecoverError, StoreError
from bot.ids import DEFAULT_INSTALLATION, NAME_PATTERN, store_path
from bot.settings import Settings
from bot.store import binding
from bot.store._store import Store
from bot.store.audit import CacheCheck
from bot.store.vouch import add_vouching, vouched_report

_P = TypeVar("_P", bound=argparse.ArgumentParser)

SETTINGS_USES = frozenset({"store", "audit", "control_host"})

#: (settings, installation name) -> (base URL, API key) of the host the bot serves it from.
HostOf = Callable[[Settings, str], tuple[str, str]]


def add_rebind(sub: argparse._SubParsersAction[_P], host_of: HostOf, *, checks: Iterable[CacheCheck] = ()) -> None:
    """Add ``audit rebind`` to the ``audit`` command group; ``host_of`` names each installation's host,
    ``checks`` the tables beside the chain that must agree with it before it is bound anew."""
    parser = sub.add_parser(
        "rebind",
        help="record that an installation's control host moved (a new binding step)",
        description="Record that the installation's control host moved: its store is bound to the host the "
        "bot serves it from now (its entry in RECOVER_INSTALLATIONS_FILE; CONTROL_HOST_URL and "
        "CONTROL_HOST_API_KEY for `default`), as a step by the account that ran it. The chain must verify, "
        "with its tables, up to the head you published (--head), with nothing after it that you did not "
        "accept one by one (--accept-after SEQ).",
        epilog="example:\n  RECOVER_INSTALLATIONS_FILE=/etc/recover-bot/installations.yaml "
        "recover-bot audit rebind --install eu-1 --head "
        "42:17bd80171e3e0f61a26f8d61477086c461c3f29cba634673210f837c4835967e",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--install", default=DEFAULT_INSTALLATION, metavar="NAME", help="the installation")
    parser.add_argument("--db", default=None, help="RECOVER_DB (the installation's file sits beside it)")
    add_vouching(parser)
    parser.set_defaults(handler=run_rebind, settings_uses=SETTINGS_USES, host_of=host_of, cache_checks=tuple(checks))


def run_rebind(args: argparse.Namespace, settings: Settings) -> int:
    name = str(args.install)
    if not NAME_PATTERN.match(name):
        print(f"error: {name!r} is not an installation name (lower case, e.g. eu-1)", file=sys.stderr)
        return 2
    try:
        base_url, key = args.host_of(settings, name)
        db = store_path(Path(args.db) if args.db else settings.db_path, name)
        if not db.exists():
            raise StoreError(f"installation {name!r} has no step store at {db}: nothing to rebind")
        _, vouched = vouched_report(db, args, settings.audit_key_bytes(), args.cache_checks)
        if vouched is None:
            return 1
        store = Store(db, audit_key=settings.audit_key_bytes(), installation=name)
        login = pwd.getpwuid(os.getuid()).pw_name
        step = binding.bind(
            store, *binding.identity_of(base_url, key), actor=f"console:{login}", rebind=True, vouched=vouched
        )
    except RecoverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if step is None:
        print(f"installation {name!r} is bound to that host already: nothing recorded")
        return 0
    replaced = step.inputs.get("replaces")
    print(
        f"installation {name!r} bound to {binding.describe(step.inputs['base_url'], step.inputs['key_sha256'])} "
        f"(step {step.seq}" + (f", replacing step {replaced['seq']})" if replaced else ", its first binding)")
    )
    return 0


__all__ = ["HostOf", "add_rebind", "run_rebind"]
