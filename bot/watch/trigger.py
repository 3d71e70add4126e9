"""What wakes the watcher before its interval ends: a protocol, so the loop knows no Docker."""

from __future__ import annotations

from typing import Protocol


class Trigger(Protocol):
    """Started by ``Watcher.run``, stopped by ``Watcher.stop``; calls ``Watcher.wake`` when it sees a stop."""

    def start(self) -> None: ...

    def stop(self) -> None: ...
