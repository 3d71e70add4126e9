"""Which control host a client talks to, as the step store records it (bot/store/binding.py).

Name-independent: the base URL and the sha256 fingerprint of the API key (never the key itself), so
a store bound to one installation's host refuses a client of another's, whatever each is called.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.store.binding import identity_of


@dataclass(frozen=True)
class HostIdentity:
    """A control host as the bot reaches it: its base URL and its key's sha256 fingerprint (hex)."""

    base_url: str
    key_sha256: str

    @classmethod
    def of(cls, base_url: str, api_key: str) -> HostIdentity:
        return cls(*identity_of(base_url, api_key))


__all__ = ["HostIdentity"]
