"""The installation's identity in the chain: which installation and which control host a store is about.

Why: one bot serves several installations, each with its own store file (bot/installations/spec.py,
``store_path``). A file copied or swapped between installations, or a store pointed at another
installation's control host, would let one installation's approvals drive another's sends. So, like
the keyed marker (bot/store/keymark.py), the store records an ``installation_bound`` step once, at
start: the installation's name, the control host's base URL and the sha256 fingerprint of its API key
(never the key). The newest such step is the store's binding:

- at start (bot/app/services.py) a store without one gets it; a store bound to another installation or
  another host is refused with one line;
- before every send the gate (bot/decisions/_authority.py) checks it again against the client it
  sends through;
- a deliberate move of the control host is ``recover-bot audit rebind --install NAME``: a new
  ``installation_bound`` step, by the operator who ran it, naming the binding it replaces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from bot.errors import StoreError
from bot.ids import DEFAULT_INSTALLATION
from bot.store._rows import Step, step_of
from bot.store._store import BOT_ACTOR, Store

BOUND = "installation_bound"
FIRST = "first start"
REBOUND = "rebound"


@dataclass(frozen=True)
class Binding:
    """What an ``installation_bound`` step recorded (``seq``: the step)."""

    installation: str
    base_url: str
    key_sha256: str
    seq: int

    def host(self) -> str:
        return describe(self.base_url, self.key_sha256)


def foreign(what: str, owner: str | None, installation: str) -> str | None:
    """The one installation rule: ``what`` (a step, a request, a key) must be ``installation``'s; ``owner``
    None was recorded before installations were, and is the default installation's."""
    owner = owner or DEFAULT_INSTALLATION
    if owner != installation:
        return f"{what} belongs to installation {owner!r}, not to {installation!r}"
    return None


