"""``/healthz``'s watch line, read from the state every watcher process shares in the step store.

Kept apart from :mod:`bot.slack.watching` so the serving process, which only acks, does not import
the core to say it.
"""

from __future__ import annotations

from bot.settings import Settings
from bot.store import Store
from bot.watch.store import WatchStore
from bot.watch.store import migrations as watch_migrations


def watch_health_lines(settings: Settings, store: Store) -> list[str]:
    """``/healthz``'s watch line, from the state the watcher shares in the store (any process)."""
    if settings.watch_channel is None:
        return []
    try:
        # The serving process opens the store for its inbox only: the watch tables are the worker's
        # (applied there at start; here a no-op but for the record of them, so they can be read).
        store.migrate([watch_migrations])
        saved = WatchStore(store, settings.compose_project or "default")
        health, poll = saved.get("health") or {}, saved.get("poll") or {}
    except Exception:  # noqa: BLE001 - a locked or unmigrated store is shown, not raised
        return ["watch: state unreadable"]
    last = poll.get("at") or "never"
    if health.get("failing"):
        return [f"watch: cannot read the session listing since {health.get('since')} (last good poll {last})"]
    return [f"watch: on, last poll {last}"]
