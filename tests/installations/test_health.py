"""``/healthz`` per installation: the worker's snapshot of each installation's own pacing, pool and
watcher, read back by the serving process. One installation throttled by real 429s shows alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.app.fleet_router import FleetRouter
from bot.messages import ListReporter
from bot.slack import fleet_health


def test_each_installation_reports_its_own_pacing(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., Any], tmp_path: Path
) -> None:
    sandboxes("eu-1", rate_limit=5.0, rate_burst=3.0, incident=6)  # answers 429 past 5 calls a second
    router = make_fleet("eu-1", "us-1")
    router.handle_text("/recover triage --install eu-1", actor="alice", channel=None, reporter=ListReporter())
    settings = router.fleet.core("eu-1").settings.model_copy(update={"db_path": tmp_path / "recover.db"})
    path = fleet_health.health_path(settings)
    fleet_health.publish(dict(router.fleet.cores), path)
    lines = fleet_health.health_lines(settings)
    (eu,) = [line for line in lines if line.startswith("installation eu-1:")]
    (us,) = [line for line in lines if line.startswith("installation us-1:")]
    assert " 0 throttled" not in eu and "throttled" in eu
    assert " 0 throttled" in us and "paused" not in us
    assert router.fleet.core("eu-1").bulk.limiter is not router.fleet.core("us-1").bulk.limiter


def test_a_single_default_installation_writes_nothing_new(tmp_path: Path) -> None:
    from bot.settings import Settings

    settings = Settings(db_path=tmp_path / "recover.db")
    fleet_health.publish({"default": object()}, fleet_health.health_path(settings))
    assert fleet_health.health_lines(settings) == []


def test_healthz_over_http_lists_each_installation(
    make_fleet: Callable[..., FleetRouter], slack_harness: Any, tmp_path: Path
) -> None:
    """GET /healthz of the serving process: the supervisor's lines, then one line per installation."""
    import httpx

    from bot.slack import HttpServer, SlackFront
    from bot.slack.inbox import Inbox
    from bot.slack.supervisor import WorkerSupervisor
    from bot.store import Store
    from tests.fixtures.slack import SIGNING_SECRET

    router = make_fleet("eu-1", "us-1")
    h = slack_harness(router)
    settings = h.bot.settings.model_copy(update={"db_path": tmp_path / "recover.db"})
    fleet_health.publish(dict(router.fleet.cores), fleet_health.health_path(settings))
    supervisor = WorkerSupervisor(settings, Inbox(Store(tmp_path / "recover.db")))  # not started: "down"
    server = HttpServer(
        SlackFront(h.bot.app, signing_secret=SIGNING_SECRET, health=supervisor.health), "127.0.0.1", 0
    ).start()
    try:
        body = httpx.get(server.url + "/healthz").text
    finally:
        server.stop()
    assert "worker: down" in body
    assert "installation eu-1: pacing" in body and "installation us-1: pacing" in body
    assert "diagnose pool" in body
