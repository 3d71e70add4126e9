"""The streaming session filter shared by the file source and the Docker source.

Why this shape: a worker log is large and one session's lines are sparse, so the scan searches the raw
bytes of large blocks for the session id with ``bytes.find`` (C speed) and only cuts out, decodes and
parses the lines around a hit. Memory stays bounded by one block plus one capped line, whatever the
input size or line length.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

from bot.logs._model import DEFAULT_BYTE_BUDGET, LogLine, LogScan, ScanStats
from bot.logs._parse import parse_line

#: A line longer than this is examined on its first ``MAX_LINE_BYTES`` only; the rest is skipped
#: without being held in memory.
MAX_LINE_BYTES = 1024 * 1024


def _table(chars: bytes) -> bytes:
    return bytes(1 if i in chars else 0 for i in range(256))


_WORD = _table(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_JOIN = _table(b".:-")  # id characters that also end sentences / join words


def _bounded(line: bytes, pos: int, n: int) -> bool:
    """Is the id at ``line[pos:pos+n]`` a whole id, not part of a longer one (``ses_1`` in ``ses_10``)?

    Ids may contain ``. : -`` (docs/control-host-api.md), so those count as part of the id only when a word
    character follows them: ``ses_1.`` at the end of a sentence matches, ``ses_1.2`` and ``x-ses_1``
    do not. (Consequence: ``session:ses_1`` without a space is not recognised outside a structured
    ``session_id`` field.)
    """
    if pos > 0:
        c = line[pos - 1]
        if _WORD[c] or (_JOIN[c] and pos > 1 and _WORD[line[pos - 2]]):
            return False
    end = pos + n
    if end < len(line):
        c = line[end]
        if _WORD[c] or (_JOIN[c] and end + 1 < len(line) and _WORD[line[end + 1]]):
            return False
    return True


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _Matcher:
    """Turns a candidate line (its bytes contain the id) into a LogLine of this session, or nothing."""

    def __init__(self, session_id: str, since: datetime, until: datetime | None, source: str, stats: ScanStats) -> None:
        self.session_id = session_id
        self.needle = session_id.encode("utf-8")
        self.since = _as_utc(since)
        self.until = _as_utc(until) if until is not None else None
        self.source = source
        self.stats = stats

    def match(self, raw: bytes, long: bool) -> LogLine | None:
        stats = self.stats
        if long:
            stats.long_lines += 1
        needle, n = self.needle, len(self.needle)
        pos = raw.find(needle)
        while pos >= 0 and not _bounded(raw, pos, n):
            pos = raw.find(needle, pos + 1)
        if pos < 0:
            stats.lines_other_session += 1
            return None
        line = parse_line(raw.decode("utf-8", errors="replace"), source=self.source)
        if line is None:
            stats.lines_unparsed += 1
            return None
        if line.session_id is None:
            # Plain text that names the id (checked as a whole word above) belongs to the session.
            line = replace(line, session_id=self.session_id)
        elif line.session_id != self.session_id:
            stats.lines_other_session += 1
            return None
        # A line without a readable time is KEPT: its time cannot be decided, and dropping it could
        # hide the very sentence that explains the stop (R3.1's plain "gave no terminal …" lines carry
        # no timestamp). Such lines have ``ts`` None so diagnosis can show them as "time unknown".
        ts = line.ts
        if ts is not None and (ts < self.since or (self.until is not None and ts > self.until)):
            stats.lines_outside_window += 1
            return None
        stats.lines_matched += 1
        return line


def _scan(
    chunks: Iterable[bytes],
    matcher: _Matcher,
    byte_budget: int,
    max_line: int,
    stats: ScanStats,
) -> Iterator[LogLine]:
    needle = matcher.needle
    n = len(needle)
    match = matcher.match
    carry = bytearray()  # the unfinished line at the end of the previous chunk (at most max_line bytes)
    overflow = False  # that unfinished line is longer than max_line: discard its rest up to the newline
    budget_left = byte_budget
    for chunk in chunks:
        if not chunk:
            continue
        if budget_left <= 0:
            stats.truncated = True
            break
        if isinstance(chunk, memoryview):
            chunk = chunk.tobytes()
        if len(chunk) > budget_left:
            chunk = chunk[:budget_left]
            stats.truncated = True
        budget_left -= len(chunk)
        stats.bytes_read += len(chunk)
        start = 0
        if carry or overflow:
            nl = chunk.find(b"\n")
            stop = len(chunk) if nl < 0 else nl
            if not overflow:
                room = max_line - len(carry)
                carry += chunk[: min(stop, room)]
                overflow = stop > room
            if nl < 0:
                if stats.truncated:
                    break
                continue
            if needle in carry:
                found = match(bytes(carry).rstrip(b"\r"), overflow)
                if found is not None:
                    yield found
            carry.clear()
            overflow = False
            start = nl + 1
        last = chunk.rfind(b"\n", start)
        if last >= 0:
            pos = chunk.find(needle, start, last)
            while pos >= 0:
                ls = max(chunk.rfind(b"\n", start, pos) + 1, start)
                le = chunk.find(b"\n", pos + n, last + 1)
                if le - ls > max_line:
                    capped = chunk[ls : ls + max_line]
                    found = match(capped, True) if needle in capped else None
                else:
                    found = match(chunk[ls:le].rstrip(b"\r"), False)
                if found is not None:
                    yield found
                pos = chunk.find(needle, le + 1, last)
            tail_start = last + 1
        else:
            tail_start = start
        tail = len(chunk) - tail_start
        if tail:
            carry += chunk[tail_start : tail_start + max_line]
            overflow = tail > max_line
        if stats.truncated:
            # The line cut by the budget is incomplete: it is not parsed.
            break
    if needle in carry and not stats.truncated:
        found = match(bytes(carry).rstrip(b"\r"), overflow)
        if found is not None:
            yield found


def scan_session_lines(
    chunks: Iterable[bytes],
    session_id: str,
    *,
    since: datetime,
    until: datetime | None = None,
    byte_budget: int = DEFAULT_BYTE_BUDGET,
    source: str = "",
    has_docker_timestamps: bool = False,
    max_line_bytes: int = MAX_LINE_BYTES,
    stats: ScanStats | None = None,
) -> LogScan:
    """Stream the lines of ``session_id`` out of raw byte chunks (any sizes, lines may span chunks).

    - Filter first on the id's bytes (whole-id match, so ``ses_1`` never matches ``ses_10``), then
      parse; a line whose parsed ``session_id`` field differs is dropped.
    - Time window ``since <= ts <= until`` on the parsed time (naive datetimes are UTC); lines with no
      readable time are kept (see :meth:`_Matcher.match`).
    - Stops after ``byte_budget`` bytes read; ``LogScan.stats.truncated`` then says the input went on.
    - ``has_docker_timestamps``: each line starts with Docker's RFC3339Nano timestamp; it is used as the
      line's time when the payload has none of its own (``parse_line`` reads leading timestamps, so this
      flag only documents the caller's intent today).

    Pass ``stats`` to accumulate several scans (e.g. several files) into one :class:`ScanStats`.
    """
    if not session_id:
        raise ValueError("session_id must not be empty")
    if "\n" in session_id:
        raise ValueError("session_id must be a single line")
    if byte_budget < 0:
        raise ValueError("byte_budget must be >= 0")
    if max_line_bytes < len(session_id.encode("utf-8")):
        raise ValueError("max_line_bytes is shorter than the session id")
    del has_docker_timestamps  # leading RFC 3339 timestamps are always recognised by parse_line
    stats = stats if stats is not None else ScanStats()
    if source and source not in stats.sources:
        stats.sources.append(source)
    matcher = _Matcher(session_id, since, until, source, stats)
    return LogScan(_scan(chunks, matcher, byte_budget, max_line_bytes, stats), stats)
