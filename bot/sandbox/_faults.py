"""Injected faults on the public API (``/_sandbox/faults``, ``/_sandbox/outage``): what can go wrong
between the bot and a control host, made to happen on the next matching requests.

Latency, a 429, a 5xx before or after the commit, a dropped connection, an answer that dribbles or
is far too big, a listing that repeats its sessions. Faults never touch ``/_sandbox/``. A fault only
says when it applies and how; the request path (``_app``) applies it, the HTTP server (``_server``)
sends a badly shaped answer.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from bot.sandbox._wire import AdminError

FAULT_KINDS = (
    "latency",
    "rate_limit",
    "server_error",
    "error_after_commit",
    "drop_after_commit",
    "dribble",
    "huge_body",
    "repeat_sessions",
)
# How an answer can be sent badly (hostile-host tests): slowly, or far too big.
SHAPE_KINDS = ("dribble", "huge_body")
DEFAULT_HUGE_BYTES = 300_000_000


def check_kind(kind: object) -> None:
    if kind not in FAULT_KINDS:
        raise AdminError(400, "BAD_REQUEST", f"kind must be one of {', '.join(FAULT_KINDS)}")


@dataclass
class Fault:
    """One injected fault on the public API (never on ``/_sandbox/``)."""

    id: str
    kind: str
    path: str = "*"  # fnmatch pattern on the path, e.g. /v1/sessions/*/recovery-decisions
    method: str | None = None
    times: int | None = 1  # None: until cleared
    seconds: float = 0.0  # latency
    retry_after: int = 1  # rate_limit
    status: int = 503  # server_error; error_after_commit defaults to 500
    rate: int = 4  # dribble: bytes per second
    size: int = DEFAULT_HUGE_BYTES  # huge_body: bytes of the answer
    length: bool = True  # huge_body: declare Content-Length (else the body ends when the connection closes)
    #: Real seconds the fault lasts from now (an outage of N seconds); None: until ``times`` runs out.
    for_seconds: float | None = None
    until: float | None = None  # time.monotonic() past which the fault no longer matches
    probability: float = 1.0  # of applying to each matching request (drawn from ``seed``: repeatable)
    seed: int = 1
    hits: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.until is not None and time.monotonic() >= self.until:
            return False
        if not ((self.method is None or self.method == method) and fnmatchcase(path, self.path)):
            return False
        return self.probability >= 1.0 or self._rng.random() < self.probability

    def check(self) -> None:
        """The admin's 400 for a fault the sandbox cannot inject as asked."""
        check_kind(self.kind)
        if self.for_seconds is not None and self.for_seconds <= 0:
            raise AdminError(400, "BAD_REQUEST", "for_seconds must be above 0 (real seconds the fault lasts)")
        if not 0.0 < self.probability <= 1.0:
            raise AdminError(400, "BAD_REQUEST", "probability must be above 0 and at most 1")
        if self.kind == "dribble" and self.rate < 1:
            raise AdminError(400, "BAD_REQUEST", "dribble needs rate >= 1 (bytes per second)")
        if self.kind == "huge_body" and self.size < 1:
            raise AdminError(400, "BAD_REQUEST", "huge_body needs size >= 1 (bytes)")
        if self.kind in ("server_error", "error_after_commit") and not 500 <= self.status <= 599:
            raise AdminError(400, "BAD_REQUEST", f"{self.kind} status must be 5xx")
        if self.kind == "latency" and self.seconds <= 0:
            raise AdminError(400, "BAD_REQUEST", "latency needs seconds > 0")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "path": self.path,
            "method": self.method,
            "times": self.times,
            "seconds": self.seconds,
            "retry_after": self.retry_after,
            "status": self.status,
            "rate": self.rate,
            "size": self.size,
            "length": self.length,
            "for_seconds": self.for_seconds,
            "remaining_seconds": None if self.until is None else round(max(0.0, self.until - time.monotonic()), 3),
            "probability": self.probability,
            "seed": self.seed,
            "hits": self.hits,
        }


class FaultTable:
    """The faults in force, in the order they were added; the caller holds the state's lock."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self._ids = itertools.count(1)

    def next_id(self) -> str:
        return f"fault_{next(self._ids)}"

    def add(self, fault: Fault) -> Fault:
        """Checked, then in force; a ``for_seconds`` fault lasts that many real seconds from now."""
        fault.check()
        if fault.for_seconds is not None:
            fault.until = time.monotonic() + fault.for_seconds
        self.faults.append(fault)
        return fault

    def take(self, method: str, path: str) -> list[Fault]:
        """The faults that apply to this request, each counted as hit once."""
        taken = [f for f in self.faults if f.matches(method, path)]
        for fault in taken:
            fault.hits += 1
        return taken

    def clear(self) -> None:
        self.faults.clear()

    def to_json(self) -> dict[str, Any]:
        return {"faults": [f.to_json() for f in self.faults]}
