"""Value types and the source protocol shared by every log source (files here, Docker in dockerops)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from bot.errors import RecoverError

FieldValue = str | int | float | bool | None

#: Default cap on the bytes one ``lines_for_session`` call may read (all files / the whole stream).
DEFAULT_BYTE_BUDGET = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LogLine:
    """One parsed worker log line.

    ``text`` is the raw line (decoded, without its newline, capped at ``MAX_TEXT_CHARS``) so a person can
    always see what the worker wrote, even when no structure was recognised. ``fields`` holds scalar
    values only (nested JSON is kept as compact JSON text) so diagnosis never walks arbitrary trees.
    """

    ts: datetime | None
    event: str | None
    session_id: str | None
    fields: dict[str, FieldValue]
    text: str
    source: str

    @property
    def raw(self) -> str:
        """Alias of :attr:`text` (the name used in docs/architecture.md)."""
        return self.text

    def get(self, key: str, default: FieldValue = None) -> FieldValue:
        return self.fields.get(key, default)

    def text_of(self, key: str) -> str | None:
        """A field as text (numbers too), stripped; missing or blank is None."""
        value = self.fields.get(key)
        if value is None:
            return None
        return str(value).strip() or None

    def int_of(self, key: str) -> int | None:
        """A field as a whole number: JSON numbers or logfmt text (``"5000"``, ``"5000ms"``); None when
        unreadable (a worker's odd value never crashes diagnose)."""
        value = self.fields.get(key)
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value) if value == value and abs(value) != float("inf") else None
        try:
            return int(float(value.strip().removesuffix("ms")))
        except (ValueError, OverflowError):
            return None


@dataclass(slots=True)
class ScanStats:
    """What one scan did; diagnose shows it so a person knows how much of the log was really read.

    ``truncated`` is True when the byte budget stopped the scan before the end of the input: the answer
    may then be missing lines, and diagnose must say so rather than present it as complete.
    """

    bytes_read: int = 0
    lines_matched: int = 0
    truncated: bool = False
    #: Candidate lines (contain the id bytes) dropped because their time fell outside the window.
    lines_outside_window: int = 0
    #: Candidate lines dropped because they belong to another session (``session_id`` field differs)
    #: or only mention a longer id (``ses_10`` when looking for ``ses_1``).
    lines_other_session: int = 0
    #: Candidate lines that were blank or garbage.
    lines_unparsed: int = 0
    #: Over-long candidate lines: only their first ``max_line_bytes`` are examined, and only those
    #: naming the id within that part are counted (and can match).
    long_lines: int = 0
    #: Files or streams actually read.
    sources: list[str] = field(default_factory=list)
    #: Problems that did not stop the scan (an unreadable file, a corrupt .gz…), one sentence each.
    problems: list[str] = field(default_factory=list)


class LogScan(Iterator[LogLine]):
    """An iterator of matching lines that also exposes the scan's :class:`ScanStats`.

    Sources return this (it satisfies ``Iterator[LogLine]``) so a caller can read ``.stats.truncated``
    after draining it without a second channel.
    """

    def __init__(self, lines: Iterator[LogLine], stats: ScanStats) -> None:
        self._lines = lines
        self.stats = stats

    def __iter__(self) -> LogScan:
        return self

    def __next__(self) -> LogLine:
        return next(self._lines)

    def close(self) -> None:
        """Stop early and release the underlying file/stream (generators close their files)."""
        close = getattr(self._lines, "close", None)
        if close is not None:
            close()


class LogSourceError(RecoverError):
    """A log source cannot be read at all (no file matches, permission denied, engine unreachable)."""


@runtime_checkable
class LogSource(Protocol):
    """Where diagnose reads a session's worker log lines from.

    Implementations stream: they never hold a whole log in memory, filter by the session id's bytes
    before parsing, honour the time window on parsed timestamps and stop at ``byte_budget`` bytes read
    (then ``stats.truncated`` is True on the returned :class:`LogScan`).
    """

    name: str

    def describe(self) -> str:
        """One line for a person: what this source reads (never a secret)."""
        ...

    def lines_for_session(
        self,
        session_id: str,
        *,
        since: datetime,
        until: datetime | None = None,
        byte_budget: int = DEFAULT_BYTE_BUDGET,
    ) -> Iterator[LogLine]: ...
