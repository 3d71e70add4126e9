"""Reconciler operations: dry run, gated real pass, status, daemon preflight (runbook §1).

Why it looks like this:
- The reconciler is found by labels (R1.3) and then addressed by its compose *name*, so a socket
  proxy can pin exec to ``<project>-reconciler-<n>``; nobody types a container id.
- The exec's argv comes only from the runbook config, as a list (no shell); the only thing added is
  ``RECONCILER_DRY_RUN``, on top of the container's own environment (R1.1, R1.3).
- A dry run and a real pass are rows written before the exec starts, so a crash mid-pass leaves a
  trace; every outcome is also a step in the hash-chained step log.
- A real pass needs a successful dry run of the same installation, recent enough, and it is one
  transaction that marks it reviewed and claims it, so a double click cannot run two passes on one
  review (R1.2).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import secrets
import shlex
import sqlite3
import tarfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import docker
from sqlite_utils import Database

from bot.clock import Clock, SystemClock, isoformat, parse_time
from bot.dockerops import _schema  # noqa: F401 - registers the "dockerops" migrations
from bot.dockerops._config import PROJECT_NAME, ReconcilerConfig
from bot.dockerops._engine import (
    DockerClientFactory,
    client_host,
    connect,
    daemon_now,
    parse_docker_time,
    translate,
)
from bot.dockerops._exec import ExecResult, run_exec
from bot.errors import DockerOpsError
from bot.messages import Attachment, Button, Message, Reply
from bot.redact import redact
from bot.store import Store

DRYRUN_ID = re.compile(r"^dry_[a-z0-9]{4,40}$")
#: A status file bigger than this is not a status file; it is not read into memory.
STATUS_FILE_CAP = 256 * 1024
#: Output shown inline at most (the rest goes to the attachment).
INLINE_CHARS = 3000
INLINE_LINE_CHARS = 300


class ReconcileRefused(DockerOpsError):
    """A real pass refused before anything ran: no usable reviewed dry run (R1.2)."""


@dataclass(frozen=True)
class ReconcilerTarget:
    """The one running reconciler of the installation, by name (the socket proxy pins exec to it)."""

    name: str
    id: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class PassLine:
    """A ``Reconciler pass completed`` / ``failed`` log line and its time (Docker's, else the line's)."""

    kind: str
    at: datetime | None
    text: str


def _rows(db: Database, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
    cur = db.conn.cursor()
    cur.row_factory = sqlite3.Row
    return list(cur.execute(sql, list(params)).fetchall())


def _fmt_duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _fmt_age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def summarise_output(text: str, max_lines: int) -> tuple[list[str], bool]:
    """The lines to show inline, and whether the output was cut (then it is attached whole)."""
    lines = text.splitlines()
    cut = len(lines) > max_lines or len(text) > INLINE_CHARS
    shown = [ln if len(ln) <= INLINE_LINE_CHARS else ln[:INLINE_LINE_CHARS] + " …" for ln in lines]
    if not cut:
        return shown, False
    head = max(1, max_lines // 2)
    tail = max(1, max_lines - head)
    while head + tail > 2 and sum(len(x) for x in shown[:head] + shown[-tail:]) > INLINE_CHARS:
        head, tail = max(1, head - 1), max(1, tail - 1)
    omitted = max(0, len(shown) - head - tail)
    middle = [f"… {omitted} more lines; the full output is attached …"] if omitted else []
    return shown[:head] + middle + (shown[-tail:] if omitted else shown[head:]), True


class DockerOps:
    """The reconciler commands of one installation (``RECOVER_INSTALLATION`` = compose project)."""

    def __init__(
        self,
        store: Store,
        *,
        installation: str | None,
        config: ReconcilerConfig | None = None,
        docker_client_factory: DockerClientFactory = docker.from_env,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.installation = installation
        self.config = config or ReconcilerConfig()
        self.docker_client_factory = docker_client_factory
        self.clock: Clock = clock or SystemClock()

    # -- plumbing ------------------------------------------------------------------------------

    def _project(self) -> str:
        if not self.installation:
            raise DockerOpsError(
                "RECOVER_INSTALLATION is not set: the bot does not know which installation's reconciler "
                "to use.",
                hint="Set it to the installation's compose project name (its compose project label).",
            )
        if not PROJECT_NAME.match(self.installation):
            raise DockerOpsError(
                f"RECOVER_INSTALLATION={self.installation!r} is not a compose project name "
                "(lower-case letters, digits, '-' and '_')."
            )
        return self.installation

    @contextmanager
    def _client(self) -> Iterator[tuple[docker.DockerClient, str]]:
        client = connect(self.docker_client_factory)
        try:
            yield client, client_host(client, self.docker_client_factory)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _now(self) -> str:
        text = isoformat(self.clock.now())
        assert text is not None
        return text

    def find_reconciler(self, client: docker.DockerClient, host: str) -> ReconcilerTarget:
        """Exactly one running container with the project and service labels (R1.3), else an error."""
        project = self._project()
        cfg = self.config
        labels = cfg.labels(project)
        searched = f"labels {' and '.join(labels)}, status {cfg.status}"
        with translate("Looking for the reconciler container", host):
            found = client.api.containers(filters={"label": labels, "status": cfg.status})
        if not found:
            with translate("Looking for the reconciler container", host):
                others = client.api.containers(all=True, filters={"label": labels})
            seen = ", ".join(f"{_name(c)} ({c.get('State') or c.get('Status')})" for c in others)
            raise DockerOpsError(
                f"No reconciler found: no container with {searched}.",
                hint=(
                    f"Containers with those labels that are not {cfg.status}: {seen}."
                    if others
                    else "Check RECOVER_INSTALLATION (the compose project) and that the reconciler is up."
                ),
            )
        if len(found) > 1:
            names = ", ".join(sorted(_name(c) for c in found))
            raise DockerOpsError(
                f"{len(found)} containers match {searched}: {names}. Expected exactly one reconciler.",
                hint="Stop the extra one (or fix its labels); the bot will not guess which one to exec in.",
            )
        name = _name(found[0])
        if not cfg.name_regex(project).match(name):
            expected = cfg.name_pattern.format(project=project, n="<n>")
            raise DockerOpsError(
                f"The reconciler container is named {name!r}, not {expected}: the socket proxy allows exec "
                "only on the compose name.",
                hint="Start it with docker compose (it names containers <project>-<service>-<n>).",
            )
        return ReconcilerTarget(name=name, id=str(found[0].get("Id", "")), labels=tuple(labels))

    # -- dry run (R1.1) ----------------------------------------------------------------------

    def dryrun(self, actor: str) -> Reply:
        """Exec the pass with ``RECONCILER_DRY_RUN=true`` and record it as ``dry_…`` (R1.1)."""
        project = self._project()
        cfg = self.config
        env = {cfg.dry_run_env: cfg.dry_value}
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            dry_id = f"dry_{secrets.token_hex(6)}"
            with self.store.write() as db:
                db.execute(
                    "INSERT INTO dryruns (id, installation, container, argv, environment, actor, started_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        dry_id,
                        project,
                        target.name,
                        json.dumps(list(cfg.argv)),
                        json.dumps(env),
                        actor,
                        self._now(),
                    ],
                )
            result = self._exec(client, host, target, env, table="dryruns", row_id=dry_id, actor=actor)
        return self._dryrun_reply(dry_id, project, target, env, result)

    def _dryrun_reply(
        self, dry_id: str, project: str, target: ReconcilerTarget, env: dict[str, str], result: ExecResult
    ) -> Reply:
        cfg = self.config
        text = redact(result.output.decode("utf-8", errors="replace"))
        facts = self._exec_facts(dry_id, "Dry run", project, target, env, result)
        if result.timed_out:
            return Reply.of(
                self._unknown_message("Reconciler dry run", dry_id, target, result, facts), ok=False
            )
        shown, cut = summarise_output(text, cfg.summary_lines)
        attachment = Attachment(f"{dry_id}.txt", text) if cut else None
        if result.succeeded:
            window = _fmt_age(cfg.review_window_seconds)
            command = f"/recover reconcile --reviewed {dry_id}"
            message = Message(
                headline=f"Reconciler dry run {dry_id}: exit 0 in {_fmt_duration(result.duration_s)}",
                level="ok",
                facts=facts,
                lines=[
                    *shown,
                    "",
                    cfg.caution_dry_run,
                    f"Review the targets above. The real pass changes the database (R1.2): within {window}, "
                    f"press the button or type `{command}`.",
                    cfg.caution_overlap_safe,
                ],
                rules=["R1.1", "R1.2", "R1.3", "R1.6"],
                buttons=[
                    Button(
                        label="Reviewed — run the real pass",
                        action="reconcile_reviewed",
                        value=dry_id,
                        command=command,
                        style="primary",
                    )
                ],
                attachment=attachment,
                kind="reconciler_dryrun",
                ref=dry_id,
            )
            return Reply.of(message)
        message = Message(
            headline=f"Reconciler dry run {dry_id} failed: exit {result.exit_code} in "
            f"{_fmt_duration(result.duration_s)}",
            level="error",
            facts=facts,
            lines=[
                *shown,
                "",
                "A real pass needs a successful dry run: fix the cause and run /recover dryrun again.",
            ],
            rules=["R1.1", "R1.2"],
            attachment=attachment,
            kind="reconciler_dryrun",
            ref=dry_id,
        )
        return Reply.of(message, ok=False)

    # -- real pass (R1.2) --------------------------------------------------------------------

    def reconcile(self, actor: str, dryrun_id: str) -> Reply:
        """The real pass, only on a recent, successful dry run of this installation (R1.2).

        Calling this *is* the review: ``actor`` is recorded as the reviewer (R1.2 asks for a review,
        not a second person, so the one who ran the dry run may review it).
        """
        dryrun_id = dryrun_id.strip() if isinstance(dryrun_id, str) else ""
        if not DRYRUN_ID.match(dryrun_id):
            raise ReconcileRefused(
                f"{redact(dryrun_id[:80])!r} is not a dry-run id (they look like dry_3f9a1c2b7e10).",
                hint="Run /recover dryrun, review its output, then use the id it shows.",
            )
        project = self._project()
        cfg = self.config
        with self.store.read() as db:
            self._check_dryrun(db, dryrun_id, project)  # refuse early, before touching Docker
        env = {cfg.dry_run_env: cfg.real_value}
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            pass_id = f"pass_{secrets.token_hex(6)}"
            with self.store.write() as db:
                self._check_dryrun(db, dryrun_id, project)
                now = self._now()
                db.execute(
                    "UPDATE dryruns SET reviewed_by = ?, reviewed_at = ? WHERE id = ?",
                    [actor, now, dryrun_id],
                )
                db.execute(
                    "INSERT INTO passes (id, dryrun_id, installation, container, argv, environment, actor,"
                    " reviewed_by, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        pass_id,
                        dryrun_id,
                        project,
                        target.name,
                        json.dumps(list(cfg.argv)),
                        json.dumps(env),
                        actor,
                        actor,
                        now,
                    ],
                )
                self.store.record_step(
                    None,
                    actor,
                    "reconciler_reviewed",
                    {"dryrun_id": dryrun_id, "installation": project, "pass_id": pass_id},
                    "reviewed",
                    detail={"reviewed_by": actor, "container": target.name},
                    db=db,
                )
            result = self._exec(
                client, host, target, env, table="passes", row_id=pass_id, actor=actor, dryrun_id=dryrun_id
            )
        return self._pass_reply(pass_id, dryrun_id, actor, project, target, env, result)

    def _check_dryrun(self, db: Database, dryrun_id: str, project: str) -> sqlite3.Row:
        cfg = self.config
        rows = _rows(db, "SELECT * FROM dryruns WHERE id = ?", [dryrun_id])
        if not rows:
            raise ReconcileRefused(
                f"No dry run {dryrun_id} in the bot's records.",
                hint="Run /recover dryrun first and review its output (R1.2).",
            )
        row = rows[0]
        if row["installation"] != project:
            raise ReconcileRefused(
                f"Dry run {dryrun_id} was run on installation {row['installation']!r}, not on {project!r}.",
                hint="Run /recover dryrun on this installation and review it first (R1.2).",
            )
        outcome = row["outcome"]
        if outcome != "succeeded":
            why = {
                "failed": f"failed (exit {row['exit_code']})",
                "unknown": "has an unknown outcome (it timed out or its container went away)",
                "running": "has not finished",
            }.get(outcome, outcome)
            raise ReconcileRefused(
                f"Dry run {dryrun_id} {why}: a real pass needs a successful dry run (R1.2).",
                hint="Fix the cause, run /recover dryrun again and review the new one.",
            )
        finished = parse_time(row["finished_at"])
        now = self.clock.now()
        window = timedelta(seconds=cfg.review_window_seconds)
        if finished is None or now - finished > window:
            age = _fmt_age((now - finished).total_seconds()) if finished else "an unknown time"
            raise ReconcileRefused(
                f"Dry run {dryrun_id} finished {age} ago; a real pass needs one from the last "
                f"{_fmt_age(cfg.review_window_seconds)} (R1.2).",
                hint="The database may have changed since: run /recover dryrun again and review it.",
            )
        used = _rows(
            db,
            "SELECT id, actor, started_at FROM passes WHERE dryrun_id = ? AND outcome != 'not_started'",
            [dryrun_id],
        )
        if used:
            raise ReconcileRefused(
                f"Dry run {dryrun_id} was already used by real pass {used[0]['id']} "
                f"({used[0]['actor']}, {used[0]['started_at']}).",
                hint="The database has changed since: run /recover dryrun again and review it.",
            )
        return row

    def _pass_reply(
        self,
        pass_id: str,
        dryrun_id: str,
        reviewer: str,
        project: str,
        target: ReconcilerTarget,
        env: dict[str, str],
        result: ExecResult,
    ) -> Reply:
        cfg = self.config
        facts = self._exec_facts(pass_id, "Real pass", project, target, env, result)
        facts[1:1] = [("Reviewed dry run", dryrun_id), ("Reviewed by", reviewer)]
        if result.timed_out:
            return Reply.of(
                self._unknown_message("Reconciler real pass", pass_id, target, result, facts), ok=False
            )
        text = redact(result.output.decode("utf-8", errors="replace"))
        shown, cut = summarise_output(text, cfg.summary_lines)
        ok = result.succeeded
        message = Message(
            headline=(
                f"Reconciler real pass {pass_id}: exit 0 in {_fmt_duration(result.duration_s)}"
                if ok
                else f"Reconciler real pass {pass_id} failed: exit {result.exit_code} in "
                f"{_fmt_duration(result.duration_s)}"
            ),
            level="ok" if ok else "error",
            facts=facts,
            lines=[*shown, "", cfg.caution_not_removed, cfg.caution_overlap_safe],
            rules=["R1.2", "R1.5", "R1.6"],
            attachment=Attachment(f"{pass_id}.txt", text) if cut else None,
            kind="reconciler_pass",
            ref=pass_id,
        )
        return Reply.of(message, ok=ok)

    # -- shared exec path ----------------------------------------------------------------------

    def _exec(
        self,
        client: docker.DockerClient,
        host: str,
        target: ReconcilerTarget,
        env: dict[str, str],
        *,
        table: str,
        row_id: str,
        actor: str,
        dryrun_id: str | None = None,
    ) -> ExecResult:
        """Run the configured argv, then complete the row and the step log in one transaction."""
        cfg = self.config
        step = "reconciler_dryrun" if table == "dryruns" else "reconciler_pass"
        inputs: dict[str, Any] = {
            "id": row_id,
            "installation": self.installation,
            "container": target.name,
            "argv": list(cfg.argv),
            "environment": env,
        }
        if dryrun_id:
            inputs["dryrun_id"] = dryrun_id
        try:
            result = run_exec(
                client,
                target.name,
                list(cfg.argv),
                env,
                timeout=cfg.exec_timeout_seconds,
                output_cap=cfg.output_cap_bytes,
                host=host,
            )
        except DockerOpsError as exc:
            # Nothing ran (the exec could not be created or started).
            outcome = "not_started" if table == "passes" else "failed"
            self._finish(table, row_id, outcome, None, actor, step, inputs, {"error": str(exc)})
            raise
        if result.timed_out or result.container_gone:
            outcome = "unknown"
        else:
            outcome = "succeeded" if result.exit_code == 0 else "failed"
        detail: dict[str, Any] = {
            "exit_code": result.exit_code,
            "duration_ms": int(result.duration_s * 1000),
            "exec_id": result.exec_id,
            "pid": result.pid,
            "output_bytes": result.output_bytes,
        }
        if result.timed_out:
            detail["note"] = (
                f"still running after {cfg.exec_timeout_seconds:g} s; the Docker API cannot stop it (R1.6)"
            )
        if result.container_gone:
            detail["note"] = "the container went away during the exec"
        self._finish(table, row_id, outcome, result, actor, step, inputs, detail)
        if result.container_gone:
            raise DockerOpsError(
                f"The reconciler container {target.name} went away (stopped or removed) during the "
                f"{'dry run' if table == 'dryruns' else 'real pass'} {row_id} (exec {result.exec_id[:12]}): "
                "its outcome is unknown and was recorded as unknown.",
                hint="Check that the reconciler is running again; a later pass is safe (R1.6).",
            )
        return result

    def _finish(
        self,
        table: str,
        row_id: str,
        outcome: str,
        result: ExecResult | None,
        actor: str,
        step: str,
        inputs: dict[str, Any],
        detail: dict[str, Any],
    ) -> None:
        output = redact(result.output.decode("utf-8", errors="replace")) if result else None
        with self.store.write() as db:
            db.execute(
                f"UPDATE {table} SET finished_at = ?, outcome = ?, exit_code = ?, duration_ms = ?, "  # noqa: S608
                "output = ?, output_bytes = ?, exec_id = ?, pid = ?, detail = ? WHERE id = ?",
                [
                    self._now(),
                    outcome,
                    result.exit_code if result else None,
                    int(result.duration_s * 1000) if result else None,
                    output,
                    result.output_bytes if result else None,
                    result.exec_id if result else None,
                    result.pid if result else None,
                    json.dumps(detail),
                    row_id,
                ],
            )
            self.store.record_step(None, actor, step, inputs, outcome, detail=detail, db=db)

    def _exec_facts(
        self,
        row_id: str,
        label: str,
        project: str,
        target: ReconcilerTarget,
        env: dict[str, str],
        result: ExecResult,
    ) -> list[tuple[str, str]]:
        lines = result.output.count(b"\n")
        size = f"{result.output_bytes} bytes, {lines} lines"
        if result.truncated:
            size += f" (first {len(result.output)} bytes kept)"
        return [
            (label, row_id),
            ("Installation", project),
            ("Container", target.name),
            ("Command", shlex.join(self.config.argv)),
            (
                "Environment",
                " ".join(f"{k}={v}" for k, v in env.items())
                + " (plus the container's own environment, R1.3)",
            ),
            ("Exit code", "unknown" if result.exit_code is None else str(result.exit_code)),
            ("Duration", _fmt_duration(result.duration_s)),
            ("Output", size),
        ]

    def _unknown_message(
        self,
        what: str,
        row_id: str,
        target: ReconcilerTarget,
        result: ExecResult,
        facts: list[tuple[str, str]],
    ) -> Message:
        cfg = self.config
        pid = "unknown" if result.pid is None else str(result.pid)
        text = redact(result.output.decode("utf-8", errors="replace"))
        shown, cut = summarise_output(text, cfg.summary_lines)
        return Message(
            headline=f"{what} {row_id}: outcome unknown — still running after {cfg.exec_timeout_seconds:g} s",
            level="warn",
            facts=[*facts, ("Exec id", result.exec_id), ("Pid (on the Docker host)", pid)],
            lines=[
                "The Docker API cannot stop an exec'd process: the pass may still be running in "
                f"{target.name} "
                f"(exec {result.exec_id[:12]}, pid {pid} on the Docker host). The outcome is recorded as unknown.",
                "A later pass is safe: overlapping passes re-check each write under a row lock (R1.6). "
                "Run /recover dryrun again before another real pass.",
                *(["Output so far:", *shown] if shown else []),
            ],
            rules=["R1.6"],
            attachment=Attachment(f"{row_id}.txt", text) if cut else None,
            kind="reconciler_dryrun" if row_id.startswith("dry_") else "reconciler_pass",
            ref=row_id,
        )

    # -- status (R1.4) -----------------------------------------------------------------------

    def status(self) -> Reply:
        """The status file as it is, plus the latest pass lines from the container's log (R1.4)."""
        project = self._project()
        cfg = self.config
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            status_text, status_note = self._read_status_file(client, host, target)
            completed, failed = self._last_pass_lines(client, host, target)
            now = daemon_now(client, host)
        facts: list[tuple[str, str]] = [("Installation", project), ("Container", target.name)]
        for label, line in (("Last pass completed", completed), ("Last pass failed", failed)):
            if line is None:
                facts.append((label, f"none in the last {cfg.status_log_tail} log lines"))
            else:
                when = isoformat(line.at) if line.at else "time unknown"
                age = f" ({_fmt_age((now - line.at).total_seconds())} ago)" if line.at else ""
                facts.append((label, f"{when}{age}"))
        lines: list[str] = [f"{cfg.status_path}:"]
        attachment = None
        if status_text is None:
            lines.append(f"  ({status_note})")
        else:
            shown, cut = summarise_output(status_text, cfg.summary_lines)
            lines.extend(shown)
            if cut:
                attachment = Attachment("reconciler-status.json", status_text)
        lines.append("")
        for line in (completed, failed):
            if line is not None:
                lines.append(line.text[:INLINE_LINE_CHARS])
        lines.append(cfg.caution_not_removed)
        message = Message(
            headline=f"Reconciler status on {project}",
            level="warn" if (failed and (completed is None or _later(failed, completed))) else "info",
            facts=facts,
            lines=lines,
            rules=["R1.4", "R1.5"],
            attachment=attachment,
            kind="reconciler_status",
        )
        return Reply.of(message)

    def _read_status_file(
        self, client: docker.DockerClient, host: str, target: ReconcilerTarget
    ) -> tuple[str | None, str]:
        """Read through the archive API (never an exec of ``cat``): a tar stream of one file."""
        path = self.config.status_path
        try:
            with translate(f"Reading {path} from {target.name}", host):
                stream, stat = client.api.get_archive(target.name, path)
        except DockerOpsError as exc:
            cause = exc.__cause__
            if isinstance(cause, docker.errors.NotFound) and "no such container" not in str(cause).lower():
                return (
                    None,
                    "no status file yet: the reconciler has not written one since the container started",
                )
            raise
        size = int(stat.get("size") or 0) if isinstance(stat, dict) else 0
        if size > STATUS_FILE_CAP:
            _close(stream)
            return None, f"the status file is {size} bytes, too large to show (limit {STATUS_FILE_CAP})"
        data = bytearray()
        with translate(f"Reading {path} from {target.name}", host):
            for chunk in stream:
                data += chunk
                if len(data) > STATUS_FILE_CAP + 64 * 1024:
                    break
        _close(stream)
        try:
            with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as tar:
                member = next((m for m in tar.getmembers() if m.isfile()), None)
                extracted = tar.extractfile(member) if member is not None else None
                content = extracted.read(STATUS_FILE_CAP) if extracted is not None else None
        except tarfile.TarError as exc:
            return None, f"the engine's archive of the status file could not be read ({exc})"
        if content is None:
            return None, "the status path is not a regular file"
        return redact(content.decode("utf-8", errors="replace")), ""

    def last_pass_lines(self) -> tuple[PassLine | None, PassLine | None]:
        """The latest completed and failed pass lines (R1.4), for diagnose's reconciler facts."""
        self._project()
        with self._client() as (client, host):
            target = self.find_reconciler(client, host)
            return self._last_pass_lines(client, host, target)

    def _last_pass_lines(
        self, client: docker.DockerClient, host: str, target: ReconcilerTarget
    ) -> tuple[PassLine | None, PassLine | None]:
        """The latest completed and failed pass lines among the log's last ``status_log_tail`` lines."""
        cfg = self.config
        completed: PassLine | None = None
        failed: PassLine | None = None
        with translate(f"Reading the logs of {target.name}", host):
            stream = client.api.logs(
                target.name,
                stdout=True,
                stderr=True,
                timestamps=True,
                tail=cfg.status_log_tail,
                stream=True,
                follow=False,  # the SDK follows a streamed log by default: never wait for new lines
            )
            try:
                for raw in _lines_of(stream):
                    text = raw.decode("utf-8", errors="replace").rstrip("\r")
                    if cfg.completed_pattern in text:
                        completed = _pass_line("completed", text)
                    elif cfg.failed_pattern in text:
                        failed = _pass_line("failed", text)
            finally:
                _close(stream)
        return completed, failed

    # -- preflight (R1.7) --------------------------------------------------------------------

    def preflight(self, minimum_major: int, advice: Sequence[str] = ()) -> Reply:
        """The daemon's version against the isolation runbook's minimum (R1.7), with deploy-order advice."""
        with self._client() as (client, host), translate("Reading the Docker daemon's version", host):
            version = client.api.version()
        text = str(version.get("Version") or "")
        match = re.match(r"^v?(\d+)(?:\.(\d+))?", text)
        facts = [
            ("Docker daemon", text or "unknown"),
            ("API version", str(version.get("ApiVersion") or "unknown")),
            ("Minimum", f"{minimum_major}.0"),
        ]
        if match is None:
            return Reply.of(
                Message(
                    headline=f"Cannot read the Docker daemon's version ({text!r}): preflight not passed",
                    level="error",
                    facts=facts,
                    lines=list(advice),
                    rules=["R1.7", "R2.17"],
                    kind="preflight",
                ),
                ok=False,
            )
        major = int(match.group(1))
        if major >= minimum_major:
            return Reply.of(
                Message(
                    headline=f"Preflight passed: Docker daemon {text} ≥ {minimum_major}",
                    level="ok",
                    facts=facts,
                    lines=["The isolation-contract change may be rolled out, in this order:", *advice],
                    rules=["R1.7", "R2.17"],
                    kind="preflight",
                ),
            )
        return Reply.of(
            Message(
                headline=f"Preflight failed: Docker daemon {text} is older than {minimum_major}",
                level="error",
                facts=facts,
                lines=[
                    f"Upgrade the Docker daemon to {minimum_major} or newer first (R1.7). "
                    "On an older daemon the preflight blocks the whole pass, "
                    "so even existing workers cannot be replaced.",
                    *advice,
                ],
                rules=["R1.7", "R2.17"],
                kind="preflight",
            ),
            ok=False,
        )

    # -- records -------------------------------------------------------------------------------

    def get_dryrun(self, dryrun_id: str) -> dict[str, Any] | None:
        """A recorded dry run (for the router's history views and tests)."""
        with self.store.read() as db:
            rows = _rows(db, "SELECT * FROM dryruns WHERE id = ?", [dryrun_id])
        return dict(rows[0]) if rows else None

    def get_pass(self, pass_id: str) -> dict[str, Any] | None:
        with self.store.read() as db:
            rows = _rows(db, "SELECT * FROM passes WHERE id = ?", [pass_id])
        return dict(rows[0]) if rows else None

    def passes_for(self, dryrun_id: str) -> list[dict[str, Any]]:
        with self.store.read() as db:
            rows = _rows(db, "SELECT * FROM passes WHERE dryrun_id = ? ORDER BY started_at", [dryrun_id])
        return [dict(r) for r in rows]


