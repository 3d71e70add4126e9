"""The hash chain of the step log: one canonical form, used when writing and when verifying.

A step's hash is sha256 over a canonical JSON object of its content plus the previous step's hash.
``seq`` is deliberately *not* hashed: the order is carried by ``prev_hash``, so a step moved to
another position still matches its own hash and ``audit verify`` can say "out of order" rather
than a vaguer "edited".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

HASH_VERSION = 1

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


def canonical_json(value: Any) -> str:
    """Deterministic JSON text: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def step_hash(row: Mapping[str, Any], prev_hash: str) -> str:
    """Hash of one stored step row (``inputs``/``detail`` as their stored JSON text)."""
    content: dict[str, Any] = {name: row.get(name) for name in HASHED_FIELDS}
    content["prev_hash"] = prev_hash
    content["v"] = HASH_VERSION
    return hashlib.sha256(canonical_json(content).encode("utf-8")).hexdigest()
