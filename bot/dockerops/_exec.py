"""One ``docker exec`` with a deadline, through the low-level API.

Why low level: ``exec_run`` waits for the process however long it takes. The Docker API cannot kill
an exec'd process either, so past the deadline we stop *waiting*, read the exec's id and pid from
``exec inspect`` and report that the pass may still be running (the caller records the outcome as
unknown; R1.6 makes a later pass safe).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import docker
import requests

from bot.dockerops._engine import close_quietly, translate
from bot.format import as_int


@dataclass(frozen=True)
class ExecResult:
    """What one exec did. ``exit_code`` is None when it is not known (timeout, container gone)."""

    exec_id: str
    exit_code: int | None
    output: bytes
    output_bytes: int
    duration_s: float
    timed_out: bool = False
    container_gone: bool = False
    pid: int | None = None
    still_running: bool | None = None

    @property
    def truncated(self) -> bool:
        return self.output_bytes > len(self.output)

    @property
    def succeeded(self) -> bool:
        return not self.timed_out and not self.container_gone and self.exit_code == 0


class _Reader(threading.Thread):
    """Drains the exec's output stream, keeping at most ``cap`` bytes (the rest is only counted)."""

    def __init__(self, stream: Iterable[bytes], cap: int) -> None:
        super().__init__(name="dockerops-exec-reader", daemon=True)
        self.stream = stream
        self.cap = cap
        self.buffer = bytearray()
        self.total = 0
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            for chunk in self.stream:
                if not chunk:
                    continue
                self.total += len(chunk)
                room = self.cap - len(self.buffer)
                if room > 0:
                    self.buffer += chunk[:room]
        except BaseException as exc:  # noqa: BLE001 - reported to the waiting thread
            self.error = exc
        finally:
            self.done.set()


def run_exec(
    client: docker.DockerClient,
    container: str,
    argv: list[str],
    environment: dict[str, str],
    *,
    timeout: float,
    output_cap: int,
    host: str,
) -> ExecResult:
    """Exec ``argv`` (a list: no shell) in ``container`` (addressed by name) with extra ``environment``.

    Docker adds ``environment`` to the container's own environment, so the container keeps its
    installed settings (R1.3) and only the given variables are set or overridden.
    """
    api = client.api
    gone = f"The reconciler container {container} is gone (removed or recreated); find it again and rerun the command."
    started = time.monotonic()
    with translate(f"Starting the exec in {container}", host, not_found=gone):
        created = api.exec_create(container, list(argv), stdout=True, stderr=True, environment=dict(environment))
        exec_id = str(created["Id"])
        stream = api.exec_start(exec_id, stream=True)
    reader = _Reader(stream, output_cap)
    reader.start()
    finished = reader.done.wait(timeout)
    if not finished:
        pid, running = _inspect_quietly(api, exec_id)
        close_quietly(stream)
        return ExecResult(
            exec_id=exec_id,
            exit_code=None,
            output=bytes(reader.buffer),
            output_bytes=reader.total,
            duration_s=time.monotonic() - started,
            timed_out=True,
            pid=pid,
            still_running=running,
        )
    duration = time.monotonic() - started
    close_quietly(stream)
    # The stream can end a moment before the daemon records the exit code: poll briefly.
    deadline = time.monotonic() + 10.0
    while True:
        info = _exec_info(api, exec_id, host)
        if info is None:
            return ExecResult(
                exec_id=exec_id,
                exit_code=None,
                output=bytes(reader.buffer),
                output_bytes=reader.total,
                duration_s=duration,
                container_gone=True,
            )
        if not info.get("Running") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    exit_code = info.get("ExitCode")
    running = bool(info.get("Running"))
    if running:
        # The output ended but the process did not: treat like a timeout, never as a success.
        return ExecResult(
            exec_id=exec_id,
            exit_code=None,
            output=bytes(reader.buffer),
            output_bytes=reader.total,
            duration_s=duration,
            timed_out=True,
            pid=as_int(info.get("Pid")),
            still_running=True,
        )
    code = as_int(exit_code)
    # A container removed or stopped under the exec ends its stream like a normal exit does, with
    # the exec killed by a signal (exit >= 128): tell that apart from a pass that failed by itself.
    gone_now = (code is None or code >= 128) and _container_down(api, container)
    return ExecResult(
        exec_id=exec_id,
        exit_code=None if gone_now else code,
        output=bytes(reader.buffer),
        output_bytes=reader.total,
        duration_s=duration,
        container_gone=gone_now,
        pid=as_int(info.get("Pid")),
        still_running=False,
    )


def _exec_info(api: docker.APIClient, exec_id: str, host: str) -> dict[str, Any] | None:
    """``exec inspect``; None when the exec is gone (its container was removed)."""
    try:
        info = api.exec_inspect(exec_id)
    except docker.errors.NotFound:
        return None
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
        with translate(f"Reading the result of exec {exec_id[:12]}", host):
            raise
    return dict(info)


def _inspect_quietly(api: docker.APIClient, exec_id: str) -> tuple[int | None, bool | None]:
    try:
        info = api.exec_inspect(exec_id)
    except (docker.errors.DockerException, OSError):
        return None, None
    return as_int(info.get("Pid")), bool(info.get("Running"))


def _container_down(api: docker.APIClient, container: str, wait: float = 5.0) -> bool:
    """Did the container stop or go away under the exec? (A kill arrives before the removal shows.)"""
    deadline = time.monotonic() + wait
    while True:
        try:
            state = api.inspect_container(container).get("State") or {}
        except docker.errors.NotFound:
            return True
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            return False
        if not state.get("Running") or state.get("Status") in ("removing", "exited", "dead"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
