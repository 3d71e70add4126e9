"""One installation the bot serves: a control host, its compose project and Docker engine, its channels.

The plain value every part is built from (bot/services.py builds one core per installation). Today's
single-installation settings (CONTROL_HOST_URL, RECOVER_INSTALLATION, DOCKER_HOST, RECOVER_CHANNELS, …)
are one installation named ``default``; ``RECOVER_INSTALLATIONS_FILE`` names several.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

#: The name of the one installation today's single-installation settings describe.
DEFAULT_INSTALLATION = "default"

#: An installation's name: short, lower case, safe inside ids, file names and Slack text.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


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


#: The suffix a request, batch or dry-run id of a named installation carries: ``req_3f2a….eu-1``.
ID_SUFFIX = re.compile(r"\.([a-z][a-z0-9-]{0,30})$")


def qualified_id(raw: str, installation: str) -> str:
    """The id as shown and typed: the default installation's ids stay as they always were; another
    installation's carry its name after a dot, so an id alone says where it belongs."""
    return raw if installation == DEFAULT_INSTALLATION else f"{raw}.{installation}"


def installation_of_id(qualified: str) -> str:
    """The installation an id belongs to (``default`` for an id without a suffix)."""
    match = ID_SUFFIX.search(qualified)
    return match.group(1) if match else DEFAULT_INSTALLATION


def store_path(db_path: Path, installation: str) -> Path:
    """Each installation's steps, cases and requests live in a store file of their own, so one
    installation's chain can never authorise another's send: the default installation keeps
    ``RECOVER_DB`` itself (today's stores go on as they are), ``eu-1`` gets ``<stem>-eu-1<suffix>``
    beside it. The Slack app's own tables stay in ``RECOVER_DB``."""
    if installation == DEFAULT_INSTALLATION:
        return db_path
    return db_path.with_name(f"{db_path.stem}-{installation}{db_path.suffix}")


__all__ = [
    "DEFAULT_INSTALLATION",
    "ID_SUFFIX",
    "DockerTLS",
    "NAME_PATTERN",
    "InstallationSpec",
    "installation_of_id",
    "qualified_id",
    "store_path",
]
