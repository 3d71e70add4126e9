"""Worker log lines of one session from real (exited) worker containers: the Docker log source."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from bot.dockerops import DockerLogSource, DockerLogSourceError, WorkerLogConfig
from bot.logs import LogSource
from tests.fixtures.docker import DockerEngine, WorkerSet

pytestmark = pytest.mark.docker

LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def source_for(engine: DockerEngine, project: str, **config: int) -> DockerLogSource:
    return DockerLogSource(
        installation=project, config=WorkerLogConfig(**config), docker_client_factory=engine.factory()
    )


def payload(text: str) -> str:
    """A returned line's text without Docker's timestamp prefix."""
    head, _, rest = text.partition(" ")
    return rest if head[:4].isdigit() and "T" in head else text


def test_a_sessions_lines_are_found_among_other_sessions_workers(
    docker_engine: DockerEngine, worker_containers: Callable[..., WorkerSet]
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=3)
    source = source_for(docker_engine, ws.project)
    assert isinstance(source, LogSource)
    scan = source.lines_for_session(ws.session_id, since=LONG_AGO)
    lines = list(scan)
    assert [payload(line.text) for line in lines] == ws.expected_lines
    assert all(line.session_id == ws.session_id for line in lines)
    # Only the session's own worker was read (selected by label), running or exited alike.
    own = ws.containers[-1]
    assert source.last_containers == [own]
    assert {line.source for line in lines} == {f"docker:{own}"}
    # The worker also logged another session's line and garbage: both left out.
    left_out = [t for t in ws.scenario_lines if t not in ws.expected_lines]
    assert any("ses_other_2" in t for t in left_out) and any("panic" in t for t in left_out)
    assert not any("ses_other_2" in line.text or "panic" in line.text for line in lines)
    assert scan.stats.lines_matched == len(ws.expected_lines) and not scan.stats.truncated
    # The structured fields diagnose needs are parsed (JSON, logfmt-like and plain lines).
    events = [line.event for line in lines]
    assert "worker.turn.interrupt.stage" in events and "worker.stopping" in events
    assert any(line.get("recognised") == "interrupt_unanswered" for line in lines)
    assert all(line.ts is not None for line in lines)


def test_the_window_is_measured_on_the_docker_hosts_clock(
    docker_engine: DockerEngine, worker_containers: Callable[..., WorkerSet]
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=0)
    all_lines = list(source_for(docker_engine, ws.project).lines_for_session(ws.session_id, since=LONG_AGO))
    # The scenario's first line is 5 minutes old, the others at most ~2 minutes: a 4-minute window
    # (from the daemon's "now") drops exactly the lines older than that.
    recent = list(
        source_for(docker_engine, ws.project, window_seconds=240).lines_for_session(ws.session_id, since=LONG_AGO)
    )
    daemon_now = datetime.fromisoformat(docker_engine.client.info()["SystemTime"][:26] + "+00:00")
    expected = [ln for ln in all_lines if ln.ts is not None and ln.ts >= daemon_now - timedelta(seconds=240)]
    assert [ln.text for ln in recent] == [ln.text for ln in expected]
    assert 0 < len(recent) < len(all_lines)
    # An explicit since/until narrows further.
    until = min(ln.ts for ln in recent if ln.ts is not None) + timedelta(milliseconds=1)
    narrowed = list(source_for(docker_engine, ws.project).lines_for_session(ws.session_id, since=LONG_AGO, until=until))
    assert narrowed and all(ln.ts is not None and ln.ts <= until for ln in narrowed)
    assert len(narrowed) < len(all_lines)


def test_a_huge_worker_log_is_streamed_not_loaded_whole(
    docker_engine: DockerEngine, worker_containers: Callable[..., WorkerSet]
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=0, filler_bytes=40 * 1024 * 1024)
    source = source_for(docker_engine, ws.project)
    tracemalloc.start()
    try:
        scan = source.lines_for_session(ws.session_id, since=LONG_AGO)
        lines = list(scan)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [payload(line.text) for line in lines] == ws.expected_lines
    assert scan.stats.bytes_read > 40 * 1024 * 1024  # the whole log went through the scanner…
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes"  # …but never sat in memory
    assert not scan.stats.truncated


def test_the_byte_budget_stops_the_scan_and_says_so(
    docker_engine: DockerEngine, worker_containers: Callable[..., WorkerSet]
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=0, filler_bytes=8 * 1024 * 1024)
    budget = 1024 * 1024
    scan = source_for(docker_engine, ws.project).lines_for_session(ws.session_id, since=LONG_AGO, byte_budget=budget)
    lines = list(scan)
    assert scan.stats.truncated
    assert scan.stats.bytes_read <= budget
    assert lines == []  # the session's lines come after the filler: not reached, and it says so


@pytest.mark.parametrize("typed", ["ses_1; rm -rf /", "$(id)", "`id`", "ses_1\nses_2", "", "a" * 200])
def test_hostile_session_ids_are_refused(docker_engine: DockerEngine, typed: str) -> None:
    source = source_for(docker_engine, "rbtx")
    with pytest.raises(DockerLogSourceError, match="is not a session id"):
        source.lines_for_session(typed, since=LONG_AGO)


def test_no_worker_for_the_session_gives_no_lines(
    docker_engine: DockerEngine, worker_containers: Callable[..., WorkerSet]
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=1)
    source = source_for(docker_engine, ws.project)
    scan = source.lines_for_session("ses_nobody_here", since=LONG_AGO)
    assert list(scan) == [] and source.last_containers == []


def test_segments_read_the_newest_lines_first_and_every_line_exactly_once(
    docker_engine: DockerEngine, worker_containers: Callable[..., WorkerSet]
) -> None:
    # ~45,000 lines: three tail steps (16,384, then up to 65,536 lines from the end, short: the start).
    ws = worker_containers(
        "unknown_unanswered", other_sessions=1, filler_bytes=4 * 1024 * 1024, trailing_filler_bytes=3 * 1024 * 1024
    )
    source = source_for(docker_engine, ws.project)
    segments = []
    for segment in source.segments_for_session(ws.session_id, since=LONG_AGO):
        segments.append((segment, list(segment.scan)))
    ranks = [s.rank for s, _ in segments]
    assert ranks == sorted(ranks, reverse=True) and len(ranks) == 2, ranks  # newest stretch first
    assert segments[0][0].label == "newest lines" and segments[0][0].coverage.lines == 16384
    assert all(s.coverage.complete for s, _ in segments)
    # Together, in rank order, they are the whole log: each line once, the session's lines in order.
    in_order = [line for _, lines in sorted(segments, key=lambda p: p[0].rank) for line in lines]
    assert [payload(line.text) for line in in_order] == ws.expected_lines
    own = ws.containers[-1]
    total = docker_engine.client.containers.get(own).logs().count(b"\n")
    assert sum(s.coverage.lines for s, _ in segments) == total
    assert segments[-1][0].coverage.first_ts is not None
    assert segments[-1][0].coverage.first_ts <= segments[0][0].coverage.first_ts  # older first line


def test_segments_of_a_running_or_early_focus_worker_are_read_forwards(
    docker_engine: DockerEngine, worker_containers: Callable[..., WorkerSet]
) -> None:
    ws = worker_containers("unknown_unanswered", other_sessions=0, filler_bytes=1024 * 1024)
    source = source_for(docker_engine, ws.project)
    long_before = (LONG_AGO, LONG_AGO + timedelta(minutes=5))  # a focus long before the worker ran
    segments = [
        (s, list(s.scan)) for s in source.segments_for_session(ws.session_id, since=LONG_AGO, focus=long_before)
    ]
    assert [s.label for s, _ in segments] == ["forwards"]
    assert [payload(line.text) for line in segments[0][1]] == ws.expected_lines
