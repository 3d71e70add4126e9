"""``recover-bot audit rebind --install NAME``: record that an installation's control host really moved.

The store's binding (bot/store/binding.py) refuses a store pointed at another host; when the host did
move (a new address, a rotated key), an operator records the new binding as a step of their own,
naming the binding it replaces. The installation itself never changes: a store of another
installation is refused here too. The new host is the one the settings name (CONTROL_HOST_URL and
CONTROL_HOST_API_KEY or its file).
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
from pathlib import Path
from typing import TypeVar

from bot.errors import RecoverError, StoreError
from bot.installation_ids import DEFAULT_INSTALLATION, NAME_PATTERN, store_path
from bot.settings import Settings, reveal
from bot.store import binding
from bot.store._store import Store

_P = TypeVar("_P", bound=argparse.ArgumentParser)

SETTINGS_USES = frozenset({"store", "audit", "control_host"})


def add_rebind(sub: argparse._SubParsersAction[_P]) -> None:
    """Add ``audit rebind`` to the ``audit`` command group."""
    parser = sub.add_parser(
        "rebind",
        help="record that an installation's control host moved (a new binding step)",
        description="Record that the installation's control host moved: its store is bound to the host "
        "CONTROL_HOST_URL and CONTROL_HOST_API_KEY name now, as a step by the account that ran it.",
        epilog="example:\n  CONTROL_HOST_URL=https://control.eu-1.example.internal recover-bot audit rebind --install eu-1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--install", default=DEFAULT_INSTALLATION, metavar="NAME", help="the installation")
    parser.add_argument("--db", default=None, help="RECOVER_DB (the installation's file sits beside it)")
    parser.set_defaults(handler=run_rebind, settings_uses=SETTINGS_USES)


def run_rebind(args: argparse.Namespace, settings: Settings) -> int:
    name = str(args.install)
    if not NAME_PATTERN.match(name):
        print(f"error: {name!r} is not an installation name (lower case, e.g. eu-1)", file=sys.stderr)
        return 2
    try:
        settings.require_control_host()
        key = reveal(settings.control_host_api_key)
        if not settings.control_host_url or not key:
            raise StoreError("CONTROL_HOST_URL and CONTROL_HOST_API_KEY name the host to bind to")
        db = store_path(Path(args.db) if args.db else settings.db_path, name)
        if not db.exists():
            raise StoreError(f"installation {name!r} has no step store at {db}: nothing to rebind")
        store = Store(db, audit_key=settings.audit_key_bytes(), installation=name)
        login = pwd.getpwuid(os.getuid()).pw_name
        step = binding.bind(store, *binding.identity_of(settings.control_host_url, key),
                            actor=f"console:{login}", rebind=True)
    except RecoverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if step is None:
        print(f"installation {name!r} is bound to that host already: nothing recorded")
        return 0
    replaced = step.inputs.get("replaces")
    print(f"installation {name!r} bound to {binding.describe(step.inputs['base_url'], step.inputs['key_sha256'])} "
          f"(step {step.seq}" + (f", replacing step {replaced['seq']})" if replaced else ", its first binding)"))
    return 0


__all__ = ["add_rebind", "run_rebind"]
