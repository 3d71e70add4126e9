"""Worker log lines for one session: the source interface, line parsing and the file source.

Public names are re-exported here; the modules behind them are private.
"""

from __future__ import annotations

from bot.logs._files import DEFAULT_BLOCK_SIZE, FileLogSource
from bot.logs._model import (
    DEFAULT_BYTE_BUDGET,
    FieldValue,
    LogLine,
    LogScan,
    LogSource,
    LogSourceError,
    ScanStats,
)
from bot.logs._parse import ID_PATTERN, KNOWN_PLAIN_PATTERNS, MAX_TEXT_CHARS, parse_line, parse_timestamp
from bot.logs._scan import MAX_LINE_BYTES, scan_session_lines
from bot.logs._segments import Coverage, LogSegment, first_lines, leading_token, track_blocks, until_line

__all__ = [
    "Coverage",
    "LogSegment",
    "first_lines",
    "leading_token",
    "track_blocks",
    "until_line",
    "DEFAULT_BLOCK_SIZE",
    "FileLogSource",
    "DEFAULT_BYTE_BUDGET",
    "ID_PATTERN",
    "KNOWN_PLAIN_PATTERNS",
    "MAX_LINE_BYTES",
    "MAX_TEXT_CHARS",
    "FieldValue",
    "LogLine",
    "LogScan",
    "LogSource",
    "LogSourceError",
    "ScanStats",
    "parse_line",
    "parse_timestamp",
    "scan_session_lines",
]
