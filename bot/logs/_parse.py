"""Parse one worker log line: a JSON object, a logfmt-like line, or plain text.

Workers write all three (docs/control-host-api.md, "Worker log lines"): structured events as JSON, some
components as ``event key=value …``, and a few plain sentences such as ``gave no terminal within 5000ms
of its interrupt`` (R3.1). The parser never raises: anything it cannot read is plain text, and a line
with nothing readable in it (blank, binary noise) is ``None``.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime

from bot.ids import HOST_ID_TEXT
from bot.logs._model import FieldValue, LogLine

#: A line's ``text`` is capped so one huge line cannot flood a Slack message or the step store.
MAX_TEXT_CHARS = 8192

#: The control host's id syntax (bot/ids.py, unanchored).
ID_PATTERN = HOST_ID_TEXT

_LEAD_TS = re.compile(
    r"\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:[Zz]|[+-]\d{2}:?\d{2})?)\]?(?:\s+|$)"
)
_TS_KEYS = ("ts", "time", "timestamp", "@timestamp")
_SESSION_KEYS = ("session_id", "sessionId", "session")
_EVENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")
_LEVELS = frozenset({"trace", "debug", "info", "notice", "warn", "warning", "error", "err", "fatal", "critical"})
# key=value, key="quoted \"value\"" (an unterminated quote runs to the end of the line), or a bare word.
_TOKEN = re.compile(
    r'([A-Za-z_@][A-Za-z0-9_.@/-]*)=("(?:[^"\\]|\\.)*(?:"|\\?$)|[^\s]*)'
    r"|(\S+)"
)
_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/nrtbf])')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
_INT = re.compile(r"-?\d{1,18}")
_FLOAT = re.compile(r"-?\d{1,18}\.\d{1,18}(?:[eE][+-]?\d{1,3})?")
_EMBEDDED_SESSION = re.compile(r"""\bsession(?:_id|Id)?["']?\s*[=:]\s*["']?(""" + ID_PATTERN + ")")

#: Plain sentences the worker writes that diagnosis needs (R3.1): regex → fields added to the line.
#: ``recognised`` names what was recognised; numeric groups become ints.
KNOWN_PLAIN_PATTERNS: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    (
        re.compile(r"gave no terminal within (\d+)\s*ms of its interrupt"),
        "interrupt_unanswered",
        ("within_ms",),
    ),
    (re.compile(r"ended before its interrupt was answered"), "interrupt_unanswered", ()),
)


def parse_timestamp(value: object) -> datetime | None:
    """An ISO 8601 / RFC 3339 string or a Unix epoch (seconds or milliseconds) → aware UTC datetime.

    Naive times are taken as UTC (workers log UTC); anything unreadable is ``None`` rather than an error
    because one odd line must not break a diagnosis.
    """
    try:
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, int | float):
            if not math.isfinite(value):
                return None
            seconds = value / 1000.0 if abs(value) > 1e11 else float(value)
            return datetime.fromtimestamp(seconds, tz=UTC)
        if isinstance(value, str):
            text = value.strip()
            if not 10 <= len(text) <= 40:
                return None
            parsed = datetime.fromisoformat(text.replace(",", ".", 1) if "," in text else text)
            if parsed.tzinfo is None:
                return parsed.replace(tzinfo=UTC)
            return parsed.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def _unquote(raw: str) -> str:
    body = raw[1:-1] if len(raw) >= 2 and raw.endswith('"') and not raw.endswith('\\"') else raw[1:]
    if "\\" not in body:
        return body

    def repl(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] == "u":
            return chr(int(esc[1:], 16))
        return _ESCAPES[esc]

    return _ESCAPE.sub(repl, body)


def _typed(raw: str) -> FieldValue:
    """Unquoted logfmt values: numbers and booleans typed, so ``elapsed_ms=35012`` compares as a number."""
    if raw == "":
        return ""
    if raw in ("true", "false"):
        return raw == "true"
    if raw in ("null", "nil"):
        return None
    if _INT.fullmatch(raw):
        return int(raw)
    if _FLOAT.fullmatch(raw):
        return float(raw)
    return raw


