"""Worker log lines of one session, read from the installation's worker containers.

Why it looks like this:
- Containers are selected by the session-id label, running *and* exited (an exited worker keeps its
  log until the scheduler removes it); lines are still filtered by session id because a worker may
  log other ids (docs/control-host-api.md, "Docker").
- Logs are streamed raw (bot.dockerops._stream: HTTP/1.0, 1 MiB reads, frames removed in one pass)
  through the shared scanner of ``bot.logs``: memory stays bounded by one read plus one line.
  ``lines_for_session`` reads forwards within a byte budget; ``segments_for_session`` (diagnose)
  reads the newest part first and has no byte budget: the caller stops it.
- The window is measured on the Docker host's clock (``/info`` SystemTime), because the timestamps
  Docker puts on log lines are the host's, not ours.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections.abc import Callable, Generator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import docker

from bot.dockerops._config import PROJECT_NAME, WorkerLogConfig
from bot.dockerops._engine import (
    DockerClientFactory,
    client_host,
    connect,
    daemon_now,
    parse_docker_time,
    translate,
)
from bot.dockerops._stream import raw_log_blocks, sdk_log_blocks
from bot.errors import DockerOpsError
from bot.logs import (
    ID_PATTERN,
    Coverage,
    LogLine,
    LogScan,
    LogSegment,
    LogSourceError,
    ScanStats,
    scan_session_lines,
    track_blocks,
    until_line,
)

_SESSION_ID = re.compile(f"^{ID_PATTERN}$")
UNTIL_MARGIN_SECONDS = 300
#: Reading backwards: the first ``tail`` step, and how much larger each next step is.
FIRST_TAIL_LINES = 16384
TAIL_GROWTH = 4
MAX_TAIL_STEPS = 16  # 16384 × 4**15 lines: far beyond any log; a bound, not a setting


class DockerLogSourceError(DockerOpsError, LogSourceError):
    """The Docker log source cannot be read (diagnose shows it and goes on without Docker lines)."""


class DockerLogSource:
    """``bot.logs.LogSource`` over the worker containers of one installation (compose project)."""

    name = "docker"

    def __init__(
        self,
        *,
        installation: str | None,
        config: WorkerLogConfig | None = None,
        docker_client_factory: DockerClientFactory = docker.from_env,
    ) -> None:
        self.installation = installation
        self.config = config or WorkerLogConfig()
        self.docker_client_factory = docker_client_factory
        #: Filled by each lines_for_session call: the containers read, for "what was searched" output.
        self.last_containers: list[str] = []

    def describe(self) -> str:
        cfg = self.config
        return (
            f"Docker: {cfg.service} containers of project "
            f"{self.installation or '(RECOVER_INSTALLATION unset)'}, label {cfg.session_label}=<session>, "
            f"running and exited, last {cfg.window_seconds // 3600} h on the Docker host's clock"
        )

    def lines_for_session(
        self,
        session_id: str,
        *,
        since: datetime,
        until: datetime | None = None,
        byte_budget: int | None = None,
    ) -> LogScan:
        """The session's lines from every matching container, oldest container first.

        Connecting and listing happen now (errors surface at the call); the logs are read lazily as
        the returned :class:`LogScan` is iterated. ``stats.truncated`` says the byte budget cut it.
        """
        budget = self.config.byte_budget if byte_budget is None else byte_budget
        client, host, containers, start, end = self._select(session_id, since, until)
        stats = ScanStats()
        return LogScan(self._scan(client, host, containers, session_id, start, end, budget, stats), stats)

    def _select(
        self, session_id: str, since: datetime, until: datetime | None
    ) -> tuple[docker.DockerClient, str, list[dict[str, Any]], datetime, datetime | None]:
        """Connect, bound the window on the Docker host's clock, list the session's containers."""
        cfg = self.config
        project = self.installation
        if not project or not PROJECT_NAME.match(project):
            raise DockerLogSourceError(
                "RECOVER_INSTALLATION is not set to a compose project name: cannot select worker containers."
            )
        if not isinstance(session_id, str) or not _SESSION_ID.match(session_id):
            raise DockerLogSourceError(f"{str(session_id)[:80]!r} is not a session id.")
        try:
            client = connect(self.docker_client_factory)
        except DockerOpsError as exc:
            raise DockerLogSourceError(exc.message, hint=exc.hint) from exc
        host = client_host(client, self.docker_client_factory)
        try:
            now = daemon_now(client, host)
            start = _utc(since)
            floor = now - timedelta(seconds=cfg.window_seconds)
            start = max(start, floor)
            end = min(_utc(until), now) if until is not None else None
            labels = cfg.labels(project, session_id)
            with translate("Listing the session's worker containers", host):
                containers = client.api.containers(all=True, filters={"label": labels})
        except DockerOpsError as exc:
            with contextlib.suppress(Exception):
                client.close()
            raise DockerLogSourceError(exc.message, hint=exc.hint) from exc
        containers.sort(key=lambda c: (c.get("Created") or 0, _name(c)))
        self.last_containers = [_name(c) for c in containers]
        return client, host, containers, start, end

    def _scan(
        self,
        client: docker.DockerClient,
        host: str,
        containers: list[dict[str, Any]],
        session_id: str,
        start: datetime,
        end: datetime | None,
        budget: int,
        stats: ScanStats,
    ) -> Iterator[LogLine]:
        try:
            for container in containers:
                name = _name(container)
                left = budget - stats.bytes_read
                if left <= 0:
                    stats.truncated = True
                    break
                try:
                    blocks = self._blocks(client, host, name, _window_params(start, end))
                except DockerOpsError as exc:
                    # A worker removed between listing and reading: say so, read the others.
                    stats.problems.append(f"{name}: {exc.message}")
                    continue
                try:
                    yield from scan_session_lines(
                        blocks,
                        session_id,
                        since=start,
                        until=end,
                        byte_budget=left,
                        source=f"docker:{name}",
                        has_docker_timestamps=True,
                        stats=stats,
                    )
                finally:
                    blocks.close()
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _blocks(
        self,
        client: docker.DockerClient,
        host: str,
        name: str,
        params: dict[str, Any],
        *,
        tty: bool | None = None,
    ) -> Generator[bytes, None, None]:
        """The container's log as byte blocks: the raw stream where the host allows it (see _stream)."""
        full = {"stdout": True, "stderr": True, "timestamps": True, **params}
        with translate(f"Reading the logs of {name}", host):
            if tty is None:
                tty = bool((client.api.inspect_container(name).get("Config") or {}).get("Tty"))
            raw = raw_log_blocks(client, name, full, tty=tty)
            if raw is not None:
                return _translated(raw, name, host)
            sdk = {k: v for k, v in full.items() if k not in ("stdout", "stderr", "timestamps")}
            return _translated(
                sdk_log_blocks(client, name, {"stdout": True, "stderr": True, "timestamps": True, **sdk}),
                name,
                host,
            )

    # -- segments: newest first, for diagnose's first answer -----------------------------------------

    def segments_for_session(
        self,
        session_id: str,
        *,
        since: datetime,
        until: datetime | None = None,
        focus: tuple[datetime, datetime] | None = None,
        on_bytes: Callable[[int], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LogSegment]:
        """The session's worker logs as segments, the part nearest the turn first.

        Why this order and not ``since``/``until`` windows: the json-file driver has no index, so a
        window read decodes the whole file up to the window's end (measured: a window over the last
        tenth of a 1,000,000-line log took as long as the whole log), while ``tail`` seeks from the end
        (the last 1,000 lines: 30 ms). So for an exited worker whose ``focus`` (the turn's window) is in
        the later half of its life, or with no focus, the newest container is read backwards in growing
        ``tail`` steps (16,384 lines, then 4× more each step, each step read only up to where the
        previous began): every line is decoded once and the newest come first. A running worker, or a
        focus in the earlier half, is read forwards. Older containers follow, newest first.
        """
        client, host, containers, start, end = self._select(session_id, since, until)
        try:
            inspected = []
            for container in containers:
                name = _name(container)
                try:
                    with translate(f"Inspecting {name}", host):
                        inspected.append((name, client.api.inspect_container(name)))
                except DockerOpsError:
                    continue  # gone since the listing: nothing to read
            order = list(range(len(inspected)))[::-1]  # newest first
            for index in order:
                name, info = inspected[index]
                state = info.get("State") or {}
                tty = bool((info.get("Config") or {}).get("Tty"))
                backwards = not state.get("Running") and end is None and _focus_late(focus, state)
                if backwards:
                    yield from self._tail_segments(client, host, name, index, tty, session_id, start, on_bytes, stop)
                else:
                    coverage = Coverage(source=f"docker:{name}")
                    blocks = self._blocks(client, host, name, _window_params(start, end), tty=tty)
                    yield self._segment(
                        (index, 0), blocks, coverage, session_id, start, end, on_bytes, stop, "forwards"
                    )
                if stop is not None and stop.is_set():
                    return
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _tail_segments(
        self,
        client: docker.DockerClient,
        host: str,
        name: str,
        index: int,
        tty: bool,
        session_id: str,
        start: datetime,
        on_bytes: Callable[[int], None] | None,
        stop: threading.Event | None,
    ) -> Iterator[LogSegment]:
        done = 0
        step = FIRST_TAIL_LINES
        marker: bytes | None = None
        for k in range(MAX_TAIL_STEPS):
            want = step - done
            params = {**_window_params(start, None), "tail": step}
            blocks: Iterator[bytes] = self._blocks(client, host, name, params, tty=tty)
            if marker:
                blocks = until_line(blocks, marker)
            coverage = Coverage(source=f"docker:{name}")
            label = "newest lines" if done == 0 else f"lines {done + 1:,}–{step:,} from the end"
            yield self._segment((index, -k), blocks, coverage, session_id, start, None, on_bytes, stop, label)
            if (stop is not None and stop.is_set()) or coverage.lines < want or not coverage.first_line:
                return  # stopped, or the container's first line (or the window's) was reached
            marker = coverage.first_line
            done = step
            step *= TAIL_GROWTH

    def _segment(
        self,
        rank: tuple[int, ...],
        blocks: Iterator[bytes],
        coverage: Coverage,
        session_id: str,
        start: datetime,
        end: datetime | None,
        on_bytes: Callable[[int], None] | None,
        stop: threading.Event | None,
        label: str,
    ) -> LogSegment:
        stats = ScanStats()
        scan = scan_session_lines(
            track_blocks(blocks, coverage, on_bytes=on_bytes, stop=stop),
            session_id,
            since=start,
            until=end,
            byte_budget=2**62,
            source=coverage.source,
            has_docker_timestamps=True,
            stats=stats,
        )
        return LogSegment(rank=rank, scan=scan, coverage=coverage, label=label)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _name(container: dict[str, Any]) -> str:
    names = container.get("Names") or []
    return str(names[0]).lstrip("/") if names else str(container.get("Id", "?"))[:12]


def _window_params(start: datetime, end: datetime | None) -> dict[str, Any]:
    params: dict[str, Any] = {"since": max(1, math.floor(start.timestamp()))}
    if end is not None:
        # Docker filters on the time a line was *printed*, which may come a little after the time
        # the line carries; the scanner applies ``until`` exactly.
        params["until"] = max(1, math.ceil(end.timestamp()) + UNTIL_MARGIN_SECONDS)
    return params


def _focus_late(focus: tuple[datetime, datetime] | None, state: dict[str, Any]) -> bool:
    """Is the focus in the later half of the container's life (or is there no focus)?"""
    if focus is None:
        return True
    started = parse_docker_time(state.get("StartedAt"))
    finished = parse_docker_time(state.get("FinishedAt"))
    if started is None or finished is None or finished <= started:
        return True
    middle = started + (finished - started) / 2
    return _utc(focus[1]) >= middle


def _translated(blocks: Iterator[bytes], name: str, host: str) -> Generator[bytes, None, None]:
    """Errors while the body streams become the same one-line DockerOpsError as at the request."""
    try:
        with translate(f"Reading the logs of {name}", host):
            yield from blocks
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            close()
