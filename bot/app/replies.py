"""Replies the router gives without the core: an error in words for a person, the demo's notice for
a Docker-only command, the console's completion words, and the reporter that keeps what is posted for
``details``."""

from __future__ import annotations

import logging

from bot.app.details import FullMessages
from bot.app.routing import Completions
from bot.dockerops import DockerEndpoint
from bot.errors import CommandError, ControlHostError, RecoverError
from bot.messages import Message, Reply, Reporter
from bot.redact import redact
from bot.runbook import RunbookSet
from bot.settings import Settings

log = logging.getLogger("bot.app.router")


def error_reply(exc: BaseException) -> Reply:
    """The one place an error becomes words for a person."""
    if isinstance(exc, CommandError):
        lines = [exc.usage] if exc.usage else []
        return Reply.of(Message(headline=redact(exc.message), level="error", lines=lines), ok=False)
    if isinstance(exc, ControlHostError):
        status = f"HTTP {exc.status} " if exc.status else ""
        lines = [redact(exc.hint)] if exc.hint else []
        if exc.retryable:
            lines.append("This is retryable: the same request is safe to repeat (same Idempotency-Key).")
        return Reply.of(
            Message(
                headline=f"Control host: {status}{exc.code}: {redact(exc.message)}",
                level="error",
                lines=lines,
            ),
            ok=False,
        )
    if isinstance(exc, RecoverError):
        lines = [redact(exc.hint)] if exc.hint else []
        return Reply.of(Message(headline=redact(exc.message), level="error", lines=lines), ok=False)
    log.exception("unexpected error", exc_info=exc)
    return Reply.of(
        Message(
            headline="Unexpected error: it has been logged with its details.",
            level="error",
            lines=[
                f"{type(exc).__name__}: {redact(str(exc))[:300]}",
                "Check `/recover history <session>` before repeating a decision: every step that was "
                "sent is recorded there.",
            ],
        ),
        ok=False,
    )


def docker_notice(settings: Settings, name: str, *, installation: bool) -> Reply | None:
    """A Docker-only command in the demo: that it needs a Docker engine, and how to give it one
    (None when an engine, and the installation it needs, are configured)."""
    engine = DockerEndpoint(settings.docker_host).configured
    if engine and (settings.compose_project or not installation):
        return None
    lines = [
        "The demo's sandbox control host has no Docker engine and no reconciler container; "
        "this command reads a real one."
    ]
    if not engine:
        lines.append(
            "Give it one: DOCKER_HOST=unix:///var/run/docker.sock recover-bot demo "
            "(or the installation's socket proxy, e.g. DOCKER_HOST=tcp://socket-proxy:2375)."
        )
    if installation and not settings.compose_project:
        lines.append("And name the installation whose reconciler to use: RECOVER_INSTALLATION=<compose project>.")
    return Reply.of(Message(headline=f"`/recover {name}` needs a Docker engine", level="error", lines=lines), ok=False)


def completions_of(runbooks: RunbookSet) -> Completions:
    """The console's Tab words from the runbook: subcommands with their flags, and the decisions."""
    commands = {name: [f"--{f.name}" for f in spec.flags] for name, spec in runbooks.commands.items()}
    takes = frozenset(
        n
        for n, spec in runbooks.commands.items()
        if any(a.choices == "decisions" or a.name == "decision" for a in spec.args)
    )
    return Completions(commands=commands, decisions=list(runbooks.decidable), takes_decision=takes)


class KeepingReporter:
    """A reporter that also keeps what it posts for ``details`` (posts go to the thread as they are)."""

    def __init__(self, inner: Reporter, full: FullMessages) -> None:
        self.inner, self.full = inner, full

    def progress(self, message: Message) -> None:
        self.inner.progress(message)

    def post(self, message: Message) -> None:
        self.full.remember(message)
        self.inner.post(message)

    def __getattr__(self, name: str) -> object:  # what else the front's reporter offers (rate limits)
        return getattr(self.inner, name)
