"""Isolation: one installation's control host answering 5xx, 429 or nothing leaves another's diagnose
and triage answering normally (separate clients, pacing, pools and deadlines; correctness, not speed)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.app.compose import FrontPorts, compose
from bot.app.fleet_router import FleetRouter
from bot.installations import InstallationSpec
from bot.messages import ListReporter
from bot.settings import load_settings
from tests.installations.conftest import spec_for, text_of
from tests.installations.standin import TroubledHost

SESSION = "ses_unknown_ckpt_unavailable"


@pytest.fixture(params=["503", "429", "hang"])
def troubled(request: pytest.FixtureRequest) -> Iterator[TroubledHost]:
    host = TroubledHost(request.param, hang_seconds=3.0)
    yield host
    host.stop()


def _fleet(troubled: TroubledHost, sandboxes: Callable[..., Any], tmp_path: Path) -> FleetRouter:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db"})
    eu = InstallationSpec(name="eu-1", control_host_url=troubled.url, api_key=SecretStr("k-eu"), channels=("C0EU1",))
    return compose(settings, [eu, spec_for("us-1", sandboxes("us-1"))], startup=False, ports=FrontPorts()).router


def _say(router: FleetRouter, line: str, channel: str) -> Any:
    return router.handle_text(line, actor="alice", channel=channel, reporter=ListReporter())


def test_one_installations_outage_leaves_anothers_diagnose_and_triage_answering(
    troubled: TroubledHost, sandboxes: Callable[..., Any], tmp_path: Path
) -> None:
    router = _fleet(troubled, sandboxes, tmp_path)
    eu_replies: list[Any] = []
    eu_busy = [
        threading.Thread(target=lambda line=line: eu_replies.append(_say(router, line, "C0EU1")), daemon=True)
        for line in (f"/recover diagnose {SESSION}", "/recover triage")
    ]
    for thread in eu_busy:
        thread.start()
    diagnosis = _say(router, f"/recover diagnose {SESSION}", "C0US1")
    triage = _say(router, "/recover triage", "C0US1")
    assert diagnosis.ok and triage.ok, text_of(diagnosis) + text_of(triage)
    assert diagnosis.messages[0].headline.startswith("[us-1] ")
    assert "BACKEND_UNAVAILABLE" not in text_of(diagnosis) + text_of(triage)
    if troubled.mode == "hang":
        assert any(t.is_alive() for t in eu_busy)  # still held by eu-1's host while us-1 answered
    for thread in eu_busy:
        thread.join(60)
    assert troubled.calls > 0 and troubled.posts == 0
    assert all(r.messages[0].headline.startswith("[eu-1] ") for r in eu_replies)


def test_triage_all_answers_for_the_healthy_installation_and_names_the_failing_one(
    troubled: TroubledHost, sandboxes: Callable[..., Any], tmp_path: Path
) -> None:
    # a hanging host holds its own part of `triage --all` to its deadline, never the other's answer
    router = _fleet(troubled, sandboxes, tmp_path)
    reply = _say(router, "/recover triage --all", "C0NONE")
    (summary,) = reply.messages
    (us_line,) = [line for line in summary.lines if line.startswith("*us-1* · ")]
    (eu_line,) = [line for line in summary.lines if line.startswith("*eu-1* · ")]
    assert "Control host" not in us_line and "Triage t" in us_line
    assert "eu-1" in summary.headline and not reply.ok  # the failing one is named in the lead line
