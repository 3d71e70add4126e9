"""Several installations from one bot: one core (:class:`bot.app.services.Services`) per installation.

Each core has its own store file, control-host client, paced bulk client, Docker factory, diagnoser,
decisions and watcher, so one installation's pacing, pools, deadlines and outages never reach another
(nothing of them is module-global). Today's single settings are the fleet of one, ``default``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.app.services import FrontPorts, Services, build_services
from bot.clock import Clock
from bot.decisions import ApproverDirectory
from bot.errors import SettingsError
from bot.installations import DEFAULT_INSTALLATION, InstallationSpec
from bot.installations.sources import resolve_installations
from bot.installations.tags import TaggingNotice
from bot.sandbox import SandboxHandle
from bot.settings import Settings


@dataclass
class Fleet:
    """The cores by installation name, in the order the installations were given."""

    specs: dict[str, InstallationSpec]
    cores: dict[str, Services]

    @property
    def names(self) -> list[str]:
        return list(self.specs)

    @property
    def single_default(self) -> bool:
        """Today's bot: one installation, ``default`` (replies say nothing new)."""
        return self.names == [DEFAULT_INSTALLATION]

    def core(self, name: str) -> Services:
        return self.cores[name]


def build_fleet(
    settings: Settings,
    specs: Sequence[InstallationSpec] | None = None,
    *,
    sandboxes: Mapping[str, SandboxHandle] | None = None,
    directory: ApproverDirectory | None = None,
    clock: Clock | None = None,
    console_users_map: dict[str, str] | None = None,
    ports: FrontPorts | None = None,
) -> Fleet:
    """One core per installation (``specs``; None: the one today's settings describe). ``sandboxes``
    replaces an installation's control host by a running sandbox (the demo). ``ports``: the front's
    (its break-glass notice poster), given to every installation's core as it is built."""
    from_settings = specs is None and settings.installations_file is None
    if specs is None:
        specs = resolve_installations(settings)  # the file's, or today's settings as ``default``
    names = [s.name for s in specs]
    if not specs or len(set(names)) != len(names):
        raise SettingsError([f"installations: each needs a unique name (got {', '.join(names) or 'none'})"])
    cores: dict[str, Services] = {}
    single = names == [DEFAULT_INSTALLATION]  # today's bot: its messages name no installation
    for spec in specs:
        sandbox = (sandboxes or {}).get(spec.name)
        if from_settings:
            # Today's settings, exactly as before (RECOVER_DB, CONTROL_HOST_URL, …).
            cores[spec.name] = build_services(
                settings,
                sandbox=sandbox,
                directory=directory,
                clock=clock,
                console_users_map=console_users_map,
                ports=ports,
            )
        else:
            cores[spec.name] = build_services(
                settings,
                installation=spec,
                sandbox=sandbox,
                directory=directory,
                clock=clock,
                console_users_map=console_users_map,
                ports=ports if single else _named(ports, spec.name),
            )
    return Fleet(specs={s.name: s for s in specs}, cores=cores)


def _named(ports: FrontPorts | None, name: str) -> FrontPorts | None:
    """The front's ports for one named installation: its notices name it, as its replies do."""
    if ports is None or ports.notice is None:
        return ports
    return dataclasses.replace(ports, notice=TaggingNotice(ports.notice, name))


__all__ = ["Fleet", "build_fleet"]
