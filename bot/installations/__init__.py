"""Several installations from one bot: their configuration and which one a command is about."""

from bot.installations.loader import InstallationsError, check_installations, load_installations
from bot.installations.sources import installations_from_settings, resolve_installations
from bot.installations.spec import DockerTLS, InstallationSpec

__all__ = [
    "DockerTLS",
    "InstallationSpec",
    "InstallationsError",
    "check_installations",
    "installations_from_settings",
    "load_installations",
    "resolve_installations",
]
