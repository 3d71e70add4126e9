"""Several installations from one bot: their configuration and which one a command is about."""

from bot.installations.spec import (
    DEFAULT_INSTALLATION,
    ID_SUFFIX,
    NAME_PATTERN,
    InstallationSpec,
    installation_of_id,
    qualified_id,
    store_path,
)

__all__ = [
    "DEFAULT_INSTALLATION",
    "ID_SUFFIX",
    "NAME_PATTERN",
    "InstallationSpec",
    "installation_of_id",
    "qualified_id",
    "store_path",
]