def _name(container: dict[str, Any]) -> str:
    names = container.get("Names") or []
    return str(names[0]).lstrip("/") if names else str(container.get("Id", "?"))[:12]


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()


def _lines_of(chunks: Any) -> Iterator[bytes]:
    """Whole lines out of a byte stream whose chunks do not follow line ends."""
    carry = b""
    for chunk in chunks:
        if not chunk:
            continue
        data = carry + chunk
        parts = data.split(b"\n")
        carry = parts.pop()
        yield from parts
        if len(carry) > 1024 * 1024:  # one absurd line: keep its start only
            yield carry
            carry = b""
    if carry:
        yield carry


_DOCKER_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s(.*)$")


def _pass_line(kind: str, text: str) -> PassLine:
    """Docker's own timestamp first (it is the host's clock); else the time the line starts with."""
    m = _DOCKER_TS.match(text)
    if not m:
        return PassLine(kind, None, text)
    at = parse_docker_time(m.group(1))
    rest = m.group(2)
    if at is None:
        inner = _DOCKER_TS.match(rest)
        at = parse_docker_time(inner.group(1)) if inner else None
    return PassLine(kind, at, rest)


def _later(a: PassLine, b: PassLine) -> bool:
    return a.at is not None and b.at is not None and a.at > b.at
