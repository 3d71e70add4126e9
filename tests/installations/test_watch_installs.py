"""Watch mode per installation: each installation's own watcher polls its own control host and posts
in its own watch channel, naming the installation; its buttons carry it; /healthz reports each."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.clock import ManualClock
from bot.slack import fleet_health
from tests.fixtures.triage import clone
from tests.installations.conftest import spec_for


@pytest.mark.parametrize("names", [("eu-1",), ("eu-1", "us-1")], ids=["one", "two"])
def test_each_installation_watches_its_own_host_and_channel(
    slack_harness: Any, sandboxes: Callable[..., Any], tmp_path: Path, names: tuple[str, ...]
) -> None:
    handles = {name: sandboxes(name, scenarios=None) for name in names}
    for handle in handles.values():
        handle.admin.create_session(clone("healthy", "ses_w_001"))  # the same id in both
    channels = {"eu-1": "C0EU1W", "us-1": "C0US1W"}
    specs = [dataclasses.replace(spec_for(n, handles[n]), watch_channel=channels[n]) for n in names]
    h = slack_harness.composed(specs=specs, db_path=tmp_path / "recover.db")  # as serve's worker composes it
    router, settings = h.composed.router, h.bot.settings
    watchers = list(h.composed.watchers.values())
    assert [w.channel for w in watchers] == [channels[n] for n in names]
    for watcher in watchers:
        watcher.poll_once()
    handles["eu-1"].admin.stop("ses_w_001")  # stopped in eu-1 only
    for watcher in watchers:
        watcher.poll_once()
    (post,) = h.api.roots("C0EU1W")
    assert "[eu-1]" in post.all_text() and "ses_w_001" in post.all_text()  # named, with one as with two
    assert post.action_ids() and all(v.endswith("@eu-1") for _, v in post.action_ids() if v), post.action_ids()
    assert h.api.roots("C0US1W") == []
    assert router.resolve(flag=None, channel="C0EU1W") == "eu-1"  # the watch channel is a binding too

    fleet_health.publish(dict(router.fleet.cores), fleet_health.health_path(settings))
    lines = fleet_health.health_lines(settings)
    assert [line.split(":")[0] for line in lines] == [f"installation {n}" for n in names]
    assert all("watch: on, last poll" in line for line in lines)


def test_two_installations_sharing_a_watch_channel_never_take_the_others_post_for_their_own(
    slack_harness: Any, sandboxes: Callable[..., Any], clock: ManualClock, tmp_path: Path
) -> None:
    """A watcher taking over a dead owner's claim looks for the stop's key in the channel first: the
    same session id stopped the same way in two installations is two stops, two keys, two posts."""
    eu, us = (sandboxes(name, scenarios=None, clock=clock) for name in ("eu-1", "us-1"))
    for handle in (eu, us):
        handle.admin.create_session(clone("healthy", "ses_w_001"))  # the same id in both
    specs = [dataclasses.replace(spec_for(n, s), watch_channel="C0WATCH") for n, s in (("eu-1", eu), ("us-1", us))]
    h = slack_harness.composed(specs=specs, clock=clock, db_path=tmp_path / "recover.db")  # as serve's worker
    eu_watch, us_watch = (h.composed.watchers[n] for n in ("eu-1", "us-1"))
    for watcher in (eu_watch, us_watch):
        watcher.poll_once()
    eu.admin.stop("ses_w_001")
    us.admin.stop("ses_w_001")
    # eu-1's process dies between its claim's commit and its post; us-1 then posts its own stop.
    stop = eu_watch._stop_of(eu_watch.client.get_session("ses_w_001"))
    claimed = eu_watch.saved.claim(
        stop,
        actor="watch:dead",
        now=clock.now(),
        flap_window=3600,
        storm_window=300,
        storm_threshold=10,
        paused=False,
        lease=120,
    )
    assert claimed is not None
    us_watch.poll_once()
    clock.advance(121)
    eu_watch.poll_once()  # takes the claim over: looks in the channel first, finds nothing of its own
    roots = [r.all_text() for r in h.api.roots("C0WATCH") if "ses_w_001" in r.all_text()]
    assert len(roots) == 2 and [n for n in ("eu-1", "us-1") if any(f"[{n}] " in t for t in roots)] == ["eu-1", "us-1"]
    assert eu_watch.status().counts == {"posted": 1}
