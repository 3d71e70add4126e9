"""Pacing for work over many sessions: a shared request rate, 429/Retry-After, throttled progress.

Why here and not in the client: one ``/recover triage`` or batch makes hundreds of calls from a pool
of threads, and the control host sees them as one burst. A token bucket shared by every thread keeps
the whole job under the runbook's rate; a 429 from the control host pauses every thread for its
Retry-After, not only the one that got it. Progress goes to people at most once per interval, from
a thread of its own, so a slow or rate-limited chat never slows the work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

import httpx

from bot.controlhost import parse_retry_after
from bot.messages import Message, Reporter

log = logging.getLogger(__name__)


@runtime_checkable
class RateLimitedReporter(Protocol):
    """A reporter that knows when its chat rate-limited it (the Slack one), so progress slows down."""

    def rate_limited_for(self) -> float | None: ...


class RateLimiter:
    """A token bucket (``rate`` per second, burst ``burst``) shared by threads; ``pause`` for 429s.

    The runbook's rate is a ceiling: a control host that answers 429 allows less, so each new 429
    halves the pace (after the pause it names) and the pace climbs back by a tenth of the ceiling per
    second without one. Nothing is lost either way; the work only goes slower.
    """

    def __init__(self, rate: float, burst: int = 1) -> None:
        self.max_rate = max(0.1, float(rate))
        self.rate = self.max_rate
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._at = time.monotonic()
        self._paused_until = 0.0
        self._last_429 = -1e9
        self._lock = threading.Lock()
        self.throttled = 0  # 429 answers seen

    def acquire(self) -> None:
        """Block until one request may go out."""
        while True:
            with self._lock:
                now = time.monotonic()
                if now < self._paused_until:
                    wait = self._paused_until - now
                else:
                    elapsed = now - self._at
                    if self.rate < self.max_rate and now - self._last_429 > 1.0:
                        self.rate = min(self.max_rate, self.rate + elapsed * self.max_rate * 0.1)
                    self._tokens = min(self.burst, self._tokens + elapsed * self.rate)
                    self._at = now
                    if self._tokens >= 1:
                        self._tokens -= 1
                        return
                    wait = (1 - self._tokens) / self.rate
            time.sleep(wait)

    def paused_for(self) -> float:
        """Seconds left of the current 429 pause (0 when sending): ``/healthz`` says it."""
        with self._lock:
            return max(0.0, self._paused_until - time.monotonic())

    def pause(self, seconds: float) -> None:
        """Nobody sends for ``seconds`` (a 429's wait); a new episode of 429s halves the pace."""
        with self._lock:
            now = time.monotonic()
            self.throttled += 1
            if now >= self._paused_until:
                self.rate = max(0.5, self.rate / 2)
            self._last_429 = now
            self._paused_until = max(self._paused_until, now + max(0.0, seconds))
            self._tokens = 0.0
            self._at = max(self._at, now)


DEFAULT_PAUSE = 1.0  # a 429 that names no (readable) Retry-After


def _pause_for(response: httpx.Response) -> float:
    """How long a 429 pauses everyone: RateLimit-Reset-Ms (draft RateLimit headers) is exact;
    Retry-After (whole seconds or an HTTP date) is read by the client's one parser."""
    exact = response.headers.get("RateLimit-Reset-Ms")
    try:
        if exact:
            return max(0.0, float(exact) / 1000)
    except ValueError:
        pass
    wait = parse_retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
    return DEFAULT_PAUSE if wait is None else wait


class PacedTransport(httpx.BaseTransport):
    """An httpx transport that takes a token before each request and pauses everyone on a 429.

    The client above it still retries a 429 itself with the same Idempotency-Key (its rule); this
    only makes every other thread wait too.
    """

    def __init__(self, limiter: RateLimiter, inner: httpx.BaseTransport | None = None) -> None:
        self.limiter = limiter
        self.inner = inner or httpx.HTTPTransport(limits=httpx.Limits(max_connections=64))
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.limiter.acquire()
        self.sent += 1
        response = self.inner.handle_request(request)
        if response.status_code == 429:
            self.limiter.pause(_pause_for(response))
        return response

    def close(self) -> None:
        self.inner.close()


class Throttle:
    """Shows a job's progress at most once per ``interval`` seconds, from its own thread.

    ``update(build)`` records that something changed; the thread calls ``build()`` for the newest
    state and hands it to the reporter. When a reporter call takes long (a chat service answering
    429 and its client sleeping Retry-After) the interval grows and the next line says so: the
    updates slow down, the work does not.
    """

    def __init__(self, reporter: Reporter, interval: float = 2.0) -> None:
        self.reporter = reporter
        self.interval = max(0.1, interval)
        self.current = self.interval
        self.slowed = False
        self.updates = 0
        self._build: Callable[[], Message] | None = None
        self._dirty = False
        self._done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()

    def update(self, build: Callable[[], Message]) -> None:
        with self._cond:
            self._build = build
            self._dirty = True
            self._cond.notify()

    def note(self) -> str | None:
        """The progress line's note about the chat's rate limit, if it slowed the updates."""
        if not self.slowed:
            return None
        return (
            f"Slack rate-limited the updates (429): this message now updates every {self.current:.0f} s; the work is "
            f"not slowed."
        )

    def _run(self) -> None:
        last = 0.0
        while True:
            with self._cond:
                while not self._dirty and not self._done:
                    self._cond.wait()
                if self._done:
                    return
                wait = last + self.current - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                build, self._dirty = self._build, False
            if build is None:
                continue
            started = time.monotonic()
            try:
                self.reporter.progress(build())
            except Exception:  # noqa: BLE001 - progress is best effort; the final reply always lands
                log.warning("progress update failed", exc_info=True)
            took = time.monotonic() - started
            reporter = self.reporter
            retry = reporter.rate_limited_for() if isinstance(reporter, RateLimitedReporter) else None
            if retry or took > self.interval:
                self.slowed = True
                self.current = max(self.current, float(retry or 0), took * 2, self.interval * 2)
            self.updates += 1
            last = time.monotonic()

    def close(self) -> None:
        """Stop the thread (the caller delivers the final answer itself)."""
        with self._cond:
            self._done = True
            self._cond.notify()
        self._thread.join(timeout=5)
