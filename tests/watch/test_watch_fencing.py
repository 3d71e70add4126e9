"""Watch posts and polls under leases with fencing tokens (bot/store/leases.py), over the sandbox
(HTTP), a real SQLite file and the Slack Web API stand-in.

A watcher deposed while it was paused (its claim taken over with token + 1 once the store's clock
passed its lease) posts nothing and marks nothing, for a stop and for a shift change's hand-off; one
watcher polls an installation at a time and the other takes the polling over when it stops or dies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.clock import ManualClock
from bot.sandbox import SandboxHandle
from bot.watch import Watcher
from bot.watch.shifts import say_handoff
from bot.watch.status import poller_text
from tests.fixtures.slack import SlackStandIn
from tests.watch.test_watcher import CHANNEL, _healthy, _named, edited_runbooks, make_watcher, sbx

__all__ = ["make_watcher", "sbx"]  # the fixtures, shared with the watcher's own tests

LEASE = 120  # the packaged runbooks' claim_lease


@pytest.fixture
def on(store_target: str | Path, tmp_path: Path) -> dict[str, Any]:
    """Both engines: ``make_watcher``'s store, a SQLite file or a PostgreSQL schema (``db_url``)."""
    if isinstance(store_target, Path):
        return {"db": store_target}
    return {"db": tmp_path / "recover.db", "db_url": SecretStr(str(store_target))}


def _claim(w: Watcher, sid: str, clock: ManualClock) -> Any:
    return w.saved.claim(
        w._stop_of(w.client.get_session(sid)),
        actor=w.owner,
        now=clock.now(),
        flap_window=3600,
        storm_window=300,
        storm_threshold=10,
        paused=False,
        lease=LEASE,
    )


def test_a_deposed_watcher_neither_posts_nor_marks_its_stop(
    sbx: SandboxHandle,
    make_watcher: Callable[..., Watcher],
    slack_api: SlackStandIn,
    clock: ManualClock,
    on: dict[str, Any],
) -> None:
    (sid,) = _healthy(sbx, 1, "ses_wf")
    sbx.admin.stop(sid)
    a, b = make_watcher(**on), make_watcher(**on)
    assert (a.store.path is None) == ("db_url" in on)  # the engine asked for: no SQLite file on PostgreSQL
    mine = _claim(a, sid, clock)  # committed under token 1; then watcher a pauses
    assert mine is not None and mine.lease is not None and mine.lease.token == 1
    clock.advance(LEASE + 1)  # past a's lease: b takes the polling and the claim over, and posts it
    assert b.poll_once().complete
    assert len(_named(slack_api, sid)) == 1
    (taken,) = [s for s in b.store.steps() if s.step == "watch_stop" and s.outcome == "taken_over"]
    assert taken.detail is not None and taken.detail["token"] == mine.lease.token + 1
    a._say(mine, clock.now())  # a wakes up and says its stop: refused at the fence
    assert len(_named(slack_api, sid)) == 1, _named(slack_api, sid)  # exactly one post
    assert not a.saved.posted(mine.stop.key, CHANNEL, "late.ts", root_ts="late.ts", now=clock.now(), lease=mine.lease)
    assert b.status().counts == {"posted": 1}
    assert a.errors == 0  # LeaseLost is logged, never raised to the loop


def _shift_runbooks(tmp_path: Path) -> Path:
    # The clock reads 11:00 in Berlin: a shift changes now.
    return edited_runbooks(
        tmp_path,
        '# handoff: {times: ["07:00", "19:00"], time_zone: Europe/Berlin}',
        'handoff: {times: ["11:00", "23:00"], time_zone: Europe/Berlin}',
    )


