"""Scenario files: the initial state of one sandbox session plus the worker log lines the runbook names.

A scenario is data, not code, so a new case of the runbook can be added without touching the state
machine. Files are read with ``yaml.safe_load`` only; every problem is reported as ``file: problem``.
Times are written relative to the sandbox clock (``-30s``, ``+60s``, ``-2m``, ``-1h``, ``now``) so a
scenario means the same thing whatever the clock says when it is loaded.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from bot.clock import isoformat, parse_time
from bot.errors import RecoverError

# The control host's id syntax, written out here on purpose: the sandbox is the other side of the
# API and shares no reading of it with the bot (tests/sandbox/test_imports.py).
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")

SESSION_STATUSES = {"running", "idle", "stopped", "failed", "closed"}
ADMISSION_STATES = {"open", "recovery_required", "closed"}
ATTENTION_CODES = {"RESTORE_FAILED", "STARTUP_FAILED", "CONTEXT_GAP", "OUTCOME_UNKNOWN"}
EXECUTION_STATES = {"running", "draining", "gone"}
WORKER_PHASES = {"starting", "ready"}
TURN_STATUSES = {"running", "completed", "interrupted", "cancelled", "outcome_unknown"}
TERMINAL_REASONS = {"interrupt_checkpoint_unavailable", "interrupt_unanswered"}

_REL_TIME = re.compile(r"^(?P<sign>[+-]?)(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h|d)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

_TOP_KEYS = {"id", "title", "description", "branch", "session", "turns", "events", "worker_logs"}
_SESSION_KEYS = {
    "id",
    "status",
    "admission_state",
    "revision",
    "resumable",
    "queued_inputs",
    "attention",
    "checkpoint",
    "execution",
    "reclamation_claim",
    "store_outage",
}


class ScenarioError(RecoverError):
    """A scenario file is invalid; ``problems`` are ``file: problem`` strings."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("Invalid sandbox scenario:\n" + "\n".join(f"  {p}" for p in self.problems))


def resolve_time(value: object, now: datetime) -> datetime | None:
    """Turn a scenario time (relative like ``-30s`` or absolute ISO 8601) into a datetime.

    ``None`` stays ``None``; numbers are seconds relative to ``now``. Raises ValueError on anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int | float):
        return now + timedelta(seconds=float(value))
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text == "now":
            return now
        match = _REL_TIME.match(text)
        if match:
            seconds = float(match["num"]) * _UNIT_SECONDS[match["unit"]]
            return now - timedelta(seconds=seconds) if match["sign"] == "-" else now + timedelta(seconds=seconds)
        parsed = parse_time(text)
        if parsed is not None:
            return parsed
    raise ValueError(f"not a time (use -30s, +60s, -2m, -1h, now or ISO 8601): {value!r}")


@dataclass(frozen=True)
class WorkerLogLine:
    """One line of a worker's log as the worker wrote it (JSON, logfmt-like or plain text)."""

    at: datetime
    text: str

    def render(self, *, timestamp: bool = False) -> str:
        """The line; with ``timestamp`` prefixed by ISO time like ``docker logs --timestamps``."""
        return f"{isoformat(self.at)} {self.text}" if timestamp else self.text

    def to_json(self) -> dict[str, Any]:
        return {"ts": isoformat(self.at), "text": self.text}


@dataclass(frozen=True)
class Scenario:
    """One scenario file: a session's starting point for one runbook branch."""

    id: str
    title: str
    description: str
    branch: str
    session: Mapping[str, Any]
    turns: tuple[Mapping[str, Any], ...] = ()
    events: tuple[Mapping[str, Any], ...] = ()
    worker_logs: tuple[Mapping[str, Any], ...] = ()
    source: Path | None = field(default=None, compare=False)

    @property
    def session_id(self) -> str:
        return str(self.session["id"])

    def worker_log_lines(self, now: datetime) -> list[WorkerLogLine]:
        """The worker log lines with times resolved against ``now`` (the sandbox clock), oldest first."""
        return render_log_entries(self.worker_logs, now)


def render_log_entries(entries: Iterable[Mapping[str, Any]], now: datetime) -> list[WorkerLogLine]:
    """Resolve ``at`` and serialise ``json`` entries; JSON lines get a ``ts`` unless they carry one."""
    lines: list[WorkerLogLine] = []
    for entry in entries:
        at = resolve_time(entry.get("at", "now"), now)
        assert at is not None
        if "json" in entry:
            payload = dict(entry["json"])
            if "ts" not in payload:
                payload = {"ts": isoformat(at), **payload}
            text = json.dumps(payload, separators=(",", ":"))
        else:
            text = str(entry["text"])
        lines.append(WorkerLogLine(at=at, text=text))
    lines.sort(key=lambda line: line.at)
    return lines


def worker_log_lines(scenario: Scenario, now: datetime) -> list[WorkerLogLine]:
    """The scenario's worker log lines at ``now``: for writing into worker containers or log files."""
    return scenario.worker_log_lines(now)


