"""Watch mode against the sandbox over HTTP, a real SQLite file and the Slack Web API stand-in.

Each stop is posted exactly once, by one watcher or two on one store file, across a restart and a
failing listing; a stop that happens again within the flap window goes to its case's thread; a
burst becomes one triage message updated in place (R2.1, R2.12, R3.1).
"""

from __future__ import annotations

import csv
import html
import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.app.compose import FrontPorts
from bot.clock import ManualClock, parse_time
from bot.csvfile import FORMULA_STARTS
from bot.sandbox import SandboxHandle
from bot.settings import load_settings
from bot.slack import make_client
from bot.slack.watching import SlackChannelMembers, SlackWatchPoster
from bot.slack.web import SlackOut
from bot.watch import Watcher, WatchStore
from bot.watch.stops import Stop
from tests.fixtures.composing import composed
from tests.fixtures.slack import SlackStandIn, slack_settings
from tests.fixtures.triage import clone
from tests.fixtures.watch import runbook_copy

CHANNEL = "C0WATCH"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sbx(sandbox_factory: Callable[..., SandboxHandle]) -> SandboxHandle:
    return sandbox_factory(scenarios=None)


@pytest.fixture
def make_watcher(sbx: SandboxHandle, slack_api: SlackStandIn, tmp_path: Path) -> Iterator[Callable[..., Watcher]]:
    """A watcher as serve builds it: its own services on the shared store file, posting to the stand-in."""

    def make(db: Path | None = None, **overrides: Any) -> Watcher:
        db = db or tmp_path / "recover.db"
        settings = load_settings({}, dotenv=None).model_copy(
            update={"db_path": db, "watch_channel": CHANNEL, **overrides}
        )
        out = SlackOut(make_client(slack_settings(slack_api, db)))
        ports = FrontPorts(
            watch_poster=lambda installation, named: SlackWatchPoster(out), members=SlackChannelMembers(out.client)
        )
        return composed(settings, sandbox=sbx, ports=ports, startup=False).watchers["default"]

    yield make


