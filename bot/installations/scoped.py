"""One installation's view of the settings: the single-installation settings every core part reads.

Each core (bot/services.py) is built from settings; for an installation of a fleet those settings are
the process's own with the installation's control host, key, compose project, Docker engine,
channels, watch channel, approvers and store file put in, so no core part learns a second way to read
its configuration.
"""

from __future__ import annotations

from bot.installations.spec import InstallationSpec, store_path
from bot.settings import Settings


def scoped_settings(settings: Settings, spec: InstallationSpec) -> Settings:
    """``settings`` as the one installation ``spec`` describes (the key stays a SecretStr)."""
    update: dict[str, object] = {
        "control_host_url": spec.control_host_url,
        "control_host_api_key": spec.api_key,
        "control_host_api_key_file": None,
        "installations_file": None,  # this core serves the one installation ``spec``
        "db_path": store_path(settings.db_path, spec.name),
        "compose_project": spec.compose_project,
        "docker_host": spec.docker_host,
        "channels": tuple(spec.channels),
        "watch_channel": spec.watch_channel,
    }
    if spec.approvers is not None:
        update["approvers"] = tuple(spec.approvers)
    return settings.model_copy(update=update)


__all__ = ["scoped_settings"]
