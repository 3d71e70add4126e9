"""Total deadlines for control-host calls, enforced on every socket operation.

httpx's timeouts apply to each read: a host that answers a few bytes a second never trips them, and a
work thread waits forever. Here a deadline (a ``time.monotonic()`` instant) lives in a context variable;
the network backend under httpx clamps every connect, read and write to the time left, and fails the
operation once it has passed. So one request — headers, body, everything — ends by its deadline, and a
caller (diagnose, with the runbook's budget) can bound a whole call, retries included, by nesting one.
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
import typing
import urllib.parse
import urllib.request
from collections.abc import Iterator

import httpcore
import httpx

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("controlhost_deadline", default=None)


def current_deadline() -> float | None:
    """The innermost deadline in force (monotonic seconds), or None."""
    return _DEADLINE.get()


def remaining() -> float | None:
    """Seconds left before the deadline (never negative), or None without one."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


@contextlib.contextmanager
def deadline_in(seconds: float | None) -> Iterator[float | None]:
    """Run the block under a deadline ``seconds`` from now; an outer, earlier deadline still wins."""
    outer = _DEADLINE.get()
    if seconds is None:
        yield outer
        return
    mine = time.monotonic() + max(0.0, seconds)
    effective = mine if outer is None else min(outer, mine)
    token = _DEADLINE.set(effective)
    try:
        yield effective
    finally:
        _DEADLINE.reset(token)


@contextlib.contextmanager
def deadline_at(instant: float | None) -> Iterator[float | None]:
    """Run the block under an absolute monotonic deadline (e.g. diagnose's), nested like :func:`deadline_in`."""
    outer = _DEADLINE.get()
    if instant is None:
        yield outer
        return
    effective = instant if outer is None else min(outer, instant)
    token = _DEADLINE.set(effective)
    try:
        yield effective
    finally:
        _DEADLINE.reset(token)


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    left = remaining()
    if left is None:
        return timeout
    if left <= 0:
        raise error("the request's total deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation is bounded by the caller's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend with every socket operation clamped to the context's deadline."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, _clamp(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: typing.Iterable[typing.Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, _clamp(timeout, httpcore.ConnectTimeout), socket_options)
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_transport(base_url: str, *, verify: ssl.SSLContext | bool = True) -> httpx.HTTPTransport:
    """An httpx transport whose connections use :class:`DeadlineBackend`.

    httpx offers no way to pass a network backend, so the transport's connection pool gets it after
    construction (pinned by tests/controlhost/test_hostile.py). Passing a transport turns off httpx's
    own reading of ``HTTP(S)_PROXY``/``NO_PROXY``, so the proxy for ``base_url`` is looked up here.
    """
    transport = httpx.HTTPTransport(verify=verify, proxy=env_proxy(base_url))
    pool = transport._pool  # noqa: SLF001 - see the docstring
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError("httpx's connection pool changed shape: the total deadline cannot be enforced")
    pool._network_backend = DeadlineBackend()  # noqa: SLF001
    return transport


def env_proxy(base_url: str) -> str | None:
    """The proxy the environment names for ``base_url`` (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``,
    honouring ``NO_PROXY``), as httpx itself would use it; None for none."""
    url = urllib.parse.urlsplit(base_url)
    proxies = urllib.request.getproxies_environment()
    host = (url.hostname or "").lower()
    if not host or _bypassed(host, proxies.get("no", "")):
        return None
    return proxies.get(url.scheme) or proxies.get("all") or None


def _bypassed(host: str, no_proxy: str) -> bool:
    """NO_PROXY: ``*``, or hosts/domains (``example.internal`` and ``.example.internal`` both cover
    the domain and its subdomains)."""
    for entry in (e.strip().lower().lstrip(".") for e in no_proxy.split(",")):
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return True
    return False
