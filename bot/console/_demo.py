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
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from bot.app.compose import Composed, FrontPorts, compose
from bot.clock import Clock
from bot.console._console import DEMO_CONSOLE_USERS, DEMO_USERS, render, run_console
from bot.console._shell import state_dir
from bot.console.identity import terminal_login
from bot.console.ladder import shortened_line
from bot.console.ports import ConsoleSays, DemoParts, demo_ports
from bot.decisions import CONSOLE_CHANNEL, console_actor
from bot.errors import RecoverError
from bot.ids import DEFAULT_INSTALLATION
from bot.logsetup import log_to_file
from bot.redact import redact
from bot.sandbox import SandboxHandle
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
        # One sandbox, or several installations' (a SandboxSet: one clock, a pass on each).
        self.handle = handle
        self.hosts: list[Any] = list(handle.values()) if isinstance(handle, Mapping) else [handle]
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
        for host in self.hosts:
            try:
                result = host.admin.scheduler_pass()
            except Exception:  # noqa: BLE001 - a pass that failed is a pass that did not happen
                log.warning("demo: the sandbox scheduler pass failed", exc_info=True)
                return
            log.info(
                "demo wait of %.0f s: scheduler pass on %s confirmed gone %s, launched %s",
                seconds,
                host.url,
                result.get("confirmed_gone") or [],
                result.get("launched") or [],
            )
        self.passes += 1


def _demo_settings(settings: Settings, workdir: Path) -> Settings:
    # A fresh step store per demo unless RECOVER_DB was set: old demo cases must not leak in.
    if settings.db_path == _DEFAULT_DB:
        return settings.model_copy(update={"db_path": workdir / "demo.db"})
    return settings


def compose_demo(
    settings: Settings,
    sandbox: SandboxHandle,
    *,
    clock: Clock | None = None,
    console_users_map: dict[str, str] | None = None,
    startup: bool = False,
) -> tuple[Composed, DemoParts]:
    """The demo's core over one sandbox, composed with the console's ports (watch and the ladder speak
    in the console, the ladder at shortened times), and the parts the console drives. What was already
    stuck when the demo began is known, not new: the first ``:stop`` posts that one session."""
    says = ConsoleSays()
    composed = compose(
        settings,
        ports=demo_ports(says),
        sandboxes={DEFAULT_INSTALLATION: sandbox},
        clock=clock,
        console_users_map=DEMO_CONSOLE_USERS if console_users_map is None else console_users_map,
        startup=startup,
    )
    watcher = composed.watchers.get(DEFAULT_INSTALLATION)
    if watcher is not None:
        watcher.note_known()
    ladder = composed.ladders.get(DEFAULT_INSTALLATION)
    spec = composed.core().runbooks.escalation
    line = shortened_line(spec) if ladder is not None and spec is not None else None
    return composed, DemoParts(says=says, watcher=watcher, ladder=ladder, ladder_line=line)


def run_demo(
    settings: Settings,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    users: tuple[str, ...] = DEMO_USERS,
    installations: tuple[str, ...] = (),
    incident: int | None = None,
) -> int:
    """Sandbox with its scenarios + the console against it (interactive on a TTY, else stdin).

    ``installations`` (``demo --installations eu-1,us-1``): a sandbox control host per name, the same
    session ids on each, and the bot given their installations file, as ``serve`` would be.
    ``incident`` (``demo --incident N``): the console starts with ``:incident N``."""
    out = stdout or sys.stdout
    log_file = log_to_file(state_dir() / "demo.log", settings.log_level)
    if installations:
        return _run_several(settings, installations, users=users, stdin=stdin, out=out)
    from bot.sandbox import start_sandbox

    with tempfile.TemporaryDirectory(prefix="recover-demo-") as tmp:
        handle = start_sandbox()
        try:
            try:
                composed, demo = compose_demo(_demo_settings(settings, Path(tmp)), handle, clock=DemoClock(handle))
            except RecoverError as exc:
                print(redact(str(exc)), file=sys.stderr)
                return 2
            out.write(_banner(handle, users))
            out.write(f"Log records: {log_file} (the terminal shows only warnings to act on).\n")
            for message in composed.router.unfinished_view():
                out.write(render(message) + "\n")
            out.flush()
            return run_console(
                composed.router,
                users=users,
                allow_switch_user=True,
                stdin=stdin,
                stdout=out,
                sandbox=handle,
                files=state_dir() / "files",
                incident=incident,
                demo=demo,
            )
        finally:
            handle.stop()


