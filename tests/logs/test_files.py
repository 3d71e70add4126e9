"""FileLogSource over real files: a generated ~50 MB worker log, globs, .gz, budgets and memory."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.logs import FileLogSource, LogScan, LogSource, LogSourceError
from tests.fixtures.logs import GEN_START, GeneratedLog, write_log_file

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def independent_count(path: Path, target: str, limit: int | None = None) -> int:
    """Count the target's lines the slow, obvious way: every line, a whole-id regex."""
    pattern = re.compile(re.escape(target).encode() + rb"(?![A-Za-z0-9_])")
    count = 0
    read = 0
    with path.open("rb") as fh:
        for line in fh:
            read += len(line)
            if limit is not None and read > limit:
                break  # the line cut by the budget does not count
            if pattern.search(line):
                count += 1
    return count


def test_finds_the_sessions_lines_among_other_sessions(generated_log: GeneratedLog) -> None:
    gen = generated_log
    assert gen.size_bytes >= 50 * 1024 * 1024 and gen.target_lines > 50 and gen.confuser_lines > 50
    scan = FileLogSource(str(gen.path)).lines_for_session(gen.target, since=EPOCH, byte_budget=1 << 30)
    lines = list(scan)
    assert len(lines) == gen.target_lines == independent_count(gen.path, gen.target)
    assert all(line.session_id == gen.target and line.source == str(gen.path) for line in lines)
    # Events from all three formats came through, in file order.
    events = {line.event for line in lines}
    assert {"worker.turn.interrupt.stage", "control.result", "worker.stopping", None} <= events
    timed = [line.ts for line in lines if line.ts is not None]
    assert timed == sorted(timed)
    assert scan.stats.truncated is False and scan.stats.bytes_read == gen.size_bytes
    # The confusers (target + "0", a longer id) were seen as candidates and refused.
    assert scan.stats.lines_other_session == gen.confuser_lines


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
def test_grep_agrees_on_candidates(generated_log: GeneratedLog) -> None:
    gen = generated_log
    out = subprocess.run(["grep", "-c", "-F", gen.target, str(gen.path)], capture_output=True, text=True)
    assert int(out.stdout) == gen.target_lines + gen.confuser_lines