def _scalar(value: object) -> FieldValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def _is_garbage(text: str) -> bool:
    """Blank lines and binary noise carry nothing a person could use."""
    if not any(ch.isalnum() for ch in text):
        return True
    bad = sum(1 for ch in text if (ch < " " and ch != "\t") or ch == "\ufffd")
    return bad * 4 > len(text)


def _parse_json(rest: str) -> dict[str, FieldValue] | None:
    try:
        obj = json.loads(rest)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    return {str(k): _scalar(v) for k, v in obj.items()}


def _parse_logfmt(rest: str) -> tuple[str | None, dict[str, FieldValue]] | None:
    """``[LEVEL] [event] key=value …`` → (event, fields); None when the line is not logfmt-like.

    It is logfmt-like when it has at least one pair and nothing but pairs after the first pair; the
    words before the first pair are a level and/or one event name (else they become ``msg``).
    """
    prefix: list[str] = []
    fields: dict[str, FieldValue] = {}
    seen_pair = False
    for m in _TOKEN.finditer(rest):
        key, value, word = m.group(1), m.group(2), m.group(3)
        if word is not None:
            if seen_pair:
                return None
            prefix.append(word)
            continue
        seen_pair = True
        fields[key] = _unquote(value) if value.startswith('"') else _typed(value)
    if not seen_pair:
        return None
    while prefix and prefix[0].strip("[]:").lower() in _LEVELS:
        fields.setdefault("level", prefix.pop(0).strip("[]:").lower())
    event: str | None = None
    ev = fields.get("event")
    if isinstance(ev, str) and ev:
        event = ev
    if len(prefix) == 1 and event is None and _EVENT.fullmatch(prefix[0]):
        event = prefix[0]
    elif prefix:
        fields.setdefault("msg", " ".join(prefix))
    return event, fields


def _session_of(fields: dict[str, FieldValue]) -> str | None:
    for key in _SESSION_KEYS:
        value = fields.get(key)
        if value is not None and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _ts_of(fields: dict[str, FieldValue]) -> datetime | None:
    for key in _TS_KEYS:
        if key in fields:
            ts = parse_timestamp(fields[key])
            if ts is not None:
                return ts
    return None


def _recognise(text: str, fields: dict[str, FieldValue]) -> None:
    for pattern, name, groups in KNOWN_PLAIN_PATTERNS:
        m = pattern.search(text)
        if m is None:
            continue
        fields.setdefault("recognised", name)
        for key, value in zip(groups, m.groups(), strict=False):
            fields.setdefault(key, int(value) if value.isdigit() else value)
        return


def parse_line(text: str, *, source: str = "") -> LogLine | None:
    """Parse one line (without or with its newline); ``None`` for blank or garbage lines.

    The time comes from a ``ts``/``time``/``timestamp`` field, else from a leading RFC 3339 timestamp
    (Docker's ``timestamps=True`` prefix, or a logger's own). ``event`` is the JSON/logfmt ``event``
    field or the logfmt line's leading bare word; plain text has ``event`` None but known sentences
    (:data:`KNOWN_PLAIN_PATTERNS`) add a ``recognised`` field, and an embedded ``session_id=…`` is read.
    """
    line = text.strip().lstrip("\ufeff")
    if not line or _is_garbage(line):
        return None
    shown = line if len(line) <= MAX_TEXT_CHARS else line[:MAX_TEXT_CHARS] + "…"
    lead_ts: datetime | None = None
    rest = line
    m = _LEAD_TS.match(line)
    if m is not None:
        lead_ts = parse_timestamp(m.group(1))
        if lead_ts is not None:
            rest = line[m.end() :]

    event: str | None = None
    fields: dict[str, FieldValue] | None = None
    if rest.startswith("{"):
        fields = _parse_json(rest)
        if fields is not None:
            ev = fields.get("event")
            event = ev if isinstance(ev, str) and ev else None
    if fields is None:
        parsed = _parse_logfmt(rest)
        if parsed is not None:
            event, fields = parsed
    if fields is None:
        fields = {}
        sm = _EMBEDDED_SESSION.search(rest)
        if sm is not None:
            fields["session_id"] = sm.group(1)
        if not rest:
            return None
    _recognise(rest, fields)
    ts = _ts_of(fields) or lead_ts
    session_id = _session_of(fields)
    return LogLine(ts=ts, event=event, session_id=session_id, fields=fields, text=shown, source=source)
