"""Several installations from one bot: their configuration and which one a command is about."""

from bot.installations.spec import DEFAULT_INSTALLATION, NAME_PATTERN, InstallationSpec

__all__ = ["DEFAULT_INSTALLATION", "NAME_PATTERN", "InstallationSpec"]