def edited_runbooks(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the packaged runbooks with one edit to session-recovery.yaml."""
    return runbook_copy(tmp_path / "runbooks", (old, new))


def _healthy(sbx: SandboxHandle, n: int, prefix: str = "ses_w") -> list[str]:
    ids = [f"{prefix}_{i:03d}" for i in range(n)]
    for sid in ids:
        sbx.admin.create_session(clone("healthy", sid))
    return ids


def _roots(api: SlackStandIn) -> list[str]:
    return [p.text for p in api.roots(CHANNEL)]


def _named(api: SlackStandIn, sid: str) -> list[str]:
    return [t for t in _roots(api) if f"Stopped: {sid} " in t]


def test_two_watchers_on_one_store_post_each_stop_exactly_once(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn
) -> None:
    a, b = make_watcher(), make_watcher()
    ids = _healthy(sbx, 6)
    assert a.poll_once().complete
    assert b.poll_once().standby == a.owner  # one bot polls an installation; the other stands by
    assert _roots(slack_api) == []  # nothing stopped yet
    for i, sid in enumerate(ids):
        sbx.admin.stop(sid, failures=3)
        (a if i % 2 else b).poll_once()
        (b if i % 2 else a).poll_once()
    # The revision moves while the session stays stopped the same way: still the same stop.
    sbx.admin.stop(ids[0], failures=3)
    a.poll_once()
    b.poll_once()
    for sid in ids:
        assert len(_named(slack_api, sid)) == 1, (sid, _roots(slack_api))
    assert len(_roots(slack_api)) == len(ids)
    # The post is diagnose's own answer, naming the stop (R2.1).
    assert "RESTORE_FAILED" in _named(slack_api, ids[0])[0]
    steps = [s for s in a.store.steps() if s.step == "watch_stop"]
    assert len(steps) == len(ids) and {s.session_id for s in steps} == set(ids)
    assert a.status().posted == len(ids)


class Killed(BaseException):
    """The process dies here (a BaseException: no ``except Exception`` of the watcher catches it)."""


class DiesAfterPost:
    """The real Slack poster, and the process killed once Slack answered its first post (the ts
    never reaches the store)."""

    def __init__(self, inner: SlackWatchPoster) -> None:
        self.inner = inner

    def post(self, channel: str, message: Any, thread_ts: str | None = None) -> str | None:
        self.inner.post(channel, message, thread_ts)
        raise Killed

    def update(self, channel: str, ts: str, message: Any) -> bool:
        return self.inner.update(channel, ts, message)

    def find(self, channel: str, text: str, thread_ts: str | None = None) -> str | None:
        return self.inner.find(channel, text, thread_ts)


def test_a_claim_killed_before_its_post_is_taken_over_once_its_lease_runs_out(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    """The key is committed before the post: a process killed between the two leaves it claimed
    until its lease runs out; then one live watcher, finding nothing in the channel, posts it."""
    (sid,) = _healthy(sbx, 1)
    sbx.admin.stop(sid)
    first = make_watcher()
    session = first.client.get_session(sid)
    claim = first.saved.claim(
        first._stop_of(session),
        actor=first.owner,
        now=first.clock.now(),
        flap_window=3600,
        storm_window=300,
        storm_threshold=10,
        paused=False,
        lease=120,
    )
    assert claim is not None  # committed; the process "dies" before posting
    second, third = make_watcher(), make_watcher()
    second.poll_once()
    assert _roots(slack_api) == []  # its owner may still be posting it
    assert second.status().counts == {"claimed": 1}
    assert "claimed, post unconfirmed" in second.status_reply().messages[0].plain_text()
    clock.advance(121)
    second.poll_once()
    third.poll_once()
    assert len(_named(slack_api, sid)) == 1 and second.status().counts == {"posted": 1}
    assert len(slack_api.calls_to("conversations.history")) == 1  # looked first, then posted
    taken = [s for s in second.store.steps() if s.step == "watch_stop" and s.outcome == "taken_over"]
    assert len(taken) == 1 and taken[0].actor == "watch"


def test_a_kill_after_slack_answered_but_before_the_ts_was_stored_posts_no_duplicate(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    (sid,) = _healthy(sbx, 1)
    sbx.admin.stop(sid)
    first = make_watcher()
    first.poster = DiesAfterPost(first.poster)  # type: ignore[arg-type]
    with pytest.raises(Killed):
        first.poll_once()
    assert len(_named(slack_api, sid)) == 1  # in the channel, but the store never heard
    second = make_watcher()
    second.poll_once()
    assert second.status().counts == {"claimed": 1}  # within the lease: left to its owner
    clock.advance(121)
    second.poll_once()
    second.poll_once()
    assert len(_named(slack_api, sid)) == 1  # found by its key, not posted again
    assert second.status().counts == {"posted": 1}
    assert slack_api.calls_to("conversations.history")


def test_a_kill_after_a_thread_reply_reached_slack_posts_no_second_reply(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    """A flapping session's stop is said in its case's thread: the taker looks there (conversations.replies)."""
    (sid,) = _healthy(sbx, 1)
    first = make_watcher()
    sbx.admin.stop(sid, failures=3)
    first.poll_once()
    (root,) = slack_api.roots(CHANNEL)
    sbx.admin.settle(sid)
    first.poll_once()
    clock.advance(120)
    sbx.admin.stop(sid, failures=3)
    first.stop()  # hands the polling over to the watcher that dies
    dying = make_watcher()
    dying.poster = DiesAfterPost(dying.poster)  # type: ignore[arg-type]
    with pytest.raises(Killed):
        dying.poll_once()
    clock.advance(121)
    first.poll_once()
    first.poll_once()
    replies = [p.text for p in slack_api.thread(CHANNEL, root.ts) if p.ts != root.ts]
    assert len([t for t in replies if f"Stopped again: {sid}" in t]) == 1, replies
    assert slack_api.calls_to("conversations.replies") and first.status().counts == {"posted": 2}


def test_restart_posts_what_stopped_while_down_and_nothing_twice(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    one, two = _healthy(sbx, 2)
    first = make_watcher()
    sbx.admin.stop(one)
    first.poll_once()
    assert len(_named(slack_api, one)) == 1
    first.stop()
    del first
    sbx.admin.stop(two)  # while no bot runs
    clock.advance(600)
    again = make_watcher()
    again.poll_once()
    again.poll_once()
    assert len(_named(slack_api, one)) == 1 and len(_named(slack_api, two)) == 1
    assert len(_roots(slack_api)) == 2


def test_a_failing_listing_is_said_once_and_its_recovery_too(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn
) -> None:
    (sid,) = _healthy(sbx, 1)
    a, b = make_watcher(), make_watcher()
    sbx.admin.fault("server_error", "/v1/sessions", method="GET", times=None, status=503)
    sbx.admin.stop(sid)
    for _ in range(5):
        assert not a.poll_once().complete
        assert not b.poll_once().complete
    warnings = [t for t in _roots(slack_api) if "cannot read the session listing" in t]
    assert len(warnings) == 1, _roots(slack_api)
    assert a.health()["ok"] is False and b.health()["ok"] is False
    assert "cannot read the listing since" in b.status_reply().messages[0].headline
    sbx.admin.clear_faults()
    a.poll_once()
    b.poll_once()
    assert len([t for t in _roots(slack_api) if "reads the session listing again" in t]) == 1
    assert len(_named(slack_api, sid)) == 1  # the stop missed meanwhile is posted now
    assert a.health()["ok"] is True
    assert [s.outcome for s in a.store.steps() if s.step == "watch_health"] == ["failing", "recovered"]


def test_a_session_stopping_again_within_the_flap_window_updates_its_thread(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    (sid,) = _healthy(sbx, 1)
    w = make_watcher()
    sbx.admin.stop(sid, failures=3)
    w.poll_once()
    (root,) = slack_api.roots(CHANNEL)
    # It was recovered, then stopped again the same way: a new stop of the same session (R2.1).
    sbx.admin.settle(sid)
    w.poll_once()
    clock.advance(120)
    sbx.admin.stop(sid, failures=3)
    w.poll_once()
    w.poll_once()
    assert len(slack_api.roots(CHANNEL)) == 1
    replies = [p.text for p in slack_api.thread(CHANNEL, root.ts) if p.ts != root.ts]
    assert len([t for t in replies if f"Stopped again: {sid}" in t]) == 1, replies
    # Past the flap window, a stop opens a new case.
    sbx.admin.settle(sid)
    w.poll_once()
    clock.advance(2 * 3600)
    sbx.admin.stop(sid, code="STARTUP_FAILED", reason="startup_failed", failures=3)
    w.poll_once()
    assert len(_named(slack_api, sid)) == 2


def test_a_storm_is_one_triage_message_updated_in_place(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn
) -> None:
    ids = _healthy(sbx, 14)
    a, b = make_watcher(), make_watcher()
    a.poll_once()
    for sid in ids[:5]:
        sbx.admin.stop(sid)
    a.poll_once()
    assert len([t for t in _roots(slack_api) if "Stopped: " in t]) == 5  # up to the threshold: cases
    for sid in ids[5:12]:
        sbx.admin.stop(sid)  # 12 within the storm window: more than the runbook's storm_threshold (10)
    a.poll_once()
    b.poll_once()
    storm = [p for p in slack_api.roots(CHANNEL) if "Many sessions stopped at once" in p.text]
    assert len(storm) == 1
    assert len([t for t in _roots(slack_api) if "Stopped: " in t]) == 5  # the 7 new are in the triage message
    for sid in ids[12:]:
        sbx.admin.stop(sid)
    b.poll_once()
    a.poll_once()
    storm = [p for p in slack_api.roots(CHANNEL) if "Many sessions stopped at once" in p.text]
    assert len(storm) == 1 and storm[0].updates >= 1
    assert len([t for t in _roots(slack_api) if "Stopped: " in t]) == 5


def test_the_storm_file_holds_one_row_per_real_session_and_no_formula(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn
) -> None:
    """The storm's attached triage file, as the channel shows it, read back with ``csv.reader``: a
    reason from the control host with a newline, commas and a formula adds no row and no formula."""
    hostile = 'x\nses_fake,close,=HYPERLINK("https://e","fix")'
    ids = _healthy(sbx, 12)
    w = make_watcher()
    w.poll_once()
    for sid in ids:
        sbx.admin.stop(sid, reason=hostile if sid == ids[0] else '=HYPERLINK("https://e","fix")')
    w.poll_once()
    (storm,) = [p for p in slack_api.roots(CHANNEL) if "Many sessions stopped at once" in p.text]
    (preview,) = [t for t in storm.block_texts() if t.startswith("```")]
    shown = html.unescape(preview.split("```")[1])  # the file's text, as the preview's code block holds it
    rows = list(csv.reader(io.StringIO(shown, newline="")))
    assert rows[0][:2] == ["group", "session_id"] and len(rows) == 1 + len(ids)
    assert sorted(r[1] for r in rows[1:]) == ids  # exactly one row per real session: no ses_fake
    assert {r[1]: r[4] for r in rows[1:]}[ids[0]] == hostile
    assert not any(cell.startswith(FORMULA_STARTS) for r in rows for cell in r)


def test_a_burst_found_in_one_poll_is_one_post_not_the_first_cases_then_the_storm(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    """The sandbox's scheduled burst: 120 sessions stop at once; two watchers post one message."""
    a, b = make_watcher(), make_watcher()
    sbx.admin.schedule({"burst": 120, "at": 10, "prefix": "ses_wb"})
    a.poll_once()
    clock.advance(10)
    a.poll_once()
    b.poll_once()
    a.poll_once()
    roots = _roots(slack_api)
    assert len(roots) == 1 and "Many sessions stopped at once" in roots[0], roots  # at most 3: here 1
    assert a.status().counts == {"storm": 120}


def test_a_storms_first_word_is_posted_before_its_triage_and_edited_into_it(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    """120 sessions stop at once: the poll that sees them says "120 sessions stopped, triage running"
    before the triage reads a single session, then edits that same message into the triage (one
    chat.postMessage, then chat.update); a single stop afterwards is still its own case post."""
    w = make_watcher()
    sbx.admin.schedule({"burst": 120, "at": 10, "prefix": "ses_fw"})
    _healthy(sbx, 1, prefix="ses_fw_single")
    w.poll_once()
    clock.advance(10)
    w.poll_once()
    (storm,) = slack_api.roots(CHANNEL)
    posts = [c for c in slack_api.calls_to("chat.postMessage") if c.params.get("channel") == CHANNEL]
    assert len(posts) == 1 and "120 sessions stopped, triage running" in str(posts[0].params.get("text"))
    assert storm.history and "120 sessions stopped, triage running" in storm.history[0]
    assert storm.updates >= 1 and "triage running" not in storm.all_text()  # now the triage itself
    assert "Many sessions stopped at once" in storm.text and "t1.g1" in storm.all_text()
    # Said before the triage read anything: the post came before the first per-session read.
    offset = time.time() - time.monotonic()
    reads = [parse_time(r["at"]) for r in sbx.admin.requests() if r["path"].endswith(("/events", "/turns"))]
    first_read = min(r for r in reads if r is not None).timestamp()
    assert posts[0].at + offset < first_read, (posts[0].at + offset, first_read)
    sbx.admin.stop("ses_fw_single_000")
    clock.advance(400)  # past the storm window: one stop is a case again
    w.poll_once()
    roots = _roots(slack_api)
    assert len(roots) == 2 and "Stopped: ses_fw_single_000 " in roots[1], roots
    assert not any("triage running" in t for t in roots)


def test_pause_holds_posts_and_resume_posts_again(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, clock: ManualClock
) -> None:
    one, two = _healthy(sbx, 2)
    slack_api.channel_members[CHANNEL] = ["U0ALICE", "U0BOB"]
    w = make_watcher()
    reply = w.pause("U0ALICE", 3600)
    assert "paused until" in reply.messages[0].headline
    sbx.admin.stop(one)
    w.poll_once()
    assert _roots(slack_api) == [] and w.status().held == 1
    assert "1 stop(s) held" in w.status_reply().messages[0].headline
    clock.advance(3601)  # --for ran out: what it held is said now, nothing lost
    sbx.admin.stop(two)
    w.poll_once()
    w.poll_once()
    digests = [t for t in _roots(slack_api) if "Watch pause over" in t]
    assert len(digests) == 1 and f"{one}:" in digests[0] and two not in digests[0]
    assert len(_named(slack_api, two)) == 1 and len(_named(slack_api, one)) == 1
    assert w.status().held == 0
    w.pause("U0ALICE", None)
    w.resume("U0BOB")
    assert [(s.actor, s.outcome) for s in w.store.steps() if s.step == "watch"] == [
        ("U0ALICE", "paused"),
        ("U0ALICE", "paused"),
        ("U0BOB", "resumed"),
    ]
    text = w.status_reply().messages[0].plain_text()
    assert "last poll" in text and "next poll" in text and "posted: 2" in text


def test_a_pause_holds_across_a_restart_and_names_what_recovered_meanwhile(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn
) -> None:
    stuck, healed = _healthy(sbx, 2)
    slack_api.channel_members[CHANNEL] = ["U0ALICE"]
    w = make_watcher()
    w.pause("U0ALICE", None)
    sbx.admin.stop(stuck)
    sbx.admin.stop(healed)
    w.poll_once()
    assert _roots(slack_api) == [] and w.status().held == 2
    sbx.admin.settle(healed)  # it recovered meanwhile: no longer listed
    # A new process on the same store file resumes: the held stops live in the store, not in memory.
    w.stop()  # the old process stopped: its poll lease is handed on
    again = make_watcher()
    again.resume("U0ALICE")
    again.poll_once()
    roots = _roots(slack_api)
    (digest,) = [t for t in roots if "Watch pause over" in t]
    assert f"{stuck}:" in digest and "still stuck" in digest
    assert len(_named(slack_api, stuck)) == 1
    assert f"{healed}:" in digest and "no longer stopped" in digest and _named(slack_api, healed) == []
    assert [s.outcome for s in again.store.steps() if s.step == "watch_digest"] == ["pause_over"]


def test_many_stops_held_by_a_pause_become_one_storm_message_at_resume(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn
) -> None:
    ids = _healthy(sbx, 14)
    slack_api.channel_members[CHANNEL] = ["U0ALICE"]
    w = make_watcher()
    w.pause("U0ALICE", None)
    for sid in ids:
        sbx.admin.stop(sid)
    w.poll_once()
    w.resume("U0ALICE")
    w.poll_once()
    roots = _roots(slack_api)
    assert len(roots) == 2, roots  # the digest, then one storm triage: not 14 posts
    assert "Watch pause over: 14 session(s) stopped during the pause, 14 still stuck" in roots[0]
    assert "Many sessions stopped at once" in roots[1]


def test_stop_identity_moves_with_what_stopped_it_not_with_the_revision() -> None:
    base = Stop("ses_1", "RESTORE_FAILED", "restore_refused", 3, None, 7)
    assert base.signature == Stop("ses_1", "RESTORE_FAILED", "restore_refused", 3, None, 9).signature
    assert base.key != Stop("ses_1", "RESTORE_FAILED", "restore_refused", 3, None, 9).key
    assert base.signature != Stop("ses_1", "RESTORE_FAILED", "restore_refused", 4, None, 7).signature
    assert base.signature != Stop("ses_1", "OUTCOME_UNKNOWN", None, None, "turn_9", 7).signature


def test_watch_store_needs_its_migrations(tmp_path: Path) -> None:
    from bot.errors import StoreError
    from bot.store import Store

    with pytest.raises(StoreError, match="'watch' migrations"):
        WatchStore(Store(tmp_path / "x.db"), "default")


def test_quiet_hours_hold_posts_and_end_with_one_digest(
    sbx: SandboxHandle,
    make_watcher: Callable[..., Watcher],
    slack_api: SlackStandIn,
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    # The test clock reads 11:00 in Berlin: quiet until 11:30.
    runbooks = edited_runbooks(
        tmp_path,
        '  # quiet_hours: {start: "23:00", end: "07:00", time_zone: Europe/Berlin}',
        '  quiet_hours: {start: "11:00", end: "11:30", time_zone: Europe/Berlin}',
    )
    ids = _healthy(sbx, 4)
    a, b = make_watcher(runbooks_dir=runbooks), make_watcher(runbooks_dir=runbooks)
    for sid in ids[:3]:
        sbx.admin.stop(sid)
    a.poll_once()
    b.poll_once()
    assert _roots(slack_api) == []
    assert "held for the quiet-hours digest: 3" in a.status_reply().messages[0].plain_text()
    clock.advance(31 * 60)
    sbx.admin.stop(ids[3])
    b.poll_once()
    a.poll_once()
    digests = [t for t in _roots(slack_api) if "Quiet hours are over (11:00–11:30 Europe/Berlin)" in t]
    assert len(digests) == 1, _roots(slack_api)
    assert all(sid in digests[0] for sid in ids[:3]) and "3 session(s) stopped meanwhile" in digests[0]
    assert len(_named(slack_api, ids[3])) == 1 and all(_named(slack_api, sid) == [] for sid in ids[:3])
    assert [s.outcome for s in a.store.steps() if s.step == "watch_digest"] == ["taken"]


def test_each_shift_change_posts_one_hand_off_across_two_bots_and_a_restart(
    sbx: SandboxHandle,
    make_watcher: Callable[..., Watcher],
    slack_api: SlackStandIn,
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    # The test clock reads 11:00 in Berlin: a shift changes now, and at 11:30.
    runbooks = edited_runbooks(
        tmp_path,
        '# handoff: {times: ["07:00", "19:00"], time_zone: Europe/Berlin}',
        'handoff: {times: ["11:00", "11:30"], time_zone: Europe/Berlin}',
    )
    (sid,) = _healthy(sbx, 1)
    sbx.admin.stop(sid)
    a, b = make_watcher(runbooks_dir=runbooks), make_watcher(runbooks_dir=runbooks)
    a.poll_once()
    b.poll_once()
    handoffs = [t for t in _roots(slack_api) if "Shift change 11:00 Europe/Berlin: hand-off." in t]
    assert len(handoffs) == 1, _roots(slack_api)
    (root,) = [p for p in slack_api.roots(CHANNEL) if "Shift change" in p.text]
    assert "1 open case(s)" in root.text
    assert sid in "\n".join(p.all_text() for p in slack_api.thread(CHANNEL, root.ts))  # the case, in its thread
    clock.advance(600)
    restarted = make_watcher(runbooks_dir=runbooks)
    restarted.poll_once()
    b.poll_once()
    assert len([t for t in _roots(slack_api) if "Shift change" in t]) == 1
    clock.advance(20 * 60)  # 11:30
    b.poll_once()
    restarted.poll_once()
    later = [t for t in _roots(slack_api) if "Shift change 11:30 Europe/Berlin" in t]
    assert len(later) == 1 and "Watch saw 1 new stop(s) during the shift that ended." in later[0]
    assert [s.outcome for s in a.store.steps() if s.step == "handoff"].count("posted_by_watch") == 2


def test_a_failing_listing_of_many_pages_misses_nothing_and_posts_nothing_twice(
    sbx: SandboxHandle, make_watcher: Callable[..., Watcher], slack_api: SlackStandIn, tmp_path: Path
) -> None:
    runbooks = edited_runbooks(tmp_path, "bulk_page_size: {count: 500,", "bulk_page_size: {count: 2,")
    ids = _healthy(sbx, 7)
    w = make_watcher(runbooks_dir=runbooks)
    assert w.client.list_sessions_needing_operator(None, limit=2).next is None  # nothing stopped yet
    for sid in ids[:3]:
        sbx.admin.stop(sid)
    assert w.poll_once().complete
    for sid in ids[3:]:
        sbx.admin.stop(sid)
    assert w.client.list_sessions_needing_operator(None, limit=2).next is not None  # four pages now
    sbx.admin.fault("server_error", "/v1/sessions", method="GET", times=None, status=503)
    assert not w.poll_once().complete
    assert "listing cursor: stopped at page 1 (cursor the first page)" in w.status_reply().messages[0].plain_text()
    sbx.admin.clear_faults()
    result = w.poll_once()
    assert result.complete and result.listed == 7
    assert "listing cursor: end of the listing after 4 page(s)" in w.status_reply().messages[0].plain_text()
    for sid in ids:
        assert len(_named(slack_api, sid)) == 1, sid