def builtin_scenarios_dir() -> Path:
    """The folder of the scenarios shipped with the bot."""
    return Path(__file__).resolve().parent / "scenarios"


def load_scenarios(path_or_dir: str | Path) -> list[Scenario]:
    """Load one scenario file or every ``*.yaml`` in a folder, sorted by id; ids must be unique."""
    path = Path(path_or_dir)
    files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if path.is_dir() else [path]
    if not files:
        raise ScenarioError([f"{path}: no scenario files (*.yaml)"])
    scenarios: list[Scenario] = []
    problems: list[str] = []
    for file in files:
        try:
            scenarios.append(load_scenario_file(file))
        except ScenarioError as exc:
            problems.extend(exc.problems)
    seen: dict[str, Path | None] = {}
    sessions: dict[str, str] = {}
    for scenario in scenarios:
        if scenario.id in seen:
            problems.append(f"{scenario.source}: scenario id {scenario.id!r} also used in {seen[scenario.id]}")
        seen[scenario.id] = scenario.source
        if scenario.session_id in sessions:
            problems.append(
                f"{scenario.source}: session id {scenario.session_id!r} also used by scenario "
                f"{sessions[scenario.session_id]!r}"
            )
        sessions[scenario.session_id] = scenario.id
    if problems:
        raise ScenarioError(problems)
    return sorted(scenarios, key=lambda s: s.id)


_CACHE: dict[tuple[str, int, int], Scenario] = {}
_CACHE_LOCK = threading.Lock()


def load_scenario_file(file: Path) -> Scenario:
    """Read and validate one scenario file (safe loader only).

    Parsed files are cached by path, size and mtime: every test starts a sandbox, and the pure-Python
    YAML parser would otherwise dominate the suite's run time. Scenarios are never mutated.
    """
    try:
        stat = file.stat()
        cache_key = (str(file.resolve()), stat.st_mtime_ns, stat.st_size)
        with _CACHE_LOCK:
            cached = _CACHE.get(cache_key)
        if cached is not None:
            return cached
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError([f"{file}: cannot read: {exc.strerror or exc}"]) from exc
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{file}: not valid YAML: {exc}"]) from exc
    scenario = scenario_from_mapping(data, source=file)
    with _CACHE_LOCK:
        _CACHE[cache_key] = scenario
    return scenario


