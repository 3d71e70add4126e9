"""Where one installation's Docker engine is, and how to reach it safely: ``unix://``, ``tcp://`` with
TLS client certificates, or ``ssh://``.

An engine's API is root on its host, so a remote one is reached over TLS that verifies the server
(the installation's CA) and proves the bot (its client certificate), or over ssh. A plain ``tcp://``
is accepted only to this machine (loopback) or when the deployer says so explicitly (the compose
file's socket proxy on its private network). Every problem is one sentence naming the host or file.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import docker
import docker.tls

from bot.errors import DockerOpsError

DEFAULT_SOCKET = "/var/run/docker.sock"
SCHEMES = ("unix", "tcp", "ssh")
#: The file names the docker CLI expects in DOCKER_CERT_PATH.
CERT_PATH_FILES = ("ca.pem", "cert.pem", "key.pem")
#: The docker SDK's lowest API version: the client starts there, then takes the engine's.
MIN_API = "1.24"


@dataclass(frozen=True)
class DockerEndpoint:
    """One engine: ``host`` (None: DOCKER_HOST or the default socket, as ``docker.from_env``) and,
    for ``tcp://``, the TLS files: the CA that signed the engine's certificate, the bot's client
    certificate and its key. ``allow_plain_tcp``: the deployer's explicit yes to ``tcp://`` without
    TLS to another machine. ``origin`` says where the value was read (``FILE:LINE``, a setting)."""

    host: str | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    allow_plain_tcp: bool = False
    origin: str | None = None

    def __post_init__(self) -> None:
        # The installations file hands over text; a Path keeps messages and checks uniform.
        for name in ("tls_ca", "tls_cert", "tls_key"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(str(value)).expanduser())

    @classmethod
    def from_environment(
        cls,
        host: str | None,
        *,
        tls_verify: bool = False,
        cert_path: Path | None = None,
        allow_plain_tcp: bool = False,
    ) -> DockerEndpoint:
        """DOCKER_HOST with DOCKER_TLS_VERIFY / DOCKER_CERT_PATH, as the docker CLI reads them: the
        folder holds ca.pem, cert.pem and key.pem (~/.docker when only DOCKER_TLS_VERIFY is set).
        Stricter than the SDK in one way: with certificates, the server is always verified."""
        if host is not None and host.startswith("tcp://") and (tls_verify or cert_path is not None):
            folder = cert_path or Path.home() / ".docker"
            ca, cert, key = (folder / name for name in CERT_PATH_FILES)
            return cls(host, ca, cert, key, allow_plain_tcp=allow_plain_tcp, origin="DOCKER_CERT_PATH")
        return cls(host, allow_plain_tcp=allow_plain_tcp, origin="DOCKER_HOST" if host else None)

    @property
    def tls(self) -> bool:
        return any(f is not None for f in (self.tls_ca, self.tls_cert, self.tls_key))

    def describe(self) -> str:
        return self.host or f"unix://{DEFAULT_SOCKET}"

    @property
    def configured(self) -> bool:
        """A host was named, or the default socket is there (what ``docker.from_env`` would use)."""
        return self.host is not None or os.path.exists(DEFAULT_SOCKET)

    def problems(self) -> list[str]:
        """Everything wrong with this value, read without connecting (``installations check`` and
        the factory both call it); empty when the engine can be tried."""
        if self.host is None:
            return [] if not self.tls else ["TLS files need a tcp:// docker_host"]
        where = f" ({self.origin})" if self.origin else ""
        parts = urlsplit(self.host)
        scheme = parts.scheme
        if scheme not in SCHEMES:
            return [
                f"docker_host {self.host!r}{where}: use unix:///path/docker.sock, tcp://HOST:PORT (with TLS "
                "files) or ssh://USER@HOST"
            ]
        if scheme == "unix":
            out = [] if parts.path else [f"docker_host {self.host!r}{where}: a unix:// host needs the socket's path"]
            if self.tls:
                out.append(f"docker_host {self.host!r}{where}: TLS files apply to tcp:// only; remove them")
            return out
        try:
            port = parts.port
        except ValueError:
            return [f"docker_host {self.host!r}{where}: the port is not a number"]
        if not parts.hostname:
            return [f"docker_host {self.host!r}{where}: no host name"]
        if parts.path not in ("", "/"):
            return [f"docker_host {self.host!r}{where}: no path after the host"]
        if scheme == "ssh":
            return self._ssh_problems(where)
        if port is None:
            return [f"docker_host {self.host!r}{where}: name the port (tcp://HOST:2376 for TLS)"]
        if self.tls:
            return self._tls_problems(where)
        if self.allow_plain_tcp or _loopback(parts.hostname):
            return []
        return [
            f"docker_host {self.host!r}{where} has no TLS and is another machine: anyone on the way could "
            "drive the engine. Give it tls_ca, tls_cert and tls_key (DOCKER_TLS_VERIFY=1 and "
            "DOCKER_CERT_PATH for DOCKER_HOST), use ssh://, or allow it explicitly "
            "(RECOVER_DOCKER_PLAIN_TCP=true) when the network between is private, like compose's socket proxy"
        ]

    def _ssh_problems(self, where: str) -> list[str]:
        out = []
        if self.tls:
            out.append(f"docker_host {self.host!r}{where}: TLS files apply to tcp:// only; ssh:// uses ssh's own keys")
        if shutil.which("ssh") is None:
            out.append(
                f"docker_host {self.host!r}{where}: ssh:// needs the ssh client on this machine (openssh-client)"
            )
        if importlib.util.find_spec("paramiko") is None:
            out.append(
                f"docker_host {self.host!r}{where}: the docker SDK's ssh transport needs paramiko: "
                "pip install 'docker[ssh]'"
            )
        return out

    def _tls_problems(self, where: str) -> list[str]:
        named = {"tls_ca": self.tls_ca, "tls_cert": self.tls_cert, "tls_key": self.tls_key}
        missing = [name for name, path in named.items() if path is None]
        if missing:
            return [
                f"docker_host {self.host!r}{where}: TLS needs all of tls_ca, tls_cert and tls_key; missing "
                + ", ".join(missing)
                + " (the engine is verified with the CA and checks the bot's certificate)"
            ]
        out = []
        for name, path in named.items():
            assert path is not None
            if not path.is_file():
                out.append(f"{name} {path}{where}: no such file")
            else:
                try:
                    path.read_bytes()
                except OSError as exc:
                    out.append(f"{name} {path}{where}: cannot be read ({exc.strerror or exc})")
        if out:
            return out
        assert self.tls_ca and self.tls_cert and self.tls_key
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        try:
            context.load_verify_locations(cafile=str(self.tls_ca))
        except ssl.SSLError as exc:
            out.append(f"tls_ca {self.tls_ca}{where}: not a PEM CA certificate ({exc.reason or exc})")
        try:
            context.load_cert_chain(str(self.tls_cert), str(self.tls_key))
        except ssl.SSLError as exc:
            out.append(
                f"tls_cert {self.tls_cert} / tls_key {self.tls_key}{where}: not a PEM certificate and its "
                f"matching key ({exc.reason or exc})"
            )
        return out

    def check(self) -> None:
        """Raise the first problem as a :class:`DockerOpsError` (nothing is connected)."""
        problems = self.problems()
        if problems:
            raise DockerOpsError(
                f"Docker engine not usable: {problems[0]}.",
                hint="Fix the installation's docker_host and TLS files (docs: README, several installations).",
            )

    def client(self, timeout: float) -> docker.DockerClient:
        """A client for this engine (after :meth:`check`); the SDK asks its API version at once."""
        if not self.tls:
            ssh = self.host is not None and self.host.startswith("ssh://")
            # use_ssh_client: the ssh CLI, so ~/.ssh/config and known_hosts apply.
            return docker.DockerClient(base_url=self.host, version="auto", timeout=timeout, use_ssh_client=ssh)
        assert self.tls_ca and self.tls_cert and self.tls_key
        tls = docker.tls.TLSConfig(
            client_cert=(str(self.tls_cert), str(self.tls_key)), ca_cert=str(self.tls_ca), verify=True
        )
        # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace a session's own CA (psf/requests#3829):
        # with them set, the engine would be checked against the system CAs instead of tls_ca. So every
        # client ignores the environment, and the API version is asked by a first one that does too
        # (version="auto" would ask before the environment can be turned off).
        probe = docker.APIClient(base_url=self.host, version=MIN_API, timeout=timeout, tls=tls)
        probe.trust_env = False
        try:
            version = str(probe.version(api_version=False)["ApiVersion"])
        finally:
            probe.close()
        client = docker.DockerClient(base_url=self.host, version=version, timeout=timeout, tls=tls)
        client.api.trust_env = False
        return client


def _loopback(hostname: str) -> bool:
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def tls_failure(exc: BaseException, endpoint: DockerEndpoint) -> DockerOpsError | None:
    """The handshake's failure in words naming the file at fault, or None if ``exc`` is no TLS failure."""
    text = " ".join(str(e) for e in _chain(exc))
    host = endpoint.describe()
    name = urlsplit(host).hostname or host
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        if "mismatch" in text or "doesn't match" in text or "not valid for" in text:
            return DockerOpsError(
                f"The Docker engine at {host} presented a certificate that is not for {name!r}.",
                hint="The engine's server certificate must name the host the bot dials (subjectAltName).",
            )
        return DockerOpsError(
            f"The Docker engine at {host} presented a certificate not signed by the CA in {endpoint.tls_ca}.",
            hint="tls_ca must be the CA that signed the engine's --tlscert.",
        )
    # The engine checks the bot's certificate after the bot has accepted the engine's (TLS 1.3): a
    # refusal arrives as an alert, or as the connection cut right after the handshake.
    refused = (
        "alert bad certificate",
        "alert unknown ca",
        "certificate required",
        "alert certificate unknown",
        "EOF occurred in violation of protocol",
        "Connection reset by peer",
    )
    if endpoint.tls and any(r.lower() in text.lower() for r in refused):
        return DockerOpsError(
            f"The Docker engine at {host} did not accept the bot's client certificate {endpoint.tls_cert}.",
            hint="tls_cert must be signed by the CA the engine trusts (its --tlscacert), with tls_key its key.",
        )
    if "Client sent an HTTP request to an HTTPS server" in text:
        return DockerOpsError(
            f"The Docker engine at {host} speaks TLS, and the bot has no TLS files for it.",
            hint="Give the installation tls_ca, tls_cert and tls_key (DOCKER_TLS_VERIFY and DOCKER_CERT_PATH).",
        )
    if endpoint.tls and "SSL" in text:
        return DockerOpsError(
            f"The TLS handshake with the Docker engine at {host} failed.",
            hint="Is the engine started with --tlsverify on that port, and do the TLS files belong to it?",
        )
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    for e in list(seen):  # urllib3 keeps the reason inside the args, not the chain
        seen += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        reason = getattr(e, "reason", None)
        if isinstance(reason, BaseException):
            seen.append(reason)
    return seen
