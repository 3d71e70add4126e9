"""Starts the worker process of ``recover-bot serve``, restarts it when it dies, stops it with serve.

The serving process hands each committed inbox item on with one byte on the worker's stdin (a
non-blocking write: a full pipe only means the worker has wake-ups pending anyway). When the worker
exits on its own (killed, crashed) its claims are marked orphaned at once (``Inbox.mark_dead``) and a
new worker starts after a short, growing pause; the new one finds the queued items and reports the
interrupted ones (see :mod:`bot.slack.worker`). ``/healthz`` shows :meth:`WorkerSupervisor.health`
(and how many unreadable inbox rows were quarantined).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path

from pydantic import SecretStr

from bot.settings import Settings
from bot.slack.fleet_health import health_lines as installation_health_lines
from bot.slack.inbox import Inbox
from bot.slack.watch_health import watch_health_lines

log = logging.getLogger("recover_bot.slack.supervisor")

STOP_GRACE = 15.0  # seconds a stopping worker gets to finish the items it runs
MAX_BACKOFF = 5.0
CRASH_LOOP = 3  # this many exits within CRASH_WINDOW seconds: /healthz says the worker crash-loops
CRASH_WINDOW = 60.0


def settings_line(settings: Settings, worker_id: str) -> bytes:
    """The worker's first stdin line: its id and the settings, secrets revealed (a pipe, not argv)."""
    values: dict[str, object] = {}
    for name, value in settings.model_dump().items():
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, Path):
            value = str(value)
        values[name] = value
    return (json.dumps({"worker": worker_id, "settings": values}) + "\n").encode()


class WorkerSupervisor:
    """One worker process at a time, kept alive until :meth:`stop`."""

    def __init__(self, settings: Settings, inbox: Inbox, *, python: str | None = None) -> None:
        self.settings = settings
        self.inbox = inbox
        self.python = python or sys.executable
        self.proc: subprocess.Popen[bytes] | None = None
        self.worker_id = ""
        self.starts = 0
        self._exits: deque[float] = deque(maxlen=CRASH_LOOP)  # when the latest workers exited on their own
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> WorkerSupervisor:
        self._spawn()
        self._thread = threading.Thread(target=self._watch, name="recover-supervisor", daemon=True)
        self._thread.start()
        return self

    def _spawn(self) -> None:
        worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # -P: the current folder never shadows the installed package.
        proc = subprocess.Popen([self.python, "-P", "-m", "bot.slack.worker"], stdin=subprocess.PIPE)
        assert proc.stdin is not None
        proc.stdin.write(settings_line(self.settings, worker_id))
        proc.stdin.flush()
        os.set_blocking(proc.stdin.fileno(), False)
        with self._lock:
            self.proc, self.worker_id = proc, worker_id
            self.starts += 1
        log.info("worker process %d started (%s)", proc.pid, worker_id)

    def wake(self, item_id: int = 0) -> None:
        """A new item is committed: tell the worker (never blocks the ack path)."""
        proc = self.proc
        if proc is None or proc.stdin is None:
            return
        with contextlib.suppress(BlockingIOError, BrokenPipeError, ValueError, OSError):
            os.write(proc.stdin.fileno(), b"\n")

    def _watch(self) -> None:
        backoff = 0.2
        while not self._stopping.is_set():
            proc = self.proc
            assert proc is not None
            started = time.monotonic()
            code = proc.wait()
            if self._stopping.is_set():
                return
            log.warning("worker process %d exited (status %s): starting a new one", proc.pid, code)
            self._exits.append(time.monotonic())
            with contextlib.suppress(Exception):
                self.inbox.mark_dead(self.worker_id)
            backoff = 0.2 if time.monotonic() - started > 30 else min(MAX_BACKOFF, backoff * 2)
            if self._stopping.wait(backoff):
                return
            try:
                self._spawn()
            except OSError as exc:
                log.error("cannot start the worker process: %s", exc)

    def alive(self) -> bool:
        proc = self.proc
        return proc is not None and proc.poll() is None

    def crash_loop(self) -> int:
        """How many times the worker exited in the last ``CRASH_WINDOW`` s, when that is a loop (else 0).

        Why: a worker that dies again after every start is alive most of the time it is looked at;
        the items it claims end ``interrupted`` one batch after another."""
        recent = [t for t in list(self._exits) if time.monotonic() - t < CRASH_WINDOW]
        return len(recent) if len(recent) >= CRASH_LOOP else 0

    def health(self) -> tuple[bool, list[str]]:
        """For ``/healthz``: the worker is alive (and not crash-looping), how many items wait, how
        often it was started, how many unreadable rows were quarantined."""
        alive = self.alive()
        looping = self.crash_loop()
        try:
            depth = str(self.inbox.depth())
        except Exception:  # noqa: BLE001 - a locked or missing store is shown, not raised
            depth = "unknown"
        pid = self.proc.pid if self.proc is not None else "-"
        state = "alive" if alive else "down"
        if looping:
            state = f"crash-looping (exited {looping}× in {CRASH_WINDOW:.0f} s)"
        lines = [f"worker: {state} (pid {pid}, started {self.starts}×), queue depth: {depth}"]
        try:
            count, latest = self.inbox.quarantined()
        except Exception:  # noqa: BLE001 - as above
            count, latest = 0, None
        if count:
            # Reported, not failed: the other deliveries run; a restart would not mend the row.
            lines.append(f"inbox: {count} quarantined (latest #{latest}): unreadable deliveries, not run; see the log")
        # Reported, not failed: an unreachable control host is not mended by restarting the bot.
        lines.extend(watch_health_lines(self.settings, self.inbox.store))
        lines.extend(installation_health_lines(self.settings))  # each installation's own figures
        return alive and not looping, lines

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop the worker: end of input and SIGTERM, then SIGKILL after ``grace`` seconds."""
        self._stopping.set()
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        with contextlib.suppress(Exception):
            self.inbox.mark_dead(self.worker_id)
        if self._thread is not None:
            self._thread.join(timeout=5)
