"""Several installations from one bot: their configuration and which one a command is about."""

from bot.installations.loader import InstallationsError, check_installations, load_installations
from bot.installations.sources import installations_from_settings, resolve_installations
from bot.installations.spec import (
    DEFAULT_INSTALLATION,
    ID_SUFFIX,
    NAME_PATTERN,
    DockerTLS,
    InstallationSpec,
    installation_of_id,
    qualified_id,
    store_path,
)

__all__ = [
    "DEFAULT_INSTALLATION",
    "ID_SUFFIX",
    "NAME_PATTERN",
    "DockerTLS",
    "InstallationSpec",
    "InstallationsError",
    "check_installations",
    "installations_from_settings",
    "installation_of_id",
    "load_installations",
    "qualified_id",
    "resolve_installations",
    "store_path",
]
