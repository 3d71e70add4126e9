"""What the reconciler commands say: dry run, real pass, unknown outcome, status and preflight messages.

Plain data (:class:`bot.messages.Message`); each front renders it. Output is redacted before it is
shown, cut to a few lines inline and attached whole when it is longer (R1.1).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from datetime import datetime

from bot.clock import isoformat
from bot.dockerops._config import ReconcilerConfig
from bot.dockerops._exec import ExecResult
from bot.dockerops._reconciler import PassLine, ReconcilerTarget, later
from bot.format import rough_age, run_time
from bot.ids import IdKind, is_kind
from bot.messages import Attachment, Button, Message, Reply
from bot.redact import redact
from bot.vocab import Action

#: Output shown inline at most (the rest goes to the attachment).
INLINE_CHARS = 3000
INLINE_LINE_CHARS = 300


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


def exec_facts(
    cfg: ReconcilerConfig,
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
        ("Command", shlex.join(cfg.argv)),
        (
            "Environment",
            " ".join(f"{k}={v}" for k, v in env.items()) + " (plus the container's own environment, R1.3)",
        ),
        ("Exit code", "unknown" if result.exit_code is None else str(result.exit_code)),
        ("Duration", run_time(result.duration_s)),
        ("Output", size),
    ]


def unknown_message(
    cfg: ReconcilerConfig,
    what: str,
    row_id: str,
    target: ReconcilerTarget,
    result: ExecResult,
    facts: list[tuple[str, str]],
) -> Message:
    """A timed-out exec: the Docker API cannot stop it, so the outcome is unknown (R1.6)."""
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
        kind="reconciler_dryrun" if is_kind(row_id, IdKind.DRYRUN) else "reconciler_pass",
        ref=row_id,
    )


def dryrun_reply(
    cfg: ReconcilerConfig,
    dry_id: str,
    project: str,
    target: ReconcilerTarget,
    env: dict[str, str],
    result: ExecResult,
) -> Reply:
    """The dry run's output and, when it succeeded, the button that runs the real pass (R1.1, R1.2)."""
    text = redact(result.output.decode("utf-8", errors="replace"))
    facts = exec_facts(cfg, dry_id, "Dry run", project, target, env, result)
    if result.timed_out:
        return Reply.of(unknown_message(cfg, "Reconciler dry run", dry_id, target, result, facts), ok=False)
    shown, cut = summarise_output(text, cfg.summary_lines)
    attachment = Attachment(f"{dry_id}.txt", text) if cut else None
    if result.succeeded:
        window = rough_age(cfg.review_window_seconds)
        command = f"/recover reconcile --reviewed {dry_id}"
        message = Message(
            headline=f"Reconciler dry run {dry_id}: exit 0 in {run_time(result.duration_s)}",
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
                    action=Action.RECONCILE_REVIEWED,
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
        headline=f"Reconciler dry run {dry_id} failed: exit {result.exit_code} in {run_time(result.duration_s)}",
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


def pass_reply(
    cfg: ReconcilerConfig,
    pass_id: str,
    dryrun_id: str,
    reviewer: str,
    project: str,
    target: ReconcilerTarget,
    env: dict[str, str],
    result: ExecResult,
) -> Reply:
    """The real pass's output, with the reviewed dry run and its reviewer (R1.2, R1.5, R1.6)."""
    facts = exec_facts(cfg, pass_id, "Real pass", project, target, env, result)
    facts[1:1] = [("Reviewed dry run", dryrun_id), ("Reviewed by", reviewer)]
    if result.timed_out:
        return Reply.of(unknown_message(cfg, "Reconciler real pass", pass_id, target, result, facts), ok=False)
    text = redact(result.output.decode("utf-8", errors="replace"))
    shown, cut = summarise_output(text, cfg.summary_lines)
    ok = result.succeeded
    message = Message(
        headline=(
            f"Reconciler real pass {pass_id}: exit 0 in {run_time(result.duration_s)}"
            if ok
            else f"Reconciler real pass {pass_id} failed: exit {result.exit_code} in {run_time(result.duration_s)}"
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


def status_reply(
    cfg: ReconcilerConfig,
    project: str,
    target: ReconcilerTarget,
    status: tuple[str | None, str],
    completed: PassLine | None,
    failed: PassLine | None,
    now: datetime,
) -> Reply:
    """The status file as it is, plus the latest pass lines and their age (R1.4, R1.5)."""
    status_text, status_note = status
    facts: list[tuple[str, str]] = [("Installation", project), ("Container", target.name)]
    for label, line in (("Last pass completed", completed), ("Last pass failed", failed)):
        if line is None:
            facts.append((label, f"none in the last {cfg.status_log_tail} log lines"))
        else:
            when = isoformat(line.at) if line.at else "time unknown"
            age = f" ({rough_age((now - line.at).total_seconds())} ago)" if line.at else ""
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
        level="warn" if (failed and (completed is None or later(failed, completed))) else "info",
        facts=facts,
        lines=lines,
        rules=["R1.4", "R1.5"],
        attachment=attachment,
        kind="reconciler_status",
    )
    return Reply.of(message)


def preflight_reply(version: dict[str, object], minimum_major: int, advice: Sequence[str]) -> Reply:
    """The daemon's version against the isolation runbook's minimum, with deploy-order advice (R1.7)."""
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
