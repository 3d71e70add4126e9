"""The bench's watch figures as small correctness tests, over signed Slack HTTP (the real Bolt app,
the Web API stand-in) against the sandbox: 5 % of listing pages failing miss nothing and post nothing
twice; stops during quiet hours end with one digest; a scheduled burst is one channel post
(bench/watch.py measures the same at size)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.sandbox import SandboxHandle
from tests.fixtures.triage import clone
from tests.fixtures.watch import runbook_copy
from tests.watch.test_watcher import CHANNEL

STOPS = 40


def _runbooks(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    return runbook_copy(tmp_path / "runbooks", *edits)


def _watch_said(h: Any) -> str:
    """``/recover watch`` over signed HTTP, as a person in the channel reads it."""
    before = len(h.api.responses)
    assert h.send.command("watch", user="UALICE").status_code == 200
    h.settle()
    return "\n".join(json.dumps(body) for _, body in h.api.responses[before:])


def _cases(h: Any, sid: str) -> int:
    return sum(f"Stopped: {sid} " in p.text for p in h.api.roots(CHANNEL))


def test_five_percent_of_listing_pages_failing_miss_no_stop_and_post_none_twice(
    incident_sandbox: SandboxHandle, slack_harness: Any, tmp_path: Path
) -> None:
    runbooks = _runbooks(
        tmp_path,
        ("bulk_page_size: {count: 500,", "bulk_page_size: {count: 2,"),
        ("storm_threshold: {count: 10,", "storm_threshold: {count: 1000,"),
    )
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL, runbooks_dir=runbooks)
    watcher = h.composed.watchers.get("default")
    assert watcher is not None
    ids = [f"ses_wm_{i:03d}" for i in range(STOPS)]
    for sid in ids:
        incident_sandbox.admin.create_session(clone("healthy", sid))
    fault = incident_sandbox.admin.fault(
        "server_error", "/v1/sessions", method="GET", times=None, probability=0.05, seed=7
    )
    for start in range(0, STOPS, 8):  # stops arrive between polls; each poll reads up to 20 pages
        for sid in ids[start : start + 8]:
            incident_sandbox.admin.stop(sid)
        watcher.poll_once()
    for _ in range(3):
        watcher.poll_once()
    hits = next(f["hits"] for f in incident_sandbox.admin.faults() if f["id"] == fault["id"])
    assert hits > 0  # pages did fail (and were read again)
    assert [sid for sid in ids if _cases(h, sid) != 1] == []  # 0 missed, 0 duplicates
    said = _watch_said(h)
    assert f"posted: {STOPS}" in said and f"seen (last poll): {STOPS}" in said


def test_stops_during_quiet_hours_end_with_one_digest_at_the_window_end(
    incident_sandbox: SandboxHandle, slack_harness: Any, tmp_path: Path
) -> None:
    # The sandbox clock reads 11:00 in Berlin: quiet until 11:30.
    runbooks = _runbooks(
        tmp_path,
        (
            '  # quiet_hours: {start: "23:00", end: "07:00", time_zone: Europe/Berlin}',
            '  quiet_hours: {start: "11:00", end: "11:30", time_zone: Europe/Berlin}',
        ),
    )
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL, runbooks_dir=runbooks)
    a = h.composed.watchers.get("default")
    second = slack_harness.real(
        incident_sandbox, db_path=tmp_path / "slack-real.db", watch_channel=CHANNEL, runbooks_dir=runbooks
    )
    b = second.composed.watchers.get("default")  # a second bot on the same store
    assert a is not None and b is not None
    ids = [f"ses_wq_{i:03d}" for i in range(50)]
    for i, sid in enumerate(ids):
        incident_sandbox.admin.create_session(clone("healthy", sid))
        incident_sandbox.admin.stop(sid)
        if i % 10 == 9:
            incident_sandbox.clock.advance(30)
            (a if i % 20 else b).poll_once()
    a.poll_once()
    assert h.api.roots(CHANNEL) == []  # held, not posted
    assert "held for the quiet-hours digest" in _watch_said(h)
    incident_sandbox.clock.advance(30 * 60)  # past 11:30
    b.poll_once()
    a.poll_once()
    b.poll_once()
    roots = [p.text for p in h.api.roots(CHANNEL)]
    digests = [t for t in roots if "Quiet hours are over (11:00–11:30 Europe/Berlin)" in t]
    assert len(digests) == 1 and "50 session(s) stopped meanwhile" in digests[0], roots
    assert len(roots) == 1  # no case post for a held stop, no storm: the digest says them all