def test_a_deposed_watcher_posts_no_part_of_a_hand_off_and_the_taker_posts_it_once(
    sbx: SandboxHandle,
    make_watcher: Callable[..., Watcher],
    slack_api: SlackStandIn,
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    runbooks = _shift_runbooks(tmp_path)
    a, b = make_watcher(runbooks_dir=runbooks), make_watcher(runbooks_dir=runbooks)
    name = "handoff:2026-11-29T10:00:00.000Z"
    mine = a.saved.claim_handoff(name, actor=a.owner, now=clock.now(), lease=LEASE)
    assert mine is not None and mine.lease is not None and mine.lease.job == name  # then a pauses
    clock.advance(LEASE + 1)
    assert b.poll_once().complete  # the taker: looks for each part, posts the hand-off once
    heads = [p for p in slack_api.roots(CHANNEL) if "Shift change" in p.text]
    assert len(heads) == 1, [p.text for p in slack_api.roots(CHANNEL)]
    said = len(slack_api.calls_to("chat.postMessage"))
    say_handoff(a.saved, a.poster, a.channel, a.runbooks, a.handoff, mine, a.leases, clock.now(), look=False)
    assert len([p for p in slack_api.roots(CHANNEL) if "Shift change" in p.text]) == 1
    assert len(slack_api.calls_to("chat.postMessage")) == said  # the deposed watcher posted nothing at all
    assert not a.saved.rooted(mine.stop.key, CHANNEL, "late.ts", lease=mine.lease)
    lease = b.store.leases.get(name)
    assert lease is not None and lease.token == mine.lease.token + 1 and lease.holder == b.owner


def test_one_watcher_polls_the_other_stands_by_and_takes_over_when_it_stops_or_dies(
    sbx: SandboxHandle,
    make_watcher: Callable[..., Watcher],
    slack_api: SlackStandIn,
    clock: ManualClock,
    on: dict[str, Any],
) -> None:
    a, b = make_watcher(**on), make_watcher(**on)
    assert a.poll_once().complete
    standby = b.poll_once()
    assert standby.standby == a.owner and not standby.complete and b.errors == 0
    assert b.status().poller == a.owner and not b.status().polling
    assert "stands by" in poller_text(b.status()) and "this bot" in poller_text(a.status())
    assert "polled by" in b.status_reply().messages[0].plain_text()
    assert b.health()["poller"] == a.owner
    # a stops cleanly: its lease is handed on at once.
    a.stop()
    assert b.poll_once().complete and b.status().polling
    assert a.poll_once().standby == b.owner  # a's next poll (were it to run) stands by
    # b dies (no more polls, no release): a takes over once its poll lease ran out, with token + 1.
    before = b.store.leases.get(b.poll_job)
    assert before is not None
    assert a.poll_once().standby == b.owner
    clock.advance(b.poll_ttl() + 1)
    assert a.poll_once().complete
    after = a.store.leases.get(a.poll_job)
    assert after is not None and after.holder == a.owner and after.token == before.token + 1


def test_a_claim_written_before_leases_is_taken_over_as_run_out(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    """A store written before leases: a claimed stop with no lease row (its own ``lease_until`` still
    in the future) is treated as run out, taken over and posted once."""
    (sid,) = _healthy(sbx, 1, "ses_wl")
    sbx.admin.stop(sid)
    old = make_watcher()
    claim = _claim(old, sid, clock)
    assert claim is not None and claim.lease is not None
    with old.store.write() as db:  # what an older bot left: its row's lease column, no lease row
        db.execute("DELETE FROM leases WHERE job = ?", [claim.lease.job])
        db.execute("UPDATE watch_stops SET lease_until = '2099-01-01T00:00:00.000Z' WHERE key = ?", [claim.stop.key])
    new = make_watcher()
    assert new.poll_once().complete
    assert len(_named(slack_api, sid)) == 1 and new.status().counts == {"posted": 1}
    lease = new.store.leases.get(claim.lease.job)
    assert lease is not None and lease.holder == new.owner


def test_a_stop_held_by_a_pause_is_said_only_under_a_lease_of_its_own(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    """At the pause's end a still-stuck stop whose job another holder's running lease covers is left to
    that holder (not posted unfenced); once that lease ran out it is taken over and said once."""
    (sid,) = _healthy(sbx, 1, "ses_wp")
    slack_api.channel_members[CHANNEL] = ["U0ALICE"]
    w = make_watcher()
    w.pause("U0ALICE", None)
    sbx.admin.stop(sid)
    w.poll_once()
    (key,) = [s.inputs["key"] for s in w.store.steps() if s.step == "watch_stop"]
    assert w.store.leases.acquire(f"watch:{key}", "watch:elsewhere:1:x", ttl=LEASE) is not None
    w.resume("U0ALICE")
    w.poll_once()
    assert _named(slack_api, sid) == []  # another holder's to say while its lease runs
    clock.advance(LEASE + 1)
    w.poll_once()
    assert len(_named(slack_api, sid)) == 1 and w.status().counts == {"posted": 1}
