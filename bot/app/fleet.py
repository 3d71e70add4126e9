"""Several installations from one bot: one core (:class:`bot.app.services.Services`) per installation,
all built by :func:`bot.app.compose.compose`.

Each core has its own store file, control-host client, paced bulk client, Docker factory, diagnoser,
decisions and watcher, so one installation's pacing, pools, deadlines and outages never reach another
(nothing of them is module-global). Today's single settings are the fleet of one, ``default``.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.app.services import Services
from bot.ids import DEFAULT_INSTALLATION
from bot.installations import InstallationSpec


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


__all__ = ["Fleet"]
