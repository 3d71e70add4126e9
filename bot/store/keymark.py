"""Keyed stays keyed: the marker step that says "this store has an audit key, and it is this one".

Why: without the key, someone who can write the file can turn every keyed step plain (sha256) and
append plain steps; the chain then looks like one written before the key. So the first keyed step of
a store is a marker, ``audit_key_adopted``, keyed, carrying the key's fingerprint (an HMAC under the
key: a writer without the key can produce neither the marker nor its hash). With a key configured:

- a store with a marker is served only when the marker verifies under the key, its fingerprint is
  the key's, and every step after it is keyed;
- an empty store gets its marker at once; a store whose keyed steps were written before markers
  existed (keyed steps, no marker) gets one after its newest keyed step is checked under the key;
- a store with plain steps only is refused: written before the key (adopt it explicitly with
  ``recover-bot audit adopt-key``, a recorded step) or stripped of its keyed steps.

Checked when the store opens and by the gate before every send (bot/decisions/_authority.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from sqlite_utils import Database

from bot.store.chain import KEYED_VERSION, PLAIN_VERSION, hash_matches

MARKER = "audit_key_adopted"
_FINGERPRINT_LABEL = b"recover-bot audit key fingerprint v1"

REFUSED_HINT = "Run `recover-bot audit verify` (with the key) to see what changed."


def fingerprint(key: bytes) -> str:
    """A short public name of the key (an HMAC under it): the marker records it, a reader compares it."""
    return hmac.new(key, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:32]


def marker_row(db: Database) -> dict[str, Any] | None:
    """The first marker step (the store's keying starts there)."""
    return next(db.table("steps").rows_where("step = ?", [MARKER], order_by="seq", limit=1), None)


def _count(db: Database, where: str, params: list[Any]) -> int:
    row = next(db.table("steps").rows_where(where, params, select="COUNT(*) AS n"), None)
    return int(row["n"]) if row is not None else 0


def problem(db: Database, key: bytes) -> str | None:
    """Why this store may not be served with ``key`` (one line), or None. Reads only."""
    marker = marker_row(db)
    if marker is None:
        if _count(db, "1 = 1", []) == 0 or _count(db, "v = ?", [KEYED_VERSION]) > 0:
            return None  # empty, or keyed before markers existed: ``ensure`` marks it
        return (
            "the step store has only plain (unkeyed) steps but an audit key is configured: it was written "
            "before the key, or its keyed steps were turned plain; run `recover-bot audit verify`, and "
            "`recover-bot audit adopt-key` only if it predates the key"
        )
    try:
        recorded = json.loads(str(marker.get("inputs") or "{}")).get("fingerprint")
    except (ValueError, AttributeError):
        recorded = None
    if (
        int(marker.get("v") or PLAIN_VERSION) != KEYED_VERSION
        or hash_matches(marker, key) is not True
        or recorded != fingerprint(key)
    ):
        return (
            f"the store's keyed marker (step {marker['seq']}) does not verify under the configured audit key: "
            "run `recover-bot audit verify`"
        )
    plain = _count(db, "seq > ? AND (v IS NULL OR v != ?)", [marker["seq"], KEYED_VERSION])
    if plain:
        return (
            f"{plain} plain (unkeyed) step(s) after the store's keyed marker (step {marker['seq']}): "
            "written without the audit key; run `recover-bot audit verify`"
        )
    return None


def needs_marker(db: Database) -> bool:
    """An empty store, or one keyed before markers existed: the store writes its marker now."""
    return marker_row(db) is None and (_count(db, "1 = 1", []) == 0 or _count(db, "v = ?", [KEYED_VERSION]) > 0)


def marker_inputs(key: bytes, why: str) -> dict[str, str]:
    return {"fingerprint": fingerprint(key), "why": why}
