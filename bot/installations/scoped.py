"""One installation's view of the settings: the single-installation settings every core part reads.

Each core (bot/app/services.py) is built from settings; for an installation of a fleet those settings are
the process's own with the installation's control host, key, compose project, Docker engine, watch
channel, approvers and store file put in, so no core part learns a second way to read its
configuration. Its channels are not put in: ``RECOVER_CHANNELS`` stays the process's, and the
installation's ``channels`` narrow it through :func:`recovery_channels` (bot/channels.py).
"""

from __future__ import annotations

from bot.channels import RecoveryChannels
from bot.ids import store_path
from bot.installations.spec import InstallationSpec
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
        "watch_channel": spec.watch_channel,
    }
    if spec.approvers is not None:
        update["approvers"] = tuple(spec.approvers)
    return settings.model_copy(update=update)


def recovery_channels(settings: Settings, spec: InstallationSpec | None) -> RecoveryChannels:
    """Where one core's restricted commands may run: ``RECOVER_CHANNELS`` for today's single
    installation (``spec`` None); for an installation of the file, its ``channels`` within it (an empty
    list: no channel). ``settings`` are the process's (scoped_settings leaves RECOVER_CHANNELS alone)."""
    if spec is None:
        return RecoveryChannels.of(settings.channels)
    return RecoveryChannels.narrowed(settings.channels, spec.channels, spec.name)


__all__ = ["recovery_channels", "scoped_settings"]
