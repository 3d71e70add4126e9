"""Background thread pools of the Slack front end, which know when they are idle (tests and shutdown
wait on them), and the guard that logs a background job's error instead of losing it."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("recover_bot.slack")

P = ParamSpec("P")
R = TypeVar("R")


class BackgroundWork:
    """A thread pool that knows when it is idle (tests and shutdown wait on it)."""

    def __init__(self, max_workers: int, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def submit(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Future[R | None]:
        future = self._pool.submit(logged, partial(fn, *args, **kwargs))
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)
            if not self._pending:
                self._idle.notify_all()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """True once nothing is queued or running."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._pending, timeout=timeout)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)


def logged(job: Callable[[], R]) -> R | None:
    # A background job has nobody to raise to: log (masked by the handlers' filter) instead of losing the
    # error silently.
    try:
        return job()
    except Exception:
        fn = job.func if isinstance(job, partial) else job
        log.error("background job %s failed:\n%s", getattr(fn, "__name__", fn), traceback.format_exc())
        return None
