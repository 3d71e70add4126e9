"""Reconciler access: find the one reconciler container, read its status file and its pass lines (R1.3, R1.4).

Why it looks like this:
- The reconciler is found by labels (R1.3) and then addressed by its compose *name*, so a socket
  proxy can pin exec to ``<project>-reconciler-<n>``; nobody types a container id.
- The status file is read through the archive API (never an exec of ``cat``) and capped, so a huge
  file is not read into memory.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import docker

from bot.dockerops._config import ReconcilerConfig
from bot.dockerops._engine import close_quietly, parse_docker_time, translate
from bot.errors import DockerOpsError
from bot.redact import redact

#: A status file bigger than this is not a status file; it is not read into memory.
STATUS_FILE_CAP = 256 * 1024


@dataclass(frozen=True)
class ReconcilerTarget:
    """The one running reconciler of the installation, by name (the socket proxy pins exec to it)."""

    name: str
    id: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class PassLine:
    """A ``Reconciler pass completed`` / ``failed`` log line and its time (Docker's, else the line's)."""

    kind: str
    at: datetime | None
    text: str


def find_reconciler(client: docker.DockerClient, host: str, cfg: ReconcilerConfig, project: str) -> ReconcilerTarget:
    """Exactly one running container with the project and service labels (R1.3), else an error."""
    labels = cfg.labels(project)
    searched = f"labels {' and '.join(labels)}, status {cfg.status}"
    with translate("Looking for the reconciler container", host):
        found = client.api.containers(filters={"label": labels, "status": cfg.status})
    if not found:
        with translate("Looking for the reconciler container", host):
            others = client.api.containers(all=True, filters={"label": labels})
        seen = ", ".join(f"{_name(c)} ({c.get('State') or c.get('Status')})" for c in others)
        raise DockerOpsError(
            f"No reconciler found: no container with {searched}.",
            hint=(
                f"Containers with those labels that are not {cfg.status}: {seen}."
                if others
                else "Check RECOVER_INSTALLATION (the compose project) and that the reconciler is up."
            ),
        )
    if len(found) > 1:
        names = ", ".join(sorted(_name(c) for c in found))
        raise DockerOpsError(
            f"{len(found)} containers match {searched}: {names}. Expected exactly one reconciler.",
            hint="Stop the extra one (or fix its labels); the bot will not guess which one to exec in.",
        )
    name = _name(found[0])
    if not cfg.name_regex(project).match(name):
        expected = cfg.name_pattern.format(project=project, n="<n>")
        raise DockerOpsError(
            f"The reconciler container is named {name!r}, not {expected}: the socket proxy allows exec "
            "only on the compose name.",
            hint="Start it with docker compose (it names containers <project>-<service>-<n>).",
        )
    return ReconcilerTarget(name=name, id=str(found[0].get("Id", "")), labels=tuple(labels))


def read_status_file(
    client: docker.DockerClient, host: str, cfg: ReconcilerConfig, target: ReconcilerTarget
) -> tuple[str | None, str]:
    """The status file's text, else ``None`` and why: a tar stream of one file from the archive API."""
    path = cfg.status_path
    try:
        with translate(f"Reading {path} from {target.name}", host):
            stream, stat = client.api.get_archive(target.name, path)
    except DockerOpsError as exc:
        cause = exc.__cause__
        if isinstance(cause, docker.errors.NotFound) and "no such container" not in str(cause).lower():
            return (
                None,
                "no status file yet: the reconciler has not written one since the container started",
            )
        raise
    size = int(stat.get("size") or 0) if isinstance(stat, dict) else 0
    if size > STATUS_FILE_CAP:
        close_quietly(stream)
        return None, f"the status file is {size} bytes, too large to show (limit {STATUS_FILE_CAP})"
    data = bytearray()
    with translate(f"Reading {path} from {target.name}", host):
        for chunk in stream:
            data += chunk
            if len(data) > STATUS_FILE_CAP + 64 * 1024:
                break
    close_quietly(stream)
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            extracted = tar.extractfile(member) if member is not None else None
            content = extracted.read(STATUS_FILE_CAP) if extracted is not None else None
    except tarfile.TarError as exc:
        return None, f"the engine's archive of the status file could not be read ({exc})"
    if content is None:
        return None, "the status path is not a regular file"
    return redact(content.decode("utf-8", errors="replace")), ""


def last_pass_lines(
    client: docker.DockerClient, host: str, cfg: ReconcilerConfig, target: ReconcilerTarget
) -> tuple[PassLine | None, PassLine | None]:
    """The latest completed and failed pass lines among the log's last ``status_log_tail`` lines (R1.4)."""
    completed: PassLine | None = None
    failed: PassLine | None = None
    with translate(f"Reading the logs of {target.name}", host):
        stream = client.api.logs(
            target.name,
            stdout=True,
            stderr=True,
            timestamps=True,
            tail=cfg.status_log_tail,
            stream=True,
            follow=False,  # the SDK follows a streamed log by default: never wait for new lines
        )
        try:
            for raw in _lines_of(stream):
                text = raw.decode("utf-8", errors="replace").rstrip("\r")
                if cfg.completed_pattern in text:
                    completed = _pass_line("completed", text)
                elif cfg.failed_pattern in text:
                    failed = _pass_line("failed", text)
        finally:
            close_quietly(stream)
    return completed, failed


def later(a: PassLine, b: PassLine) -> bool:
    """Whether ``a`` is known to come after ``b`` (both times known)."""
    return a.at is not None and b.at is not None and a.at > b.at


def _name(container: dict[str, Any]) -> str:
    names = container.get("Names") or []
    return str(names[0]).lstrip("/") if names else str(container.get("Id", "?"))[:12]


def _lines_of(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Whole lines out of a byte stream whose chunks do not follow line ends."""
    carry = b""
    for chunk in chunks:
        if not chunk:
            continue
        data = carry + chunk
        parts = data.split(b"\n")
        carry = parts.pop()
        yield from parts
        if len(carry) > 1024 * 1024:  # one absurd line: keep its start only
            yield carry
            carry = b""
    if carry:
        yield carry


_DOCKER_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s(.*)$")


def _pass_line(kind: str, text: str) -> PassLine:
    """Docker's own timestamp first (it is the host's clock); else the time the line starts with."""
    m = _DOCKER_TS.match(text)
    if not m:
        return PassLine(kind, None, text)
    at = parse_docker_time(m.group(1))
    rest = m.group(2)
    if at is None:
        inner = _DOCKER_TS.match(rest)
        at = parse_docker_time(inner.group(1)) if inner else None
    return PassLine(kind, at, rest)
