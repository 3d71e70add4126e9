"""Watch mode per installation: each installation's own watcher polls its own control host and posts
in its own watch channel, naming the installation; its buttons carry it; /healthz reports each."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.slack import fleet_health
from tests.fixtures.triage import clone
from tests.installations.conftest import spec_for


def test_each_installation_watches_its_own_host_and_channel(
    slack_harness: Any, sandboxes: Callable[..., Any], tmp_path: Path
) -> None:
    eu, us = sandboxes("eu-1", scenarios=None), sandboxes("us-1", scenarios=None)
    for handle in (eu, us):
        handle.admin.create_session(clone("healthy", "ses_w_001"))  # the same id in both
    specs = [
        dataclasses.replace(spec_for("eu-1", eu), watch_channel="C0EU1W"),
        dataclasses.replace(spec_for("us-1", us), watch_channel="C0US1W"),
    ]
    h = slack_harness.composed(specs=specs, db_path=tmp_path / "recover.db")  # as serve's worker composes it
    router, settings = h.composed.router, h.bot.settings
    watchers = list(h.composed.watchers.values())
    assert [w.channel for w in watchers] == ["C0EU1W", "C0US1W"]
    for watcher in watchers:
        watcher.poll_once()
    eu.admin.stop("ses_w_001")  # stopped in eu-1 only
    for watcher in watchers:
        watcher.poll_once()
    (post,) = h.api.roots("C0EU1W")
    assert "[eu-1]" in post.all_text() and "ses_w_001" in post.all_text()
    assert post.action_ids() and all(v.endswith("@eu-1") for _, v in post.action_ids() if v), post.action_ids()
    assert h.api.roots("C0US1W") == []
    assert router.resolve(flag=None, channel="C0EU1W") == "eu-1"  # the watch channel is a binding too

    fleet_health.publish(dict(router.fleet.cores), fleet_health.health_path(settings))
    lines = fleet_health.health_lines(settings)
    assert [line.split(":")[0] for line in lines] == ["installation eu-1", "installation us-1"]
    assert all("watch: on, last poll" in line for line in lines)
