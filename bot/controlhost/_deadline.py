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
    with deadline_at(None if seconds is None else time.monotonic() + max(0.0, seconds)) as effective:
        yield effective


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


class DeadlineTransport(httpx.BaseTransport):
    """httpx's transport interface over an httpcore pool built here with :class:`DeadlineBackend`.

    Why a transport of our own: httpx builds its pool itself and takes no network backend, and httpcore
    takes one as a plain argument. Passing a transport turns off httpx's own reading of
    ``HTTP(S)_PROXY``/``NO_PROXY``, so the proxy for ``base_url`` is looked up here (:func:`env_proxy`).
    httpcore's errors are raised as httpx's, as httpx's own transport does, so callers see one kind.
    """

    def __init__(self, base_url: str, *, verify: ssl.SSLContext | bool = True) -> None:
        context = httpx.create_ssl_context(verify=verify)
        backend = self.network_backend = DeadlineBackend()  # what every connection goes through
        proxy_url = env_proxy(base_url)
        self.pool: httpcore.ConnectionPool  # a proxy's pool is one too
        if proxy_url is None:
            self.pool = httpcore.ConnectionPool(
                ssl_context=context,
                network_backend=backend,
                max_connections=MAX_CONNECTIONS,
                max_keepalive_connections=MAX_KEEPALIVE,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            )
            return
        proxy = httpx.Proxy(proxy_url)
        url = httpcore.URL(
            scheme=proxy.url.raw_scheme, host=proxy.url.raw_host, port=proxy.url.port, target=proxy.url.raw_path
        )
        if proxy.url.scheme in ("http", "https"):
            self.pool = httpcore.HTTPProxy(
                url,
                proxy_auth=proxy.raw_auth,
                proxy_headers=proxy.headers.raw,
                ssl_context=context,
                network_backend=backend,
                max_connections=MAX_CONNECTIONS,
                max_keepalive_connections=MAX_KEEPALIVE,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            )
        elif proxy.url.scheme in ("socks5", "socks5h"):
            self.pool = httpcore.SOCKSProxy(
                url,
                proxy_auth=proxy.raw_auth,
                ssl_context=context,
                network_backend=backend,
                max_connections=MAX_CONNECTIONS,
                max_keepalive_connections=MAX_KEEPALIVE,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            )
        else:
            raise ValueError(f"the proxy for {base_url} is {proxy.url.scheme}://…; use http, https or socks5")

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            answer = self.pool.handle_request(core)
        assert isinstance(answer.stream, typing.Iterable)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        with _as_httpx_errors():
            self.pool.close()


MAX_CONNECTIONS = 100  # httpx's defaults, as the client had them before it built its own transport
MAX_KEEPALIVE = 20
KEEPALIVE_EXPIRY = 5.0

_ERRORS: list[tuple[type[Exception], type[httpx.HTTPError]]] = [
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
]


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    """An httpcore error raised as the most specific httpx error of its kind."""
    try:
        yield
    except Exception as exc:
        mapped: type[httpx.HTTPError] | None = None
        for core, ours in _ERRORS:
            if isinstance(exc, core) and (mapped is None or issubclass(ours, mapped)):
                mapped = ours
        if mapped is None:
            raise
        raise mapped(str(exc)) from exc


class _Body(httpx.SyncByteStream):
    def __init__(self, inner: typing.Iterable[bytes]) -> None:
        self._inner = inner

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx_errors():
            yield from self._inner

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            with _as_httpx_errors():
                close()


def deadline_transport(base_url: str, *, verify: ssl.SSLContext | bool = True) -> DeadlineTransport:
    """The control host client's transport: every socket operation under the total deadline."""
    return DeadlineTransport(base_url, verify=verify)


def env_proxy(base_url: str) -> str | None:
    """The proxy the environment names for ``base_url`` (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``,
    honouring ``NO_PROXY`` as the standard library reads it), as httpx itself would use it; None for none."""
    url = urllib.parse.urlsplit(base_url)
    proxies = urllib.request.getproxies_environment()
    host = (url.hostname or "").lower()
    # proxy_bypass_environment: the standard library's reading of NO_PROXY (typeshed omits it).
    if not host or urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    return proxies.get(url.scheme) or proxies.get("all") or None
