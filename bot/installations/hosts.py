"""The control host an installation is served from, as ``serve`` would build it: for
``recover-bot audit rebind --install NAME``, so a rebinding binds the installation's store to exactly
the host and key the bot will use for it (the installations file's entry, or today's single-installation
settings for ``default``), never to a URL typed beside it."""

from __future__ import annotations

from bot.errors import SettingsError
from bot.ids import DEFAULT_INSTALLATION
from bot.installations.sources import resolve_installations
from bot.settings import Settings, reveal


def installation_host(settings: Settings, name: str) -> tuple[str, str]:
    """(base URL, API key) of installation ``name``; :class:`SettingsError` in one actionable line when
    it is not configured here or has no URL or key."""
    if settings.installations_file is None and name != DEFAULT_INSTALLATION:
        raise SettingsError(
            [
                f"installation {name!r} is not configured here: without RECOVER_INSTALLATIONS_FILE "
                "the only installation is `default`; set it to the bot's installations file"
            ]
        )
    settings.require_control_host()  # CONTROL_HOST_URL and its key, or the file alone
    specs = resolve_installations(settings)
    spec = next((s for s in specs if s.name == name), None)
    if spec is None:
        names = ", ".join(s.name for s in specs)
        raise SettingsError(
            [
                f"installation {name!r} is not configured here: RECOVER_INSTALLATIONS_FILE "
                f"({settings.installations_file}) names {names}"
            ]
        )
    key = reveal(spec.api_key)
    if not spec.control_host_url or not key:
        raise SettingsError([f"installation {name!r} has no control host URL or API key to bind its store to"])
    return spec.control_host_url, key


__all__ = ["installation_host"]
