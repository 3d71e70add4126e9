"""One installation the bot serves: a control host, its compose project and Docker engine, its channels.

The plain value every part is built from (bot/app/services.py builds one core per installation). Today's
single-installation settings (CONTROL_HOST_URL, RECOVER_INSTALLATION, DOCKER_HOST, RECOVER_CHANNELS, …)
are one installation named ``default``; ``RECOVER_INSTALLATIONS_FILE`` names several.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from bot.ids import DEFAULT_INSTALLATION


@dataclass(frozen=True)
class DockerTLS:
    """The client side of a ``tcp://`` Docker engine's TLS: the CA that signed the engine's certificate
    (None: the system's CAs) and the client's certificate and key (the engine's ``--tlsverify``)."""

    cert: Path
    key: Path
    ca: Path | None = None


@dataclass(frozen=True)
class InstallationSpec:
    """What the bot needs to reach and tell apart one installation (never the key in clear text)."""

    name: str
    control_host_url: str | None
    api_key: SecretStr | None = field(repr=False)
    compose_project: str | None = None
    channels: tuple[str, ...] = ()
    docker_host: str | None = None
    watch_channel: str | None = None
    #: None: the global approvers (RECOVER_APPROVERS); a tuple: this installation's own.
    approvers: tuple[str, ...] | None = None
    #: Where the entry was read (``FILE:LINE``), for messages; None for settings.
    origin: str | None = None
    #: TLS client files for a ``tcp://`` docker_host (None: plain, e.g. a socket proxy on a private network).
    docker_tls: DockerTLS | None = None

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_INSTALLATION


__all__ = ["DockerTLS", "InstallationSpec"]
