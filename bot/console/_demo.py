"""``recover-bot demo`` and ``recover-bot console``: the console over the embedded sandbox or a real host.

The demo is the README's first command: it needs no Slack workspace and no control host. It starts
the sandbox control host with its scenarios on 127.0.0.1, builds the real router against it, and runs
the console with two demo users, so the two-person rule can be played through (``:as bob``).
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from bot.console._console import DEMO_CONSOLE_USERS, DEMO_USERS, render, run_console
from bot.console._shell import state_dir
from bot.console.identity import terminal_login
from bot.decisions import console_actor
from bot.errors import RecoverError
from bot.logsetup import log_to_file
from bot.redact import redact
from bot.settings import Settings

_DEFAULT_DB = Path("./recover.db")
log = logging.getLogger(__name__)
PACE = 0.02  # real seconds a demo wait step takes, so a long wait is seen progressing


class DemoClock:
    """The sandbox's clock as the core's, where a wait is time passing for the sandbox too.

    Each sleep of the core (the wait for a worker to be confirmed gone, R3.9; the resume's 503
    backoff, R4.2) moves the sandbox clock and runs one sandbox scheduler pass, as the real scheduler
    runs while an operator waits: an approval given before ``:pass`` is then sent once a pass
    confirms the worker gone, never earlier and never twice.
    """

    def __init__(self, handle: Any, pace: float = PACE) -> None:
        self.handle = handle
        self.pace = pace
        self.passes = 0

    def now(self) -> datetime:
        now: datetime = self.handle.clock.now()
        return now

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        time.sleep(min(seconds, self.pace))
        self.handle.clock.sleep(seconds)
        try:
            result = self.handle.admin.scheduler_pass()
        except Exception:  # noqa: BLE001 - a pass that failed is a pass that did not happen
            log.warning("demo: the sandbox scheduler pass failed", exc_info=True)
            return
        self.passes += 1
        log.info("demo wait of %.0f s: scheduler pass confirmed gone %s, launched %s", seconds,
                 result.get("confirmed_gone") or [], result.get("launched") or [])


def _demo_settings(settings: Settings, workdir: Path) -> Settings:
    # A fresh step store per demo unless RECOVER_DB was set: old demo cases must not leak in.
    if settings.db_path == _DEFAULT_DB:
        return settings.model_copy(update={"db_path": workdir / "demo.db"})
    return settings


def run_demo(
    settings: Settings,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    users: tuple[str, ...] = DEMO_USERS,
) -> int:
    """Sandbox with its scenarios + the console against it (interactive on a TTY, else stdin)."""
    from bot.fleet_router import build_fleet_router
    from bot.sandbox import start_sandbox

    out = stdout or sys.stdout
    log_file = log_to_file(state_dir() / "demo.log", settings.log_level)
    with tempfile.TemporaryDirectory(prefix="recover-demo-") as tmp:
        handle = start_sandbox()
        try:
            try:
                router = build_fleet_router(
                    _demo_settings(settings, Path(tmp)),
                    sandboxes={"default": handle},
                    clock=DemoClock(handle),
                    startup=False,
                    console_users_map=DEMO_CONSOLE_USERS,
                )
            except RecoverError as exc:
                print(redact(str(exc)), file=sys.stderr)
                return 2
            out.write(_banner(handle, users))
            out.write(f"Log records: {log_file} (the terminal shows only warnings to act on).\n")
            for message in router.unfinished_view():
                out.write(render(message) + "\n")
            out.flush()
            return run_console(
                router, users=users, allow_switch_user=True, stdin=stdin, stdout=out, sandbox=handle
            )
        finally:
            handle.stop()


def _banner(handle: object, users: tuple[str, ...]) -> str:
    scenarios = getattr(handle, "scenarios", {}) or {}
    lines = [
        f"recover-bot demo: a sandbox control host on {getattr(handle, 'url', '127.0.0.1')} "
        f"(nothing leaves this machine). You are {users[0]}; `:as {users[-1]}` switches user.",
        "Scenario sessions:",
    ]
    for scenario in scenarios.values():
        lines.append(f"  {scenario.session_id:<28} {scenario.title}")
    lines.append("Try: /recover diagnose <session_id>    (:help lists every command)")
    lines.append(
        "The sandbox's clock moves when you wait (each wait step runs a scheduler pass) or with "
        "`:advance <seconds>`; `:pass` runs a scheduler pass now, `:release` ends a workspace reclamation, "
        "`:stop <session_id>` stops a session and lets watch mode post it here."
    )
    return "\n".join(lines) + "\n"


def run_real_console(
    settings: Settings,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    login: str | None = None,
) -> int:
    """The console against the configured control host, as the account running it (fixed).

    Nothing is sent at start: what earlier runs left unfinished is listed, and finished only on
    ``/recover replay``.
    """
    from bot.fleet_router import build_fleet_router

    out = stdout or sys.stdout
    user = login or terminal_login()
    log_file = log_to_file(state_dir() / "console.log", settings.log_level)
    router = build_fleet_router(settings, startup=False)  # one router per installation, one parser
    out.write(
        f"recover-bot console against {router.against()}. You are {user} "
        f"(recorded as {console_actor(user)}; fixed for this run).\n"
        f"Log records: {log_file} (the terminal shows only warnings to act on).\n"
    )
    for message in router.unfinished_view():
        out.write(render(message) + "\n")
    out.flush()
    return run_console(router, users=(user,), allow_switch_user=False, stdin=stdin, stdout=out)
