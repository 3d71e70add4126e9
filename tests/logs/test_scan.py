"""scan_session_lines: the streaming filter shared by the file and Docker sources."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.logs import MAX_TEXT_CHARS, LogLine, scan_session_lines

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)


def _ts(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _json(ts: str, event: str, session_id: str) -> str:
    return json.dumps({"ts": ts, "event": event, "session_id": session_id}, separators=(",", ":"))


def scan(data: bytes | list[bytes], session_id: str = "ses_1", **kw: object) -> tuple[list[LogLine], object]:
    chunks = [data] if isinstance(data, bytes) else data
    kw.setdefault("since", EPOCH)
    result = scan_session_lines(chunks, session_id, **kw)  # type: ignore[arg-type]
    return list(result), result.stats


MIXED = "\n".join(
    [
        _json(_ts(1), "worker.failed", "ses_1"),
        _json(_ts(2), "worker.failed", "ses_10"),
        f'{_ts(3)} worker.stopping kind=failed session_id=ses_1 error="git clone failed"',
        "worker.stopping kind=failed session_id=ses_10",
        "worker ses_1: gave no terminal within 5000ms of its interrupt",
        "worker ses_10: gave no terminal within 5000ms of its interrupt",
        "restarting ses_1.",
        "file ses_1.2 and x-ses_1 and ses_1_b and ses_1-x are other ids",
        '{"event":"worker.handoff","session_id":"ses_2","from":"ses_1"}',
        "scheduler tick",
    ]
).encode()


def test_exact_session_match_never_matches_a_longer_id() -> None:
    lines, stats = scan(MIXED)
    assert [line.text[:40] for line in lines] == [
        '{"ts":"2026-11-29T10:00:01Z","event":"wo',
        "2026-11-29T10:00:03Z worker.stopping kin",
        "worker ses_1: gave no terminal within 50",
        "restarting ses_1.",
    ]
    assert {line.session_id for line in lines} == {"ses_1"}  # plain lines get the id they name
    assert stats.lines_matched == 4  # type: ignore[attr-defined]
    # ses_10 ×3, the line of other ids, and ses_2's line that only mentions ses_1.
    assert stats.lines_other_session == 5  # type: ignore[attr-defined]


def test_longer_id_is_found_too() -> None:
    lines, _ = scan(MIXED, "ses_10")
    assert len(lines) == 3 and all(line.session_id == "ses_10" for line in lines)


def test_time_window_is_inclusive_and_untimed_lines_are_kept() -> None:
    data = "\n".join(
        [_json(_ts(i), f"e{i}", "ses_1") for i in range(10)] + ["ses_1 gave no terminal within 5000ms of its interrupt"]
    ).encode()
    lines, stats = scan(data, since=T0 + timedelta(seconds=3), until=T0 + timedelta(seconds=6))
    assert [line.event for line in lines] == ["e3", "e4", "e5", "e6", None]
    assert lines[-1].ts is None
    assert stats.lines_outside_window == 6  # type: ignore[attr-defined]


def test_naive_window_bounds_are_utc() -> None:
    data = _json(_ts(5), "a", "ses_1").encode()
    naive = (T0 + timedelta(seconds=5)).replace(tzinfo=None)
    assert len(scan(data, since=naive, until=naive)[0]) == 1
    assert scan(data, since=naive + timedelta(microseconds=1))[0] == []


def test_docker_timestamp_prefix_gives_the_time() -> None:
    data = b"".join(f'{_ts(i)[:-1]}.123456789Z {{"event":"e{i}","session_id":"ses_1"}}\n'.encode() for i in range(5))
    lines, _ = scan(data, since=T0 + timedelta(seconds=2), has_docker_timestamps=True)
    assert [line.event for line in lines] == ["e2", "e3", "e4"]
    assert lines[0].ts == T0 + timedelta(seconds=2, microseconds=123456)


def test_byte_budget_stops_and_reports_truncation() -> None:
    line = b"worker.failed session_id=ses_1 n=%d\n"
    data = b"".join(line % i for i in range(100))
    size_one = len(line % 0)  # every line has the same length for n < 10, grows after: compute exactly
    offsets = [0]
    for i in range(100):
        offsets.append(offsets[-1] + len(line % i))
    budget = offsets[10] + size_one // 2  # ten whole lines and half of the eleventh
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)]
    lines, stats = scan(chunks, byte_budget=budget)
    assert [line.fields["n"] for line in lines] == list(range(10))  # the cut line is not parsed
    assert stats.truncated is True  # type: ignore[attr-defined]
    assert stats.bytes_read == budget  # type: ignore[attr-defined]


def test_budget_equal_to_input_is_not_truncation() -> None:
    data = b"worker.failed session_id=ses_1\n" * 3
    lines, stats = scan([data[:10], data[10:]], byte_budget=len(data))
    assert len(lines) == 3 and stats.truncated is False  # type: ignore[attr-defined]
    lines, stats = scan([data, b"more session_id=ses_1\n"], byte_budget=len(data))
    assert len(lines) == 3 and stats.truncated is True  # type: ignore[attr-defined]


def test_zero_budget_reads_nothing() -> None:
    lines, stats = scan(MIXED, byte_budget=0)
    assert lines == [] and stats.truncated is True and stats.bytes_read == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 16, 17, 64, 1000])
def test_any_chunking_gives_the_same_lines(size: int) -> None:
    whole, _ = scan(MIXED + b"\r\nlast line ses_1")  # no newline at the end, CRLF before it
    chunks = [MIXED[i : i + size] for i in range(0, len(MIXED), size)] + [b"\r\nlast line ses_1"]
    split, _ = scan(chunks)
    assert [line.text for line in split] == [line.text for line in whole]
    assert whole[-1].text == "last line ses_1" and whole[-2].text == "restarting ses_1."


@given(st.lists(st.integers(min_value=0, max_value=len(MIXED)), max_size=12))
def test_random_chunk_boundaries(cuts: list[int]) -> None:
    points = sorted({0, len(MIXED), *cuts})
    chunks = [MIXED[a:b] for a, b in zip(points, points[1:], strict=False)]
    assert [line.text for line in scan(chunks)[0]] == [line.text for line in scan(MIXED)[0]]


def test_bytearray_and_memoryview_chunks() -> None:
    lines, _ = scan([bytearray(MIXED[:50]), memoryview(MIXED[50:])])  # type: ignore[list-item]
    assert len(lines) == 4


def test_long_lines_are_capped_and_skipped_past() -> None:
    cap = 4096
    long_with_id = b'{"event":"big","session_id":"ses_1","blob":"' + b"a" * 50_000 + b'"}'
    id_after_cap = b"x" * 10_000 + b" ses_1 too late"
    data = b"\n".join([b"before ses_1", long_with_id, id_after_cap, b"after ses_1", b""])
    for size in (1000, 3000, len(data)):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        lines, stats = scan(chunks, max_line_bytes=cap)
        assert [line.text[:12] for line in lines] == ["before ses_1", '{"event":"bi', "after ses_1"]
        # The capped JSON no longer parses as JSON, but its session id is still read and it stays text.
        assert lines[1].session_id == "ses_1" and len(lines[1].text) <= MAX_TEXT_CHARS + 1
        # Only the over-long line naming the id within the cap counts; the other is skipped unseen.
        assert stats.long_lines == 1  # type: ignore[attr-defined]


def test_a_huge_line_in_small_chunks_uses_bounded_memory() -> None:
    def chunks() -> Iterator[bytes]:
        yield b"ses_1 starts a huge line "
        block = b"z" * 65536
        for _ in range(320):  # 20 MiB without a newline
            yield block
        yield b"\nworker.failed session_id=ses_1\n"

    tracemalloc.start()
    try:
        lines, stats = scan(chunks(), max_line_bytes=1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [line.event for line in lines] == [None, "worker.failed"]
    assert stats.bytes_read > 20 * 1024 * 1024  # type: ignore[attr-defined]
    # Bounded by a few working copies of one capped line (1 MiB: bytes, str, stripped str), never 20 MiB.
    assert peak < 8 * 1024 * 1024, peak


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        scan(MIXED, "")
    with pytest.raises(ValueError):
        scan(MIXED, byte_budget=-1)
