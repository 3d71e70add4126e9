"""The hash chain of the step log: one canonical form, used when writing and when verifying.

A step's hash is computed over a canonical JSON object of its content plus the previous step's hash.
``seq`` is deliberately *not* hashed: the order is carried by ``prev_hash``, so a step moved to
another position still matches its own hash and ``audit verify`` can say "out of order" rather
than a vaguer "edited".

Two chain versions, recorded per step (column ``v``), so a store written before a key was configured
still verifies as it is:

- version 1: plain sha256. Anyone who can write the file can edit a step and re-hash the rest.
- version 2: HMAC-SHA256 under the audit key (``RECOVER_AUDIT_KEY`` / ``RECOVER_AUDIT_KEY_FILE``),
  kept outside the data volume: without the key a re-hashed chain no longer verifies.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from typing import Any

PLAIN_VERSION = 1
KEYED_VERSION = 2
# Kept for callers that name the original version.
HASH_VERSION = PLAIN_VERSION

# The hashed columns, in the order they are stored; prev_hash is added last.
HASHED_FIELDS = (
    "case_id",
    "session_id",
    "actor",
    "at",
    "step",
    "inputs",
    "outcome",
    "detail",
    "http_status",
    "idempotency_key",
    "receipt_id",
)
# Hashed only when set: steps written before installations were recorded (NULL) hash as they always did.
OPTIONAL_HASHED_FIELDS = ("installation",)


class KeyRequired(ValueError):
    """A keyed (version 2) step cannot be hashed or checked without the audit key."""


def canonical_json(value: object) -> str:
    """Deterministic JSON text: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def step_version(row: Mapping[str, Any]) -> int:
    """The chain version a stored row was written with (rows from before the column: 1)."""
    v = row.get("v")
    return int(v) if v is not None else PLAIN_VERSION


def step_hash(row: Mapping[str, Any], prev_hash: str, key: bytes | None = None, *, version: int | None = None) -> str:
    """Hash of one stored step row (``inputs``/``detail`` as their stored JSON text).

    ``version`` defaults to the row's own (``v``); version 2 needs ``key``.
    """
    v = version if version is not None else step_version(row)
    content: dict[str, Any] = {name: row.get(name) for name in HASHED_FIELDS}
    content.update({name: row[name] for name in OPTIONAL_HASHED_FIELDS if row.get(name) is not None})
    content["prev_hash"] = prev_hash
    content["v"] = v
    data = canonical_json(content).encode("utf-8")
    if v == PLAIN_VERSION:
        return hashlib.sha256(data).hexdigest()
    if v == KEYED_VERSION:
        if not key:
            raise KeyRequired("a keyed step needs the audit key")
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    raise ValueError(f"unknown chain version {v}")


def hash_matches(row: Mapping[str, Any], key: bytes | None) -> bool | None:
    """Does the row match its own stored hash? None when it is keyed and no key is given."""
    try:
        expected = step_hash(row, row["prev_hash"], key)
    except KeyRequired:
        return None
    # As bytes: an edited hash holding non-ASCII text is a mismatch, not a crash of `audit verify`.
    return hmac.compare_digest(expected.encode("ascii"), str(row["hash"]).encode("utf-8", "surrogatepass"))


def head_ref(seq: int, hash_: str) -> str:
    """The head as published outside the database: ``SEQ:HASH`` (the seq says where it must be)."""
    return f"{seq}:{hash_}"


_HASH = re.compile(r"[0-9a-f]{64}")
HEAD_FORM = "SEQ:HASH (as `recover-bot audit export` prints it, e.g. 42:3f1c…: a step number, a colon, 64 hex digits)"


def parse_head(text: str) -> tuple[int | None, str]:
    """``SEQ:HASH`` or a bare ``HASH`` (older hand-offs) → (seq or None, hash); a head of any other
    shape is a ValueError naming the form (a typo is a usage error, never "tampered")."""
    text = text.strip().lower()
    seq, sep, hash_ = text.rpartition(":")
    if (sep and not seq.isdigit()) or not _HASH.fullmatch(hash_):
        raise ValueError(f"a published head is {HEAD_FORM}, not {text[:40]!r}")
    return (int(seq) if sep else None), hash_
