"""Reading a log in stretches: the Docker frame demultiplexer, the tail-step cut, coverage counting."""

from __future__ import annotations

import random
import threading

import pytest

from bot.dockerops._stream import demux
from bot.errors import DockerOpsError
from bot.logs import Coverage, first_lines, track_blocks, until_line

LINES = [f"2026-11-30T10:00:{i % 60:02d}.{i:09d}Z line {i} {'x' * (i % 50)}\n".encode() for i in range(2000)]


def frames(lines: list[bytes]) -> bytes:
    out = bytearray()
    for i, line in enumerate(lines):
        out += bytes([1 if i % 3 else 2, 0, 0, 0]) + len(line).to_bytes(4, "big") + line
    return bytes(out)


def split(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), 60))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize("seed", range(5))
def test_demux_gives_the_payloads_in_order_whatever_the_read_sizes(seed: int) -> None:
    # Frame headers whose size bytes contain "\n" (0x0a) must not confuse anything.
    lines = [*LINES, b"y" * 266 + b"\n", b"z" * 0x0A0A + b"\n"]
    reads = split(frames(lines), random.Random(seed))
    assert b"".join(demux(iter(reads))) == b"".join(lines)


def test_demux_refuses_a_stream_that_is_not_framed() -> None:
    with pytest.raises(DockerOpsError, match="not in the framing"):
        list(demux(iter([b"2026-11-30T10:00:00Z plain text, no frames\n"])))
    with pytest.raises(DockerOpsError, match="ended inside a frame"):
        list(demux(iter([frames([b"abc\n"])[:-2]])))


@pytest.mark.parametrize("seed", range(5))
def test_until_line_stops_at_the_marker_even_when_it_spans_blocks(seed: int) -> None:
    rng = random.Random(seed)
    stop_at = rng.randrange(1, len(LINES))
    marker = LINES[stop_at].rstrip(b"\n")[:80]
    data = b"".join(LINES)
    closed = threading.Event()

    def blocks():  # type: ignore[no-untyped-def]
        try:
            yield from split(data, rng)
        finally:
            closed.set()

    got = b"".join(until_line(blocks(), marker))
    assert got == b"".join(LINES[:stop_at])
    assert closed.is_set()  # the source (the engine's stream) is closed at the marker


def test_until_line_on_the_first_line_gives_nothing_and_without_marker_everything() -> None:
    data = b"".join(LINES)
    assert b"".join(until_line(iter([data]), LINES[0].rstrip(b"\n"))) == b""
    assert b"".join(until_line(iter([data[:5], data[5:]]), b"no such line")) == data


def test_track_blocks_counts_lines_and_reads_the_first_and_last_times() -> None:
    coverage = Coverage(source="t")
    data = b"".join(LINES[:300])
    out = b"".join(track_blocks(split(data, random.Random(1)), coverage))
    assert out == data
    assert coverage.lines == 300 and coverage.bytes_read == len(data) and coverage.complete
    assert coverage.first_ts == LINES[0].split(b" ")[0].decode()
    assert coverage.last_ts == LINES[299].split(b" ")[0].decode()
    assert coverage.first_line is not None and LINES[0].startswith(coverage.first_line)


def test_track_blocks_stops_when_told_and_is_then_incomplete() -> None:
    stop = threading.Event()
    coverage = Coverage(source="t")
    seen = []
    for block in track_blocks(iter([b"a\n", b"b\n", b"c\n"]), coverage, stop=stop):
        seen.append(block)
        stop.set()
    assert seen == [b"a\n"] and not coverage.complete


def test_first_lines_cuts_after_the_count() -> None:
    data = b"".join(LINES[:50])
    assert b"".join(first_lines(split(data, random.Random(2)), 17)) == b"".join(LINES[:17])