def foreign_steps(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """``audit verify``: the steps (seq, why) of another installation than the one the store is bound
    to (its newest binding step's); none before a store is bound."""
    bound = next((r for r in reversed(rows) if r.get("step") == BOUND), None)
    if bound is None:
        return []
    try:
        installation = str(json.loads(str(bound.get("inputs") or "{}")).get("installation") or "")
    except ValueError:
        return [(int(bound["seq"]), "the binding step's inputs are not JSON")]
    found = []
    for r in rows:
        why = foreign(f"step {r['seq']} ({r.get('step')})", r.get("installation"), installation)
        if why:
            found.append((int(r["seq"]), f"{why}, the one this store is bound to (step {bound['seq']})"))
    return found


def identity_of(base_url: str, api_key: str) -> tuple[str, str]:
    """The one rule for what a binding records of a control host: its base URL (no trailing slash) and
    the sha256 of its API key in hex (``ControlHostClient.identity`` is built with it)."""
    return base_url.rstrip("/"), hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def describe(base_url: str, key_sha256: str) -> str:
    """A control host as people compare it: its address and the start of its key's fingerprint."""
    return f"{base_url} (key sha256 {key_sha256[:12]}…)"


def inputs(installation: str, base_url: str, key_sha256: str, why: str, previous: Binding | None) -> dict[str, Any]:
    """The binding step's inputs (the replaced binding named on a re-binding)."""
    values: dict[str, Any] = {
        "installation": installation,
        "base_url": base_url,
        "key_sha256": key_sha256,
        "why": why,
    }
    if previous is not None:
        values["replaces"] = {"seq": previous.seq, "base_url": previous.base_url, "key_sha256": previous.key_sha256}
    return values


def current_row(db: Database) -> dict[str, Any] | None:
    """The newest binding step's row (the store's binding), or None."""
    return next(db.table("steps").rows_where("step = ?", [BOUND], order_by="seq DESC", limit=1), None)


def binding_of(row: Mapping[str, Any], recorded: Mapping[str, Any]) -> Binding:
    """The binding a step row recorded (``recorded``: its inputs, parsed)."""
    return Binding(
        installation=str(recorded.get("installation") or ""),
        base_url=str(recorded.get("base_url") or ""),
        key_sha256=str(recorded.get("key_sha256") or ""),
        seq=int(row["seq"]),
    )


def name_problem(binding: Binding, step_installation: str | None, installation: str, path: object) -> str | None:
    """The binding names another installation than the store's (the file was copied or swapped)."""
    what = f"the step store {path} (its binding, step {binding.seq})"
    why = foreign(what, binding.installation or "?", installation) or foreign(what, step_installation, installation)
    return f"{why}: it was copied or swapped; give {installation!r} its own store file" if why else None


def host_problem(binding: Binding, installation: str, base_url: str, key_sha256: str) -> str | None:
    """The binding names another control host (address or key) than the client's."""
    rebind = f"`recover-bot audit rebind --install {installation} --head SEQ:HASH` (your last published head)"
    if binding.base_url == base_url and binding.key_sha256 != key_sha256:
        return (
            f"installation {installation!r}'s step store was bound to {base_url} with another API key "
            f"(sha256 {binding.key_sha256[:12]}…, step {binding.seq}), not this one (sha256 {key_sha256[:12]}…): "
            f"the key is wrong, or it was rotated: then record that with {rebind}"
        )
    if binding.base_url != base_url:
        return (
            f"installation {installation!r}'s step store is bound to {binding.host()} (step {binding.seq}), "
            f"not to {describe(base_url, key_sha256)}: it was pointed at another host; "
            f"if this host really replaced that one, record it with {rebind}"
        )
    return None


def current(store: Store) -> Binding | None:
    """The store's binding: what its newest ``installation_bound`` step recorded, or None."""
    with store.read() as db:
        row = current_row(db)
    return None if row is None else binding_of(row, step_of(row).inputs)


def problem(store: Store, base_url: str, key_sha256: str) -> str | None:
    """Why ``store`` may not send through the control host at ``base_url`` with the key of that
    fingerprint, or None. The gate asks it before every send (bot/decisions/_authority.py)."""
    with store.read() as db:
        return _problem(store, db, base_url, key_sha256)


def _problem(store: Store, db: Database, base_url: str, key_sha256: str, *, host: bool = True) -> str | None:
    row = current_row(db)
    if row is None:
        return (
            f"the step store {store.where} records no installation binding (`{BOUND}`): "
            "the bot records it at start; start it again"
        )
    step = step_of(row)
    if store.verify_step(step) is not True:
        return f"the binding step {step.seq} does not match its hash: run `recover-bot audit verify`"
    bound = binding_of(row, step.inputs)
    why = name_problem(bound, step.installation, store.installation, store.where)
    if why is None and host:
        why = host_problem(bound, store.installation, base_url, key_sha256)
    return why


def _holds_another(store: Store, db: Database) -> str | None:
    """An unbound store with steps of another installation (one from before bindings, swapped in)."""
    other = next(
        db.table("steps").rows_where(
            "COALESCE(installation, ?) != ?", [DEFAULT_INSTALLATION, store.installation], limit=1
        ),
        None,
    )
    if other is None:
        return None
    why = foreign(f"the step store {store.where} (step {other['seq']})", other["installation"], store.installation)
    return f"{why}: it was copied or swapped; give {store.installation!r} its own store file"


def bind(
    store: Store,
    base_url: str,
    key_sha256: str,
    *,
    actor: str = BOT_ACTOR,
    rebind: bool = False,
    vouched: Mapping[str, Any] | None = None,
) -> Step | None:
    """At start: record the binding of a store that has none (None when it is bound so already).

    Raises StoreError for a store bound to another installation (never re-bound: give each its own
    file), or to another host unless ``rebind`` (``recover-bot audit rebind``: recorded by ``actor``,
    naming the binding it replaces, with what the operator vouched for: ``vouched``)."""
    with store.write() as db:
        row = current_row(db)
        previous: Binding | None = None
        if row is None:
            why = _holds_another(store, db)
            if why:
                raise StoreError(why)
        else:
            wrong = _problem(store, db, base_url, key_sha256, host=False)
            if wrong is not None:
                raise StoreError(wrong)
            moved = _problem(store, db, base_url, key_sha256)
            if moved is None:
                return None
            if not rebind:
                raise StoreError(moved)
            previous = binding_of(row, step_of(row).inputs)
        recorded = inputs(store.installation, base_url, key_sha256, REBOUND if previous else FIRST, previous)
        return store.record_step(None, actor, BOUND, {**recorded, **(vouched or {})}, "bound", db=db)


__all__ = [
    "bind",
    "current",
    "problem",
    "BOUND",
    "FIRST",
    "REBOUND",
    "Binding",
    "binding_of",
    "current_row",
    "describe",
    "foreign",
    "foreign_steps",
    "host_problem",
    "identity_of",
    "inputs",
    "name_problem",
]
