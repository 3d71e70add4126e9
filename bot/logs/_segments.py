"""Reading a log in stretches (segments), so diagnose can answer with what it read in time and go on.

A source that can read the part of a log that matters most first (Docker: the newest lines, where a
stopped worker's last turn is) yields several segments, each a :class:`LogScan` of one contiguous
stretch in log order, with a ``rank`` that orders the stretches in time (smaller = older) and a
:class:`Coverage` filled while its bytes go by. Diagnosis folds them in rank order, so the facts do not
depend on the order they were read in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from bot.logs._model import LogScan
from bot.logs._parse import parse_timestamp

_TS_BYTES = 40  # an RFC 3339 timestamp with nanoseconds and an offset fits
MARKER_BYTES = 256


@dataclass
class Coverage:
    """What one segment has read so far: bytes, lines, and the times of its first and last line.

    Times are the lines' leading timestamps (Docker's, on its host's clock) when the lines have them.
    ``complete`` is True once the segment was read to its planned end.
    """

    source: str
    bytes_read: int = 0
    lines: int = 0
    first_ts: str | None = None
    last_ts: str | None = None
    complete: bool = False
    #: The first bytes of the segment's first line (with Docker's nanosecond time: unique in practice).
    first_line: bytes | None = None


@dataclass
class LogSegment:
    """One stretch of a log: its lines (a :class:`LogScan`), its place in time, what it covered."""

    rank: tuple[int, ...]
    scan: LogScan
    coverage: Coverage
    #: How the stretch was chosen, for people ("newest 16384 lines", "from the start").
    label: str = ""
    meta: dict[str, object] = field(default_factory=dict)


def leading_token(line: bytes) -> str | None:
    """The first word of a line when it reads as a timestamp (Docker's ``timestamps=True`` prefix)."""
    head = line[:_TS_BYTES]
    token = head.split(b" ", 1)[0].decode("ascii", "replace")
    return token if parse_timestamp(token) is not None else None


def track_blocks(
    blocks: Iterable[bytes],
    coverage: Coverage,
    *,
    on_bytes: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
) -> Iterator[bytes]:
    """Pass blocks through, counting them into ``coverage``; stop early when ``stop`` is set.

    Counting newlines is ``bytes.count`` (C speed); only the first line and the last whole line of a
    block are looked at for their times.
    """
    carry = b""  # the unfinished last line of the previous block (only its first bytes matter)
    for block in blocks:
        if stop is not None and stop.is_set():
            return
        if not block:
            continue
        if coverage.first_line is None and coverage.bytes_read == 0:
            coverage.first_ts = leading_token(block)
            coverage.first_line = block[:MARKER_BYTES].split(b"\n", 1)[0]
        newlines = block.count(b"\n")
        if newlines:
            last_nl = block.rfind(b"\n")
            prev_nl = block.rfind(b"\n", 0, last_nl)
            start = (carry + block[: last_nl + 1]) if prev_nl < 0 else block[prev_nl + 1 : last_nl]
            token = leading_token(start)
            if token is not None:
                coverage.last_ts = token
            carry = block[last_nl + 1 : last_nl + 1 + _TS_BYTES]
        elif len(carry) < _TS_BYTES:
            carry += block[: _TS_BYTES - len(carry)]
        coverage.bytes_read += len(block)
        coverage.lines += newlines
        if on_bytes is not None:
            on_bytes(len(block))
        yield block
    else:
        coverage.complete = stop is None or not stop.is_set()


def first_lines(blocks: Iterable[bytes], count: int) -> Iterator[bytes]:
    """Only the first ``count`` lines of a block stream (the rest is not read: the source is closed)."""
    left = count
    source = iter(blocks)
    try:
        for block in source:
            if left <= 0:
                return
            n = block.count(b"\n")
            if n < left:
                left -= n
                yield block
                continue
            pos = -1
            for _ in range(left):
                pos = block.find(b"\n", pos + 1)
            left = 0
            yield block[: pos + 1]
            return
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def until_line(blocks: Iterable[bytes], marker: bytes) -> Iterator[bytes]:
    """The block stream up to (not including) the first line that starts with ``marker``.

    Reading a log backwards in growing ``tail`` steps, each step stops where the previous step began:
    its first line is the marker. Up to ``len(marker)`` bytes are held back between blocks so a marker
    split over two blocks is still found. The source is closed at the marker.
    """
    if not marker or b"\n" in marker:
        raise ValueError("marker must be one non-empty line")
    needle = b"\n" + marker
    hold = len(needle)
    source = iter(blocks)
    held, skip = b"\n", 1  # a virtual newline before the stream: a marker on the first line matches
    try:
        for block in source:
            data = held + block
            pos = data.find(needle)
            if pos >= 0:
                if pos + 1 > skip:
                    yield data[skip : pos + 1]
                return
            cut = len(data) - hold
            if cut <= skip:
                held = data
                continue
            yield data[skip:cut]
            held, skip = data[cut:], 0
        if len(held) > skip:
            yield held[skip:]
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