def test_time_window_on_parsed_timestamps(generated_log: GeneratedLog) -> None:
    gen = generated_log
    timed = [ts for ts in gen.target_ts if ts is not None]
    since, until = timed[len(timed) // 3], timed[2 * len(timed) // 3]
    lines = list(
        FileLogSource(str(gen.path)).lines_for_session(gen.target, since=since, until=until, byte_budget=1 << 30)
    )
    assert len(lines) == gen.expected_in_window(since, until) < gen.target_lines
    assert all(line.ts is None or since <= line.ts <= until for line in lines)


def test_byte_budget_truncates(generated_log: GeneratedLog) -> None:
    gen = generated_log
    budget = 10 * 1024 * 1024
    scan = FileLogSource(str(gen.path)).lines_for_session(gen.target, since=EPOCH, byte_budget=budget)
    lines = list(scan)
    assert scan.stats.truncated is True and scan.stats.bytes_read == budget
    assert len(lines) == independent_count(gen.path, gen.target, limit=budget) < gen.target_lines


def test_memory_stays_bounded_while_scanning(generated_log: GeneratedLog) -> None:
    gen = generated_log
    source = FileLogSource(str(gen.path))
    tracemalloc.start()
    try:
        count = sum(1 for _ in source.lines_for_session(gen.target, since=EPOCH, byte_budget=1 << 30))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == gen.target_lines
    # Two 1 MiB blocks in flight at most, plus the matched lines: far below the 50 MB file.
    assert peak < 6 * 1024 * 1024, peak


def test_glob_over_plain_gz_and_stale_files(tmp_path: Path) -> None:
    line = '{"ts":"%s","event":"%s","session_id":"ses_1"}'
    now = datetime.now(UTC)
    a = write_log_file(tmp_path / "w" / "a.log", [line % (now.isoformat(), "a"), "noise ses_2"])
    b = write_log_file(tmp_path / "w" / "sub" / "b.log.gz", [line % (now.isoformat(), "b")])
    old = write_log_file(tmp_path / "w" / "old.log", [line % (now.isoformat(), "old")])
    day_ago = time.time() - 86400
    os.utime(old, (day_ago, day_ago))
    os.utime(a, (time.time() - 60, time.time() - 60))  # older than b: read first
    source = FileLogSource(str(tmp_path / "w" / "**" / "*.log*"))
    assert isinstance(source, LogSource)
    assert source.files() == [str(old), str(a), str(b)]
    assert source.describe() == f"log files matching {tmp_path}/w/**/*.log* (3 files)"
    scan = source.lines_for_session("ses_1", since=now - timedelta(hours=1))
    assert isinstance(scan, LogScan)
    # old.log was last written before `since`: it cannot hold a line of the window and is not opened.
    assert [(line.event, line.source) for line in scan] == [("a", str(a)), ("b", str(b))]
    assert scan.stats.sources == [str(a), str(b)]
    assert [line.event for line in source.lines_for_session("ses_1", since=EPOCH)] == ["old", "a", "b"]


def test_budget_is_shared_across_files(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        write_log_file(tmp_path / f"{name}.log", [f"worker.failed session_id=ses_1 file={name}"] * 10)
    size = (tmp_path / "a.log").stat().st_size
    scan = FileLogSource(str(tmp_path / "*.log")).lines_for_session("ses_1", since=EPOCH, byte_budget=size + 1)
    lines = list(scan)
    assert len(lines) == 10 and scan.stats.truncated is True and scan.stats.bytes_read == size + 1


def test_no_matching_file_is_an_actionable_error(tmp_path: Path) -> None:
    source = FileLogSource(str(tmp_path / "nothing-*.log"))
    with pytest.raises(LogSourceError) as err:
        list(source.lines_for_session("ses_1", since=EPOCH))
    assert "No log file matches" in str(err.value) and "RECOVER_LOG_FILES" in str(err.value)
    with pytest.raises(LogSourceError):
        FileLogSource("  ")


def test_corrupt_gz_is_reported_and_other_files_still_read(tmp_path: Path) -> None:
    write_log_file(tmp_path / "good.log", ["worker.failed session_id=ses_1"])
    body = b"".join(b"worker.failed session_id=ses_1 n=%s\n" % os.urandom(8).hex().encode() for _ in range(2000))
    (tmp_path / "bad.log.gz").write_bytes(gzip.compress(body)[:5000])  # cut mid-stream
    scan = FileLogSource(str(tmp_path / "*")).lines_for_session("ses_1", since=EPOCH)
    lines = list(scan)
    assert any(line.source.endswith("good.log") for line in lines)
    assert len(scan.stats.problems) == 1 and "bad.log.gz" in scan.stats.problems[0]


def test_source_with_no_readable_file_raises(tmp_path: Path) -> None:
    (tmp_path / "w.log.gz").write_bytes(b"worker.failed session_id=ses_1\n")  # not gzip at all
    with pytest.raises(LogSourceError, match="could be read") as err:
        list(FileLogSource(str(tmp_path / "*.gz")).lines_for_session("ses_1", since=EPOCH))
    assert "w.log.gz" in str(err.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_only_file_raises(tmp_path: Path) -> None:
    path = write_log_file(tmp_path / "w.log", ["worker.failed session_id=ses_1"])
    path.chmod(0)
    try:
        with pytest.raises(LogSourceError, match="could be read"):
            list(FileLogSource(str(path)).lines_for_session("ses_1", since=EPOCH))
    finally:
        path.chmod(0o644)


def test_early_close_releases_the_file(tmp_path: Path) -> None:
    write_log_file(tmp_path / "w.log", ["worker.failed session_id=ses_1"] * 5)
    scan = FileLogSource(str(tmp_path / "w.log")).lines_for_session("ses_1", since=EPOCH)
    assert next(scan).event == "worker.failed"
    scan.close()
    assert list(scan) == []


def test_generator_timestamps_start_where_expected(generated_log: GeneratedLog) -> None:
    first = next(ts for ts in generated_log.target_ts if ts is not None)
    assert first > GEN_START