def scenario_from_mapping(data: object, *, source: Path | None = None) -> Scenario:
    """Validate a parsed scenario; all problems are reported at once."""
    where = str(source) if source else "<scenario>"
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ScenarioError([f"{where}: a scenario is a mapping with id, title, description, branch, session"])
    for key in sorted(set(data) - _TOP_KEYS):
        problems.append(f"{where}: unknown key {key!r} (allowed: {', '.join(sorted(_TOP_KEYS))})")
    for key in ("id", "title", "description", "branch"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            problems.append(f"{where}: {key!r} must be a non-empty string")
    session = data.get("session")
    if not isinstance(session, dict):
        problems.append(f"{where}: 'session' must be a mapping")
        session = {}
    problems.extend(validate_session_spec(session, where))
    turns = data.get("turns") or []
    events = data.get("events") or []
    logs = data.get("worker_logs") or []
    for name, value in (("turns", turns), ("events", events), ("worker_logs", logs)):
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            problems.append(f"{where}: {name!r} must be a list of mappings")
    if not problems:
        problems.extend(validate_turns(turns, where))
        problems.extend(validate_events(events, where))
        problems.extend(validate_log_entries(logs, where))
    if problems:
        raise ScenarioError(problems)
    return Scenario(
        id=data["id"],
        title=data["title"],
        description=data["description"].strip(),
        branch=data["branch"],
        session=session,
        turns=tuple(turns),
        events=tuple(events),
        worker_logs=tuple(logs),
        source=source,
    )


def _check_time(value: object, label: str, problems: list[str]) -> None:
    try:
        resolve_time(value, datetime(2000, 1, 1))
    except ValueError as exc:
        problems.append(f"{label}: {exc}")


def validate_session_spec(session: Mapping[str, Any], where: str) -> list[str]:
    """Problems in a ``session:`` block (also used by the admin API's create-session)."""
    problems: list[str] = []
    for key in sorted(set(session) - _SESSION_KEYS):
        problems.append(f"{where}: session: unknown key {key!r}")
    sid = session.get("id")
    if not isinstance(sid, str) or not ID_PATTERN.match(sid):
        problems.append(f"{where}: session.id must match {ID_PATTERN.pattern}")
    if session.get("status", "running") not in SESSION_STATUSES:
        problems.append(f"{where}: session.status must be one of {sorted(SESSION_STATUSES)}")
    if session.get("admission_state", "open") not in ADMISSION_STATES:
        problems.append(f"{where}: session.admission_state must be one of {sorted(ADMISSION_STATES)}")
    revision = session.get("revision", 1)
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
        problems.append(f"{where}: session.revision must be a non-negative integer")
    if session.get("resumable") not in (True, False, None):
        problems.append(f"{where}: session.resumable must be true, false or null")
    queued = session.get("queued_inputs", 0)
    if not isinstance(queued, int) or isinstance(queued, bool) or queued < 0:
        problems.append(f"{where}: session.queued_inputs must be a non-negative integer")
    for flag in ("reclamation_claim", "store_outage"):
        if not isinstance(session.get(flag, False), bool):
            problems.append(f"{where}: session.{flag} must be true or false")
    attention = session.get("attention")
    if attention is not None:
        if not isinstance(attention, dict):
            problems.append(f"{where}: session.attention must be a mapping or null")
        else:
            if attention.get("code") not in ATTENTION_CODES:
                problems.append(f"{where}: session.attention.code must be one of {sorted(ATTENTION_CODES)}")
            failures = attention.get("failures")
            if failures is not None and (not isinstance(failures, int) or isinstance(failures, bool)):
                problems.append(f"{where}: session.attention.failures must be an integer or null")
            _check_time(attention.get("retry_at"), f"{where}: session.attention.retry_at", problems)
    checkpoint = session.get("checkpoint")
    if checkpoint is not None:
        if not isinstance(checkpoint, dict) or not ID_PATTERN.match(str(checkpoint.get("id", ""))):
            problems.append(f"{where}: session.checkpoint needs an id matching {ID_PATTERN.pattern}")
        else:
            _check_time(checkpoint.get("committed_at", "now"), f"{where}: session.checkpoint.committed_at", problems)
    execution = session.get("execution")
    if execution is not None:
        if not isinstance(execution, dict) or execution.get("state") not in EXECUTION_STATES:
            problems.append(f"{where}: session.execution.state must be one of {sorted(EXECUTION_STATES)}")
        else:
            if execution.get("phase", "ready") not in WORKER_PHASES:
                problems.append(f"{where}: session.execution.phase must be one of {sorted(WORKER_PHASES)}")
            if not isinstance(execution.get("alive", execution["state"] == "running"), bool):
                problems.append(f"{where}: session.execution.alive must be true or false")
            if execution["state"] == "gone" and execution.get("alive"):
                problems.append(f"{where}: session.execution: a gone worker cannot be alive")
            strays = execution.get("stray_workers", 0)
            if not isinstance(strays, int) or isinstance(strays, bool) or strays < 0:
                problems.append(f"{where}: session.execution.stray_workers must be a non-negative integer")
            for key in ("confirmed_gone_at", "started_at"):
                _check_time(execution.get(key), f"{where}: session.execution.{key}", problems)
    return problems


def validate_turns(turns: list[dict[str, Any]], where: str) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for i, turn in enumerate(turns):
        label = f"{where}: turns[{i}]"
        tid = turn.get("id")
        if not isinstance(tid, str) or not ID_PATTERN.match(tid):
            problems.append(f"{label}.id must match {ID_PATTERN.pattern}")
        elif tid in seen:
            problems.append(f"{label}.id {tid!r} is used twice")
        else:
            seen.add(tid)
        status = turn.get("status")
        if status not in TURN_STATUSES:
            problems.append(f"{label}.status must be one of {sorted(TURN_STATUSES)}")
        reason = turn.get("terminal_reason")
        if status == "outcome_unknown" and reason not in TERMINAL_REASONS:
            problems.append(f"{label}.terminal_reason must be one of {sorted(TERMINAL_REASONS)}")
        if status != "outcome_unknown" and reason is not None:
            problems.append(f"{label}.terminal_reason is only for outcome_unknown turns")
        for key in ("started_at", "ended_at"):
            _check_time(turn.get(key), f"{label}.{key}", problems)
    return problems


def validate_events(events: list[dict[str, Any]], where: str) -> list[str]:
    problems: list[str] = []
    for i, event in enumerate(events):
        if not isinstance(event.get("name"), str):
            problems.append(f"{where}: events[{i}].name must be a string")
        for key in [k for k in event if k == "at" or k.endswith("_at")]:
            _check_time(event[key], f"{where}: events[{i}].{key}", problems)
    return problems


def validate_log_entries(entries: list[dict[str, Any]], where: str) -> list[str]:
    problems: list[str] = []
    for i, entry in enumerate(entries):
        label = f"{where}: worker_logs[{i}]"
        kinds = [k for k in ("json", "text") if k in entry]
        if len(kinds) != 1:
            problems.append(f"{label}: give exactly one of 'json' (a mapping) or 'text' (a line)")
        elif kinds == ["json"] and not isinstance(entry["json"], dict):
            problems.append(f"{label}.json must be a mapping")
        elif kinds == ["text"] and (not isinstance(entry["text"], str) or "\n" in entry["text"]):
            problems.append(f"{label}.text must be one line of text")
        for key in sorted(set(entry) - {"at", "json", "text"}):
            problems.append(f"{label}: unknown key {key!r}")
        _check_time(entry.get("at", "now"), f"{label}.at", problems)
    return problems
