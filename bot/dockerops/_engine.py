"""Talking to the Docker engine: connecting, translating its errors, reading the daemon's clock.

Every docker-SDK call of this package goes through :func:`translate` so a person never sees a raw
``requests``/``docker`` traceback: the engine unreachable or not configured, permission denied on the
socket, a socket proxy refusing a call and a container gone each get one actionable sentence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime

import docker
import docker.errors
import requests

from bot.dockerops._endpoint import DEFAULT_SOCKET, DockerEndpoint, tls_failure
from bot.errors import DockerOpsError
from bot.redact import redact

DockerClientFactory = Callable[[], docker.DockerClient]


def describe_host() -> str:
    """Where ``docker.from_env()`` would connect: DOCKER_HOST or the default socket."""
    return os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_permission_problem(exc: BaseException) -> bool:
    for e in _chain(exc):
        if isinstance(e, PermissionError):
            return True
        if "Permission denied" in str(e) or "[Errno 13]" in str(e):
            return True
    return False


def unreachable_error(exc: BaseException, host: str) -> DockerOpsError:
    """The one message for "cannot talk to the engine", split by cause."""
    if _is_permission_problem(exc):
        return DockerOpsError(
            f"Permission denied on the Docker socket ({host}).",
            hint=(
                "The bot's user may not open that socket. Give it access to the socket proxy "
                "(deploy/socket-proxy), not to the raw Docker socket, which is root-equivalent."
            ),
        )
    # "Not configured" only when nothing named a host (no setting, no DOCKER_HOST) and the default
    # socket is absent; an explicitly configured host that does not answer is "cannot reach".
    unnamed = host == f"unix://{DEFAULT_SOCKET}" and not os.environ.get("DOCKER_HOST")
    if unnamed and not os.path.exists(DEFAULT_SOCKET):
        return DockerOpsError(
            f"Docker is not configured for this bot: DOCKER_HOST is not set and there is no {DEFAULT_SOCKET}.",
            hint=(
                "Set DOCKER_HOST to the installation's socket proxy (e.g. tcp://socket-proxy:2375). "
                "Reconciler commands and worker logs need it; the demo runs without Docker."
            ),
        )
    return DockerOpsError(
        f"Cannot reach the Docker engine at {host}: {redact(_short(exc))}",
        hint="Check that the engine (or its socket proxy) is running and DOCKER_HOST points at it.",
    )


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


class HostClientFactory:
    """A client factory that knows where it connects, so errors can name it.

    ``endpoint.host`` None means ``docker.from_env()`` (DOCKER_HOST or the default socket). A
    ``tcp://`` endpoint with TLS files verifies the engine and shows the bot's certificate; the
    endpoint's problems (a missing file, plain tcp to another machine) are refused before connecting.
    """

    def __init__(self, endpoint: DockerEndpoint | None = None, *, timeout: float = 60.0) -> None:
        self.endpoint = endpoint or DockerEndpoint()
        self.timeout = timeout

    @property
    def host(self) -> str | None:
        return self.endpoint.host

    def __call__(self) -> docker.DockerClient:
        if self.endpoint.host is None:
            return docker.from_env(timeout=self.timeout)
        self.endpoint.check()
        try:
            return self.endpoint.client(self.timeout)
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            failure = tls_failure(exc, self.endpoint)
            if failure is not None:
                raise failure from exc
            raise

    def describe(self) -> str:
        return self.endpoint.host or describe_host()


def client_factory(host: str | DockerEndpoint | None = None, *, timeout: float = 60.0) -> HostClientFactory:
    """The factory for an installation's engine: a :class:`DockerEndpoint`, a bare host string
    (no TLS), or None (the environment, like ``docker.from_env``)."""
    endpoint = host if isinstance(host, DockerEndpoint) else DockerEndpoint(host)
    return HostClientFactory(endpoint, timeout=timeout)


def reach(endpoint: DockerEndpoint, timeout: float = 10.0) -> str:
    """Check, connect and ask the engine's API version (``installations check`` reaches each host
    once); raises :class:`DockerOpsError` naming the host or file, else returns the version."""
    client = connect(client_factory(endpoint, timeout=timeout))
    try:
        with translate("Asking the Docker engine its version", endpoint.describe()):
            return str(client.version().get("ApiVersion") or "?")
    finally:
        client.close()


def connect(factory: DockerClientFactory) -> docker.DockerClient:
    """Build a client; the SDK asks the engine its API version right away, so failures start here."""
    describe = getattr(factory, "describe", None)
    host = describe() if callable(describe) else describe_host()
    try:
        return factory()
    except docker.errors.DockerException as exc:
        raise unreachable_error(exc, host) from exc
    except (requests.exceptions.RequestException, OSError) as exc:
        raise unreachable_error(exc, host) from exc


def client_host(client: docker.DockerClient, factory: DockerClientFactory | None = None) -> str:
    """Where this client talks to, for messages (a unix socket shows as its DOCKER_HOST form)."""
    describe = getattr(factory, "describe", None)
    if callable(describe):
        return str(describe())
    base = str(getattr(client.api, "base_url", "") or "")
    return describe_host() if base.startswith("http+docker://") else base or describe_host()


@contextmanager
def translate(what: str, host: str, *, not_found: str | None = None) -> Iterator[None]:
    """Turn docker/requests errors raised while doing ``what`` into one :class:`DockerOpsError`.

    ``not_found``: the message for a 404 (a container that went away), else a generic one.
    """
    try:
        yield
    except DockerOpsError:
        raise
    except docker.errors.NotFound as exc:
        raise DockerOpsError(not_found or f"{what}: not found ({_explanation(exc)}).") from exc
    except docker.errors.APIError as exc:
        status = exc.status_code
        if status in (401, 403):
            raise DockerOpsError(
                f"{what}: the Docker API refused it ({status} {_explanation(exc)}).",
                hint=(
                    "If the bot talks to a socket proxy, its allowlist (deploy/socket-proxy/allowlist.yaml) "
                    "does not allow this call."
                ),
            ) from exc
        raise DockerOpsError(f"{what}: the Docker engine answered {status}: {_explanation(exc)}") from exc
    except (requests.exceptions.RequestException, docker.errors.DockerException, OSError) as exc:
        raise unreachable_error(exc, host) from exc


def close_quietly(stream: object) -> None:
    """Close an engine stream if it can be closed; a failing close never hides the result read so far.

    The SDK's cancellable stream shuts its socket down and can raise on the way (socket errors, an
    unsupported transport), and a stream may be closed while a reader thread still iterates it.
    """
    close = getattr(stream, "close", None)
    if close is not None:
        with suppress(Exception):
            close()


def _explanation(exc: docker.errors.APIError) -> str:
    text = exc.explanation if isinstance(exc.explanation, str) and exc.explanation else str(exc)
    return redact(text.strip()[:300])


def parse_docker_time(text: object) -> datetime | None:
    """Docker's RFC 3339 times have nanoseconds; Python reads microseconds."""
    if not isinstance(text, str) or len(text) < 19:
        return None
    value = text.strip()
    zone = "+00:00"
    if value.endswith("Z"):
        value = value[:-1]
    elif len(value) > 6 and value[-6] in "+-" and value[-3] == ":":
        value, zone = value[:-6], value[-6:]
    head, dot, frac = value.partition(".")
    if dot:
        head = f"{head}.{(frac + '000000')[:6]}"
    try:
        parsed = datetime.fromisoformat(head + zone)
    except ValueError:
        return None
    return parsed.astimezone(UTC)


def daemon_now(client: docker.DockerClient, host: str) -> datetime:
    """The Docker host's clock (``/info`` SystemTime): log windows are measured on it, not on ours."""
    with translate("Reading the Docker host's time", host):
        info = client.api.info()
    now = parse_docker_time(info.get("SystemTime"))
    if now is None:
        raise DockerOpsError(
            "The Docker engine did not report its time (/info SystemTime); cannot bound the log window."
        )
    return now
