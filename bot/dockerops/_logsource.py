"""Worker log lines of one session, read from the installation's worker containers.

Why it looks like this:
- Containers are selected by the session-id label, running *and* exited (an exited worker keeps its
  log until the scheduler removes it); lines are still filtered by session id because a worker may
  log other ids (docs/control-host-api.md, "Docker").
- Logs are streamed (``logs(stream=True, timestamps=True, since=…)``) through the shared scanner of
  ``bot.logs``: memory stays bounded by one chunk plus one line, and a byte budget stops the scan.
- The window is measured on the Docker host's clock (``/info`` SystemTime), because the timestamps
  Docker puts on log lines are the host's, not ours.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import docker

from bot.dockerops._config import PROJECT_NAME, WorkerLogConfig
from bot.dockerops._engine import DockerClientFactory, client_host, connect, daemon_now, translate
from bot.errors import DockerOpsError
from bot.logs import ID_PATTERN, LogLine, LogScan, LogSourceError, ScanStats, scan_session_lines

_SESSION_ID = re.compile(f"^{ID_PATTERN}$")
UNTIL_MARGIN_SECONDS = 300


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
        cfg = self.config
        project = self.installation
        if not project or not PROJECT_NAME.match(project):
            raise DockerLogSourceError(
                "RECOVER_INSTALLATION is not set to a compose project name: cannot select worker containers."
            )
        if not isinstance(session_id, str) or not _SESSION_ID.match(session_id):
            raise DockerLogSourceError(f"{str(session_id)[:80]!r} is not a session id.")
        budget = cfg.byte_budget if byte_budget is None else byte_budget
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
        stats = ScanStats()
        return LogScan(self._scan(client, host, containers, session_id, start, end, budget, stats), stats)

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
                kwargs: dict[str, Any] = {"since": max(1, math.floor(start.timestamp()))}
                if end is not None:
                    # Docker filters on the time a line was *printed*, which may come a little after
                    # the time the line carries; the scanner applies ``until`` exactly.
                    kwargs["until"] = max(1, math.ceil(end.timestamp()) + UNTIL_MARGIN_SECONDS)
                try:
                    with translate(f"Reading the logs of {name}", host):
                        stream = client.api.logs(
                            name,
                            stdout=True,
                            stderr=True,
                            timestamps=True,
                            stream=True,
                            follow=False,
                            **kwargs,
                        )
                except DockerOpsError as exc:
                    # A worker removed between listing and reading: say so, read the others.
                    stats.problems.append(f"{name}: {exc.message}")
                    continue
                try:
                    yield from scan_session_lines(
                        stream,
                        session_id,
                        since=start,
                        until=end,
                        byte_budget=left,
                        source=f"docker:{name}",
                        has_docker_timestamps=True,
                        stats=stats,
                    )
                finally:
                    with contextlib.suppress(Exception):
                        stream.close()
        finally:
            with contextlib.suppress(Exception):
                client.close()


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _name(container: dict[str, Any]) -> str:
    names = container.get("Names") or []
    return str(names[0]).lstrip("/") if names else str(container.get("Id", "?"))[:12]
