"""Traffic shaping for benchmarks: a latency added to every public call and a per-client rate limit.

A real control host is a network hop away and limits how fast one client may call it; a benchmark of
triage or batch decisions means little against a loopback server that answers in 0.2 ms without
limit. Both are real time (not the sandbox clock). The limit is a token bucket per client (the API
key, else the peer address): ``rate`` requests a second, bursts up to ``burst``; past it the answer is
429 ``RATE_LIMITED`` with ``Retry-After`` (whole seconds, as HTTP requires) and a ``RateLimit-Reset``
in milliseconds for clients that can wait less.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class _Bucket:
    tokens: float
    at: float


class Traffic:
    """Latency and per-client rate limit settings, changeable while the sandbox runs."""

    def __init__(self, *, latency: float = 0.0, rate: float | None = None, burst: float | None = None) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self.latency = 0.0
        self.rate: float | None = None
        self.burst: float | None = None
        self.limited = 0
        self.configure(latency=latency, rate=rate, burst=burst)

    def configure(self, *, latency: float = 0.0, rate: float | None = None, burst: float | None = None) -> None:
        if latency < 0 or (rate is not None and rate <= 0) or (burst is not None and burst < 1):
            raise ValueError("latency must be >= 0, rate > 0 and burst >= 1")
        with self._lock:
            self.latency = float(latency)
            self.rate = None if rate is None else float(rate)
            self.burst = None if rate is None else float(burst if burst is not None else max(1.0, rate))
            self._buckets.clear()

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "latency_ms": round(self.latency * 1000, 3),
                "rate_limit": self.rate,
                "burst": self.burst,
                "clients": len(self._buckets),
                "limited": self.limited,
            }

    @staticmethod
    def client_of(authorization: str | None, peer: str | None) -> str:
        """The client a request counts against: a digest of its credentials, else its address."""
        if authorization:
            return "key:" + hashlib.sha256(authorization.encode("utf-8", "replace")).hexdigest()[:16]
        return f"peer:{peer or '?'}"

    def admit(self, client: str) -> float | None:
        """None when the request may proceed; otherwise the seconds until a token is available."""
        with self._lock:
            if self.rate is None or self.burst is None:
                return None
            now = time.monotonic()
            bucket = self._buckets.get(client)
            if bucket is None:
                bucket = self._buckets[client] = _Bucket(self.burst, now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return None
            self.limited += 1
            return (1.0 - bucket.tokens) / self.rate


def retry_after_headers(wait: float) -> dict[str, str]:
    """``Retry-After`` in whole seconds (at least 1) and the exact wait in ``RateLimit-Reset-Ms``."""
    return {"Retry-After": str(max(1, math.ceil(wait))), "RateLimit-Reset-Ms": str(max(1, math.ceil(wait * 1000)))}
