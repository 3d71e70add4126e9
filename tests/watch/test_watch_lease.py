"""A claim's lease is renewed while its post is still running: a Slack post slower than the lease is
never taken over and posted a second time by another watcher (real clock, real SQLite file, the
sandbox over HTTP, the Slack Web API stand-in answering slowly)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.app.compose import FrontPorts
from bot.clock import SystemClock
from bot.sandbox import AdjustableClock, SandboxHandle
from bot.settings import load_settings
from bot.slack import make_client
from bot.slack.watching import SlackWatchPoster
from bot.slack.web import SlackOut
from bot.watch import Watcher
from tests.fixtures.composing import composed
from tests.fixtures.slack import SlackStandIn, slack_settings
from tests.fixtures.triage import clone
from tests.fixtures.waiting import eventually
from tests.watch.test_watcher import CHANNEL, edited_runbooks


@pytest.fixture
def real_sbx(sandbox_factory: Callable[..., SandboxHandle]) -> SandboxHandle:
    return sandbox_factory(scenarios=None, clock=AdjustableClock(SystemClock()))


def _watcher(sbx: SandboxHandle, api: SlackStandIn, db: Path, runbooks: Path) -> Watcher:
    # A 0.3 s interval: the poll lease (max(claim_lease, 2 intervals)) is the 1 s claim lease too.
    settings = load_settings({}, dotenv=None).model_copy(
        update={"db_path": db, "watch_channel": CHANNEL, "runbooks_dir": runbooks, "watch_interval": 0.3}
    )
    poster = SlackWatchPoster(SlackOut(make_client(slack_settings(api, db))))
    ports = FrontPorts(watch_poster=lambda installation, named: poster)
    return composed(settings, sandbox=sbx, ports=ports, startup=False).watchers["default"]


def _two_on_one_stop(sbx: SandboxHandle, api: SlackStandIn, tmp_path: Path, sid: str) -> tuple[Watcher, Watcher]:
    """Two watchers on one store with a 1 s lease, and ``sid`` stopped."""
    runbooks = edited_runbooks(tmp_path, "claim_lease: {duration: 2m,", "claim_lease: {duration: 1s,")
    db = tmp_path / "recover.db"
    a, b = _watcher(sbx, api, db, runbooks), _watcher(sbx, api, db, runbooks)
    sbx.admin.create_session(clone("healthy", sid))
    sbx.admin.stop(sid)
    return a, b


def test_a_post_slower_than_the_lease_is_not_taken_over_and_posted_twice(
    real_sbx: SandboxHandle, slack_api: SlackStandIn, tmp_path: Path
) -> None:
    sid = "ses_wl_001"
    a, b = _two_on_one_stop(real_sbx, slack_api, tmp_path, sid)
    # Slack holds the post 2.5 s before it shows in the channel: a taker looking for it finds nothing.
    slack_api.slow("chat.postMessage", 2.5, before=True)
    errors: list[BaseException] = []

    def first() -> None:
        try:
            a.poll_once()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    posting = threading.Thread(target=first)
    posting.start()
    eventually(lambda: a.saved.counts().get("claimed") == 1, 10, "a's claim")
    while posting.is_alive():  # the other watcher polls on, past the 1 s lease, while a posts
        b.poll_once()
        time.sleep(0.1)
    posting.join()
    assert not errors
    slack_api.slow("chat.postMessage", 0.0)
    b.poll_once()
    a.poll_once()
    posts = [p.text for p in slack_api.roots(CHANNEL) if f"Stopped: {sid} " in p.text]
    assert len(posts) == 1, posts  # 0 duplicates
    assert a.status().counts == {"posted": 1}
    assert not [s for s in a.store.steps() if s.step == "watch_stop" and s.outcome == "taken_over"]
    assert a.leases.renewals >= 2


def test_a_claim_taken_over_while_its_owner_stalled_is_not_posted_by_the_owner(
    real_sbx: SandboxHandle, slack_api: SlackStandIn, tmp_path: Path, monkeypatch: Any
) -> None:
    """The fence before the post: an owner that stalled past its leases (no renewal reached the store)
    finds the claim is no longer its own (taken over with token + 1 by the watcher that took the
    polling over too) and leaves the post to it."""
    sid = "ses_wl_002"
    a, b = _two_on_one_stop(real_sbx, slack_api, tmp_path, sid)
    diagnose = a.diagnoser.diagnose_and_record

    def stalled(session_id: str, actor: str) -> Any:
        answer = diagnose(session_id, actor)
        a.leases.every = 60.0  # the renewing thread stalls too (it waits 60 s)
        time.sleep(1.3)
        assert b.poll_once().standby is None  # the leases ran out: b polls, takes the claim over, posts it
        return answer

    a.leases.every = 60.0
    monkeypatch.setattr(a, "diagnoser", type("D", (), {"diagnose_and_record": staticmethod(stalled)})())
    a.poll_once()
    posts = [p.text for p in slack_api.roots(CHANNEL) if f"Stopped: {sid} " in p.text]
    assert len(posts) == 1, posts
    taken = [s for s in a.store.steps() if s.step == "watch_stop" and s.outcome == "taken_over"]
    assert len(taken) == 1 and a.saved.counts() == {"posted": 1}
    assert taken[0].detail["token"] == 2 and taken[0].detail["from"] == a.owner
