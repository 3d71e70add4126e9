"""The file log source: ``RECOVER_LOG_FILES``, a glob of JSON / logfmt / plain worker log files."""

from __future__ import annotations

import glob
import gzip
import io
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from bot.logs._model import DEFAULT_BYTE_BUDGET, LogLine, LogScan, LogSourceError, ScanStats
from bot.logs._scan import MAX_LINE_BYTES, scan_session_lines
from bot.logs._segments import Coverage, LogSegment, track_blocks

#: Large reads keep the per-block Python overhead negligible next to ``bytes.find``'s C search.
DEFAULT_BLOCK_SIZE = 1024 * 1024


def _blocks(fh: io.RawIOBase | io.BufferedIOBase, block_size: int) -> Iterator[bytes]:
    while True:
        block = fh.read(block_size)
        if not block:
            return
        yield block


class FileLogSource:
    """Reads worker log files matching a glob (``**`` allowed; ``*.gz`` files are decompressed).

    Files are streamed in ``block_size`` reads, oldest modification time first, and share one byte
    budget. A file last modified before ``since`` cannot hold a line written inside the window, so it is
    not opened at all (this also covers its lines without timestamps).
    """

    name = "log files"

    def __init__(
        self,
        glob_pattern: str,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        if not glob_pattern.strip():
            raise LogSourceError(
                "The log-file pattern is empty.",
                hint="Set RECOVER_LOG_FILES to a glob such as /var/log/worker/*.log",
            )
        if block_size < 4096:
            raise ValueError("block_size must be at least 4096 bytes")
        self.glob_pattern = glob_pattern
        self.block_size = block_size
        self.max_line_bytes = max_line_bytes

    def files(self) -> list[str]:
        """The regular files the glob matches now, oldest first (roughly chronological output)."""
        found: list[tuple[float, str]] = []
        for path in glob.glob(os.path.expanduser(self.glob_pattern), recursive=True):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if os.path.isfile(path):
                found.append((st.st_mtime, path))
        return [path for _, path in sorted(found)]

    def describe(self) -> str:
        files = self.files()
        return f"log files matching {self.glob_pattern} ({len(files)} file{'s' if len(files) != 1 else ''})"

    def lines_for_session(
        self,
        session_id: str,
        *,
        since: datetime,
        until: datetime | None = None,
        byte_budget: int = DEFAULT_BYTE_BUDGET,
    ) -> LogScan:
        """Stream the session's lines from every matching file; ``.stats`` tells what was read.

        Raises :class:`LogSourceError` (on first iteration) when no file matches or none can be read.
        """
        if not session_id:
            raise ValueError("session_id must not be empty")
        stats = ScanStats()
        return LogScan(self._lines(session_id, since, until, byte_budget, stats), stats)

    def _lines(
        self, session_id: str, since: datetime, until: datetime | None, byte_budget: int, stats: ScanStats
    ) -> Iterator[LogLine]:
        files = self.files()
        if not files:
            raise LogSourceError(
                f"No log file matches {self.glob_pattern}.",
                hint="Check RECOVER_LOG_FILES and that the bot can read the worker's log directory.",
            )
        since_ts = (since.replace(tzinfo=UTC) if since.tzinfo is None else since).timestamp()
        completed = 0
        for path in files:
            try:
                if os.stat(path).st_mtime < since_ts:
                    continue
            except OSError as exc:
                stats.problems.append(f"{path}: {exc.strerror or exc}")
                continue
            remaining = byte_budget - stats.bytes_read
            if remaining <= 0:
                stats.truncated = True
                return
            try:
                fh: io.RawIOBase | io.BufferedIOBase
                fh = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb", buffering=0)  # noqa: SIM115
                with fh:
                    yield from scan_session_lines(
                        _blocks(fh, self.block_size),
                        session_id,
                        since=since,
                        until=until,
                        byte_budget=remaining,
                        source=path,
                        max_line_bytes=self.max_line_bytes,
                        stats=stats,
                    )
                completed += 1
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
                stats.problems.append(f"{path}: {detail}")
            if stats.truncated:
                return
        if completed == 0 and stats.problems and stats.lines_matched == 0:
            raise LogSourceError(
                f"No log file matching {self.glob_pattern} could be read: {stats.problems[0]}",
                hint="Check the bot's read permission on the worker's log files.",
            )

    def segments_for_session(
        self,
        session_id: str,
        *,
        since: datetime,
        until: datetime | None = None,
        focus: tuple[datetime, datetime] | None = None,
        on_bytes: Callable[[int], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LogSegment]:
        """Every matching file whole, oldest first, one segment each (files are read at disk speed, so
        there is no cheaper order; ``focus`` is not used). No byte budget: see diagnosis.logcoverage."""
        del focus
        if not session_id:
            raise ValueError("session_id must not be empty")
        files = self.files()
        if not files:
            raise LogSourceError(
                f"No log file matches {self.glob_pattern}.",
                hint="Check RECOVER_LOG_FILES and that the bot can read the worker's log directory.",
            )
        since_ts = (since.replace(tzinfo=UTC) if since.tzinfo is None else since).timestamp()
        readable = 0
        for rank, path in enumerate(files):
            try:
                if os.stat(path).st_mtime < since_ts:
                    continue
                fh: io.RawIOBase | io.BufferedIOBase
                fh = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb", buffering=0)  # noqa: SIM115
            except OSError as exc:
                if readable == 0 and rank == len(files) - 1:
                    raise LogSourceError(
                        f"No log file matching {self.glob_pattern} could be read: {path}: {exc.strerror or exc}",
                        hint="Check the bot's read permission on the worker's log files.",
                    ) from exc
                continue
            readable += 1
            coverage = Coverage(source=path)
            stats = ScanStats()
            blocks = track_blocks(_blocks(fh, self.block_size), coverage, on_bytes=on_bytes, stop=stop)
            scan = scan_session_lines(
                _closing(blocks, fh),
                session_id,
                since=since,
                until=until,
                byte_budget=2**62,
                source=path,
                max_line_bytes=self.max_line_bytes,
                stats=stats,
            )
            yield LogSegment(rank=(rank,), scan=scan, coverage=coverage, label="whole file")


def _closing(blocks: Iterator[bytes], fh: io.RawIOBase | io.BufferedIOBase) -> Iterator[bytes]:
    try:
        yield from blocks
    except (OSError, EOFError, gzip.BadGzipFile):
        return  # a file that breaks mid-read: what was read counts, the segment stays incomplete
    finally:
        fh.close()
