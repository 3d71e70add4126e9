"""A container's log as de-framed byte blocks, read as fast as the engine writes it.

Why not the SDK's ``logs(stream=True)``: it yields one frame per log line, and over HTTP/1.1 each
frame is also one HTTP chunk that ``http.client`` de-chunks in Python; on a 1,000,000-line log that
per-line work took twice as long as the engine's own output (bench/README.md, diagnose_logs). Here
the request is sent as HTTP/1.0, so the engine answers with the plain multiplexed stream (no
chunking), read in 1 MiB ``recv`` calls; the 8-byte frame headers are removed in one pass per read
and one block of whole log lines is handed on. Memory: one read plus one partial frame.

Only plain ``unix://`` and ``tcp://`` engines are read this way (the deployment's socket proxy is
``tcp://``); TLS and SSH hosts use the SDK's stream, which gives the same bytes more slowly.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import docker

from bot.errors import DockerOpsError

READ_SIZE = 1024 * 1024
_HEADER_LIMIT = 64 * 1024


def _connect(client: docker.DockerClient, timeout: float | None) -> socket.socket | None:
    """A raw socket to the engine, or None when the host kind is not one we read raw."""
    api = client.api
    base = str(getattr(api, "base_url", ""))
    if base.startswith("http+docker://"):
        adapter = None
        with contextlib.suppress(Exception):
            adapter = api.get_adapter(base)
        path = getattr(adapter, "socket_path", None)
        if not isinstance(path, str) or not path:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock
    if base.startswith("http://"):
        parts = urlsplit(base)
        if not parts.hostname:
            return None
        return socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout)
    return None


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and the body bytes already received."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise DockerOpsError("The Docker engine closed the connection before answering the log request.")
        buf += data
        if len(buf) > _HEADER_LIMIT:
            raise DockerOpsError("The Docker engine's answer to the log request has an oversized header.")
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError) as exc:
        raise DockerOpsError(f"The Docker engine answered the log request with {lines[0][:80]!r}.") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest


def _error_text(sock: socket.socket, rest: bytes) -> str:
    body = rest
    with contextlib.suppress(OSError):
        while len(body) < 65536:
            data = sock.recv(65536)
            if not data:
                break
            body += data
    try:
        message = json.loads(body.decode("utf-8", "replace")).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or body[:200].decode("utf-8", "replace")).strip()


def demux(reads: Iterator[bytes]) -> Iterator[bytes]:
    """The multiplexed stream (8-byte header: stream, 0, 0, 0, big-endian size) → payload blocks.

    stdout and stderr payloads are kept in the order the engine sent them (as ``docker logs`` does).
    """
    pending = bytearray()
    for data in reads:
        pending += data
        n = len(pending)
        pos = 0
        parts: list[memoryview] = []
        view = memoryview(pending)
        try:
            while pos + 8 <= n:
                if pending[pos + 1] or pending[pos + 2] or pending[pos + 3] or pending[pos] > 2:
                    raise DockerOpsError("The Docker engine's log stream is not in the framing it announced.")
                end = pos + 8 + int.from_bytes(pending[pos + 4 : pos + 8], "big")
                if end > n:
                    break
                parts.append(view[pos + 8 : end])
                pos = end
            block = b"".join(parts)
        finally:
            parts.clear()
            view.release()
        del pending[:pos]
        if block:
            yield block
    if pending:
        raise DockerOpsError("The Docker engine's log stream ended inside a frame.")


def _socket_reads(sock: socket.socket, first: bytes) -> Iterator[bytes]:
    if first:
        yield first
    while True:
        data = sock.recv(READ_SIZE)
        if not data:
            return
        yield data


def raw_log_blocks(
    client: docker.DockerClient,
    container: str,
    params: dict[str, Any],
    *,
    tty: bool = False,
) -> Iterator[bytes] | None:
    """The container's log (``params``: stdout, stderr, timestamps, since, until, tail) as byte blocks of
    whole frames' payloads, or None when this engine is not reachable raw (use the SDK then).

    Connecting and the status line happen now (errors raise :class:`DockerOpsError` or ``OSError``);
    the body is read lazily. Closing the returned generator closes the connection, which stops the
    engine's work on the request.
    """
    timeout = getattr(client.api, "timeout", None)
    sock = _connect(client, float(timeout) if isinstance(timeout, int | float) else None)
    if sock is None:
        return None
    try:
        version = str(getattr(client.api, "api_version", "") or "").strip()
        prefix = f"/v{version}" if version and version[0].isdigit() else ""
        query = urlencode({k: _param(v) for k, v in params.items() if v is not None})
        path = f"{prefix}/containers/{quote(container, safe='')}/logs?{query}"
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\nUser-Agent: recover-bot\r\n\r\n".encode("ascii"))
        status, headers, rest = _read_head(sock)
        if status != 200:
            text = _error_text(sock, rest)
            if status == 404:
                raise docker.errors.NotFound(text or f"No such container: {container}")
            raise DockerOpsError(f"The Docker engine refused the log request (HTTP {status}): {text[:200]}")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise DockerOpsError("The Docker engine answered an HTTP/1.0 log request with chunked encoding.")
    except BaseException:
        sock.close()
        raise
    return _body(sock, rest, tty)


def _body(sock: socket.socket, rest: bytes, tty: bool) -> Iterator[bytes]:
    try:
        reads = _socket_reads(sock, rest)
        yield from (reads if tty else demux(reads))
    finally:
        sock.close()


def sdk_log_blocks(client: docker.DockerClient, container: str, params: dict[str, Any]) -> Iterator[bytes]:
    """The SDK's frame-per-line stream joined into larger blocks (for hosts not read raw)."""
    stream = client.api.logs(container, stream=True, follow=False, **params)
    try:
        block: list[bytes] = []
        size = 0
        for frame in stream:
            block.append(frame)
            size += len(frame)
            if size >= READ_SIZE:
                yield b"".join(block)
                block, size = [], 0
        if block:
            yield b"".join(block)
    finally:
        with contextlib.suppress(Exception):
            stream.close()


def _param(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
