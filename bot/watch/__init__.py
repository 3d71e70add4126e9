"""Watch mode: stopped sessions found, diagnosed and posted before anyone asks (one case per stop)."""

from __future__ import annotations

from bot.watch.pausing import ChannelMembers, ConsoleMembers
from bot.watch.poster import Poster
from bot.watch.state import WatchStatus
from bot.watch.stops import Stop, stop_of
from bot.watch.store import Claim, WatchStore, migrations
from bot.watch.watcher import PollResult, Watcher

__all__ = [
    "ChannelMembers",
    "Claim",
    "ConsoleMembers",
    "PollResult",
    "Poster",
    "Stop",
    "WatchStatus",
    "WatchStore",
    "Watcher",
    "migrations",
    "stop_of",
]
