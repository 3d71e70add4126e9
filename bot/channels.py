"""The channel rule: where the channel-restricted commands (decide, approve, reject, confirm, withdraw,
replay, reconcile, batch decide and stop; docs/commands.md) may run. One value, one test, one wording.

``RECOVER_CHANNELS`` names the recovery channels (unset: any channel). An installation of the
installations file (``RECOVER_INSTALLATIONS_FILE``) NARROWS that list to its own ``channels`` and never
widens it: an installation bound to no channel (``channels: []``, or the key left out) allows these
commands in no channel at all, and a channel of an installation that ``RECOVER_CHANNELS`` does not list
is refused at start (bot/installations/loader.py), so the two settings can never disagree in silence.
The console is the channel ``console``: it is allowed where it is listed, like any other channel.

Why it matters: an irreversible decision (R3.11, R5.4: ``close`` cannot be undone) and its second
person's approval (R3.10) are made where the incident's people see them, never in a side channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.messages import ref

#: The terminal console's channel (it is listed in RECOVER_CHANNELS to allow decisions from a terminal).
CONSOLE_CHANNEL = "console"


@dataclass(frozen=True)
class RecoveryChannels:
    """Where the restricted commands of one core may run.

    ``installation`` None: the single installation of today's settings, ``RECOVER_CHANNELS`` alone (no
    ids: any channel). A name: that installation of the installations file, ``ids`` its own channels
    within ``RECOVER_CHANNELS`` (no ids: no channel)."""

    ids: tuple[str, ...] = ()
    installation: str | None = None

    @classmethod
    def of(cls, recover_channels: Sequence[str]) -> RecoveryChannels:
        """``RECOVER_CHANNELS`` as the one installation of today's settings reads it."""
        return cls(tuple(recover_channels))

    @classmethod
    def narrowed(
        cls, recover_channels: Sequence[str], installation_channels: Sequence[str], installation: str
    ) -> RecoveryChannels:
        """An installation's ``channels`` within ``RECOVER_CHANNELS`` (narrowing, never widening).

        A channel outside RECOVER_CHANNELS is dropped here as well as refused at start, so this rule
        holds even for an installation built without the loader's check."""
        kept = tuple(c for c in installation_channels if not recover_channels or c in recover_channels)
        return cls(kept, installation)

    @property
    def anywhere(self) -> bool:
        """No list at all: RECOVER_CHANNELS unset and no installations file."""
        return self.installation is None and not self.ids

    def allows(self, channel: str | None) -> bool:
        """THE test: may a restricted command run in ``channel``?"""
        return self.anywhere or (channel is not None and channel in self.ids)

    @property
    def source(self) -> str:
        """Which setting says so, for a refusal's headline."""
        if self.installation is None:
            return "RECOVER_CHANNELS"
        return f"installation {self.installation}'s channels"

    def hint(self, channel: str | None) -> str:
        """The one wording of the rule in a refusal: where to go instead, or what to configure."""
        if self.ids:
            where = ", ".join(ref(c, "#") for c in self.ids)
            text = f"Decisions, approvals and real reconciler passes are made only in: {where} ({self.source})."
            if channel == CONSOLE_CHANNEL:
                text += " The console is the channel `console`: list it there to allow this from a terminal."
            return text
        return (
            f"Installation `{self.installation}` is bound to no channel (its `channels` in "
            "RECOVER_INSTALLATIONS_FILE is empty), so it takes decisions, approvals and real reconciler "
            "passes in none: list its incident channel there (and in RECOVER_CHANNELS when that is set)."
        )


__all__ = ["CONSOLE_CHANNEL", "RecoveryChannels"]
