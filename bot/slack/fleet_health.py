"""``/healthz`` for several installations: each one's pacing, diagnose pool and watcher, one line each.

The state lives in the worker process (each installation's own clients and pools); the worker writes a
snapshot beside RECOVER_DB on every heartbeat and the serving process, which only acks, reads it. A
bot of the single ``default`` installation writes and says nothing new.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from bot.settings import Settings

log = logging.getLogger(__name__)

#: A snapshot older than this is said to be stale (the worker beats every few seconds).
STALE_SECONDS = 60.0


def health_path(settings: Settings) -> Path:
    db = settings.db_path
    return db.with_name(f"{db.stem}-installations.json")


def snapshot(core: Any) -> dict[str, Any]:
    """One installation's figures (a :class:`bot.app.services.Services`; read, never changed)."""
    from bot.watch.store import WatchStore

    out: dict[str, Any] = {"pool": core.diagnoser.pool.stats()}
    if core.bulk is not None:
        limiter = core.bulk.limiter
        paused = limiter.paused_for()
        out["pacing"] = {
            "rate": round(limiter.rate, 1),
            "max_rate": limiter.max_rate,
            "throttled": limiter.throttled,
            "paused_for": round(paused, 1),
        }
    if core.settings.watch_channel:
        try:
            saved = WatchStore(core.store, core.settings.compose_project or "default")
            out["watch"] = {"health": saved.get("health") or {}, "poll": saved.get("poll") or {}}
        except Exception:  # noqa: BLE001 - a locked store is said, not raised
            out["watch"] = {"unreadable": True}
    return out


def publish(cores: dict[str, Any], path: Path) -> None:
    """The worker's side: every installation's snapshot, written atomically (named installations only)."""
    if list(cores) == ["default"]:
        return
    data = {"at": time.time(), "installations": {name: snapshot(core) for name, core in cores.items()}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _line(name: str, item: dict[str, Any]) -> str:
    parts = []
    pacing = item.get("pacing")
    if pacing:
        paused = f", paused {pacing['paused_for']} s (429)" if pacing.get("paused_for") else ""
        parts.append(f"pacing {pacing['rate']}/{pacing['max_rate']} per s, {pacing['throttled']} throttled{paused}")
    pool = item.get("pool") or {}
    if pool:
        parts.append(
            f"diagnose pool {pool.get('running', 0)} running, {pool.get('queued', 0)} queued, "
            f"{pool.get('rejected', 0)} refused"
        )
    watch = item.get("watch")
    if watch is not None:
        health, poll = watch.get("health") or {}, watch.get("poll") or {}
        if watch.get("unreadable"):
            parts.append("watch: state unreadable")
        elif health.get("failing"):
            parts.append(f"watch: cannot read the listing since {health.get('since')}")
        else:
            parts.append(f"watch: on, last poll {poll.get('at') or 'never'}")
    return f"installation {name}: " + "; ".join(parts or ["no figures"])


def health_lines(settings: Settings) -> list[str]:
    """The serving process's side: one line per installation (reported, never failing /healthz)."""
    path = health_path(settings)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return ["installations: health snapshot unreadable"]
    lines = [_line(name, item) for name, item in (data.get("installations") or {}).items()]
    age = time.time() - float(data.get("at") or 0)
    if age > STALE_SECONDS:
        lines.append(f"installations: figures are {age:.0f} s old (the worker has not written them since)")
    return lines


__all__ = ["health_lines", "health_path", "publish", "snapshot"]
