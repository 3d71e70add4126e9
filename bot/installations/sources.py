"""Where the installations come from: the installations file, or today's single-installation settings.

One place decides, so every front (serve, console, the checks) builds the same list: with
``RECOVER_INSTALLATIONS_FILE`` the file names every installation (CONTROL_HOST_URL beside it is refused
by the settings); without it, CONTROL_HOST_URL and its companions are one installation named ``default``.
"""

from __future__ import annotations

from bot.errors import SettingsError
from bot.ids import DEFAULT_INSTALLATION
from bot.installations.loader import load_installations
from bot.installations.spec import InstallationSpec
from bot.settings import Settings


def installations_from_settings(settings: Settings) -> list[InstallationSpec]:
    """The one ``default`` installation today's settings describe (its approvers are the global ones)."""
    return [
        InstallationSpec(
            name=DEFAULT_INSTALLATION,
            control_host_url=settings.control_host_url,
            api_key=settings.control_host_api_key,
            compose_project=settings.compose_project,
            channels=settings.channels,
            docker_host=settings.docker_host,
            watch_channel=settings.watch_channel,
        )
    ]


def resolve_installations(settings: Settings) -> list[InstallationSpec]:
    """The installations the bot serves: the file's when ``RECOVER_INSTALLATIONS_FILE`` is set, else the
    settings' ``default``. Raises :class:`bot.installations.loader.InstallationsError` (every problem of
    the file as ``FILE:LINE: …``, an installation channel outside RECOVER_CHANNELS among them) or
    :class:`SettingsError` (the file set beside CONTROL_HOST_URL)."""
    if settings.installations_file is None:
        return installations_from_settings(settings)
    problems = settings.problems_for(["control_host"])
    if problems:
        raise SettingsError(problems)
    # RECOVER_CHANNELS beside the file: each installation's channels must lie within it (bot/channels.py).
    return load_installations(settings.installations_file, settings.channels)