def _run_several(
    settings: Settings, names: tuple[str, ...], *, users: tuple[str, ...], stdin: TextIO | None, out: TextIO
) -> int:
    """The demo over several installations: their file (keys beside it, in the demo's folder) is the
    bot's RECOVER_INSTALLATIONS_FILE, so the bot reaches each sandbox exactly as it reaches real hosts."""
    from bot.installations.render import write_installations
    from bot.sandbox import start_installations

    with tempfile.TemporaryDirectory(prefix="recover-demo-") as tmp, start_installations(names) as hosts:
        path = Path(tmp) / "installations.yaml"
        # Each installation lists the console's channel: an installation bound to no channel takes no
        # decision anywhere (bot/channels.py), and the demo is for deciding; the console names the
        # installation with --install.
        write_installations(
            path,
            {n: h.url for n, h in hosts.items()},
            {n: h.api_key for n, h in hosts.items()},
            channels=(CONSOLE_CHANNEL,),
        )
        several = _demo_settings(settings, Path(tmp)).model_copy(update={"installations_file": path})
        try:
            # No watch or ladder voices: each speaks for one installation, and the console is all of them.
            router = compose(
                several, ports=FrontPorts(), clock=DemoClock(hosts), startup=False, console_users_map=DEMO_CONSOLE_USERS
            ).router
        except RecoverError as exc:
            print(redact(str(exc)), file=sys.stderr)
            return 2
        where = ", ".join(f"{name} on {h.url}" for name, h in hosts.items())
        out.write(
            _banner(next(iter(hosts.values())), users, f"sandbox control hosts {where}, the same session ids on each")
        )
        out.flush()
        # No sandbox handle for :pass, :advance, :release and :stop: each acts on one control host, and
        # which one is the installation a command resolves to, never a first one by default.
        return run_console(
            router, users=users, allow_switch_user=True, stdin=stdin, stdout=out, files=state_dir() / "files"
        )


def _banner(handle: object, users: tuple[str, ...], where: str | None = None) -> str:
    scenarios = getattr(handle, "scenarios", {}) or {}
    where = where or f"a sandbox control host on {getattr(handle, 'url', '127.0.0.1')}"
    lines = [
        f"recover-bot demo: {where} "
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


def store_line(settings: Settings) -> str:
    """Where the console keeps its audit trail, said at start: without RECOVER_DB that is a file in the
    folder it was started from, which a person must know before starting it from another one."""
    path = settings.db_path.resolve()
    if settings.installations_file is not None:  # each installation's store beside it (store_path)
        where, state = path.with_name(f"{path.stem}-<installation>{path.suffix}"), "one per installation"
    else:
        where, state = path, "existing" if path.exists() else "new"
    if settings.db_path == _DEFAULT_DB:
        return (
            f"Store: {where} ({state}); RECOVER_DB is unset, so it is in the current folder (set it to keep one store)."
        )
    return f"Store: {where} ({state}, from RECOVER_DB)."


def run_real_console(
    settings: Settings,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    login: str | None = None,
    install: str | None = None,
) -> int:
    """The console against the configured control host, as the account running it (fixed);
    ``install``: with several installations, the one commands act on when they name none.

    Nothing is sent at start: what earlier runs left unfinished is listed, and finished only on
    ``/recover replay``.
    """
    out = stdout or sys.stdout
    user = login or terminal_login()
    log_file = log_to_file(state_dir() / "console.log", settings.log_level)
    store = store_line(settings)  # before the router is built: building it creates the file
    # One router per installation, one parser; the console hands in no ports (nothing posts for it).
    router = compose(settings, ports=FrontPorts(), startup=False, default=install).router
    out.write(
        f"recover-bot console against {router.against()}. You are {user} "
        f"(recorded as {console_actor(user)}; fixed for this run).\n"
        f"{store}\n"
        f"Log records: {log_file} (the terminal shows only warnings to act on).\n"
    )
    for message in router.unfinished_view():
        out.write(render(message) + "\n")
    out.flush()
    return run_console(
        router, users=(user,), allow_switch_user=False, stdin=stdin, stdout=out, files=state_dir() / "files"
    )
