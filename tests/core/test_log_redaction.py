"""Secrets never reach a log: one filter on every handler masks each record (bot.redact.RedactingFilter).

The logging is set up in a fresh interpreter exactly as the CLI and the serve worker do it at start
(settings read, then :func:`bot.logsetup.configure_logging`); then every configured secret and every
token shape is logged through each of the bot's loggers and the libraries' by each path a record can
carry text: arguments, an f-string, a mapping, an exception object as the message, an exception's
traceback (with a chained cause), ``stack_info``. None of it may appear in what was written.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bot

BOT = Path(bot.__file__).resolve().parent

SECRETS = {
    "SLACK_BOT_TOKEN": "xoxb-1111-2222-botsecretvalue",
    "SLACK_SIGNING_SECRET": "5f0c9a7e3b1d2c4e6a8b0d1f3e5c7a9b",
    "SLACK_APP_TOKEN": "xapp-1-A111-3333-appsecretvalue",
    "CONTROL_HOST_API_KEY": "chk-live-7d3e9b1a5c",
    "RECOVER_AUDIT_KEY": "audit-key-4b8e2f6a",
    "RECOVER_ONCALL_PAGERDUTY_TOKEN": "u+Zk3xQ9wVb7-pdkey",
}
# Shaped like a credential although nobody configured it.
SHAPES = ["xoxp-9999-userTokenValue", "Bearer eyJhbGciOi.payload.sig", "Token token=pdUnconfiguredKey42"]


def _logger_names() -> list[str]:
    """Every logger the bot names (``getLogger("...")`` or a module's ``__name__``) and the libraries'."""
    names = {"", "slack_bolt", "slack_sdk", "httpx", "httpcore", "websockets"}
    for path in BOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getLogger" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.add(arg.value)
                elif isinstance(arg, ast.Name) and arg.id == "__name__":
                    names.add(".".join(("bot", *path.relative_to(BOT).with_suffix("").parts)))
    return sorted(names)


SCRIPT = r"""
import logging, sys
from pathlib import Path
from bot.logsetup import configure_logging
from bot.settings import load_settings

load_settings(dotenv=None)  # as at start: the configured secrets are known
configure_logging("DEBUG")
secrets = sys.argv[2:]
for name in sys.argv[1].split(","):
    log = logging.getLogger(name)
    for s in secrets:
        log.warning("args [%s] on %s", s, name)
        log.warning(f"inline [{s}] on {name}")
        log.warning("mapping [%(s)s] on %(n)s", {"s": s, "n": name})
        log.warning(RuntimeError(f"object [{s}]"))
        log.warning("stack [%s] on %s", s, name, stack_info=True)
        try:
            try:
                raise KeyError(f"cause [{s}]")
            except KeyError as cause:
                raise RuntimeError(f"boom [{s}]") from cause
        except RuntimeError:
            log.exception("traceback on %s", name)
        log.error("explicit exc_info on %s", name, exc_info=RuntimeError(f"given [{s}]"))
"""


@pytest.mark.subprocess
def test_no_secret_or_token_shape_reaches_a_log_through_any_logger_or_path(tmp_path: Path) -> None:
    names = _logger_names()
    assert "recover_bot.slack.front" in names and "bot.controlhost" in names
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "RECOVER_", "CONTROL_HOST"))}
    env.update(SECRETS)
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(names), *SECRETS.values(), *SHAPES],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=True,
    )
    written = result.stderr
    leaked = [s for s in [*SECRETS.values(), *SHAPES] if s in written]
    assert not leaked, leaked
    # Everything was written (the test sees the records, masked), tracebacks included.
    per_logger = 5 + 2 + 1  # five messages; the traceback's two exceptions; the exception given
    assert written.count("***") >= len(names) * (len(SECRETS) + len(SHAPES)) * per_logger
    assert written.count("Traceback (most recent call last)") >= 2 * len(names) * (len(SECRETS) + len(SHAPES))
    assert "The above exception was the direct cause" in written and "Stack (most recent call last)" in written
    assert re.search(r"args \[\*\*\*\] on recover_bot\.slack\.front", written)


START = {
    # The CLI as a user starts it: main() reads the settings, sets up logging, runs the command.
    "cli": "from bot.cli import main\nmain(['runbook', 'check'])\n",
    # The serve worker as the supervisor starts it: its settings line on stdin, then end of input.
    "worker": (
        "import io\n"
        "from bot.settings import load_settings\n"
        "from bot.slack.supervisor import settings_line\n"
        "from bot.slack import worker\n"
        "line = settings_line(load_settings(dotenv=None), 'w-probe').decode()\n"
        "worker.main(io.StringIO(line))\n"
    ),
}

PROBE = r"""
import logging, sys
from bot.redact import RedactingFilter
handlers = logging.getLogger().handlers
filtered = sum(any(isinstance(f, RedactingFilter) for f in h.filters) for h in handlers)
print("handlers", len(handlers), "filtered", filtered, file=sys.stderr)
for s in sys.argv[1:]:
    logging.getLogger("recover_bot.probe").warning("after start [%s]", s)
    logging.getLogger("httpx").warning(f"library [{s}]")
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("entry", sorted(START))
def test_each_entry_point_sets_up_the_masking_filter_when_it_starts(entry: str, tmp_path: Path) -> None:
    """Behaviour, not source text: the real entry point runs its start in a fresh interpreter, then
    records carrying every secret go through its handlers. Each handler masks; nothing leaks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "RECOVER_", "CONTROL_HOST"))}
    env.update(
        SECRETS,
        RECOVER_DB=str(tmp_path / "recover.db"),
        CONTROL_HOST_URL="http://127.0.0.1:9",
        SLACK_API_URL="http://127.0.0.1:9/api/",
    )
    secrets = [*SECRETS.values(), *SHAPES]
    result = subprocess.run(
        [sys.executable, "-c", START[entry] + PROBE, *secrets],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    written = result.stderr
    counts = re.search(r"handlers (\d+) filtered (\d+)", written)
    assert counts, written[-2000:]
    assert int(counts.group(1)) >= 1 and counts.group(1) == counts.group(2), written[-2000:]
    assert not [s for s in secrets if s in written]
    # Every record was written, masked (a token's shape keeps its scheme word: "Bearer ***").
    assert len(re.findall(r"after start \[[^\]]*\*\*\*\]", written)) == len(secrets)
    assert len(re.findall(r"library \[[^\]]*\*\*\*\]", written)) == len(secrets)


def test_the_consoles_log_file_is_masked_too(tmp_path: Path) -> None:
    """The console sends its records to a file: that handler is made by logsetup, so it masks as well."""
    import logging as _logging

    from bot.logsetup import log_to_file
    from bot.redact import RedactingFilter

    root = _logging.getLogger()
    before = list(root.handlers), root.level
    try:
        log_to_file(tmp_path / "console.log")
        assert root.handlers and all(any(isinstance(f, RedactingFilter) for f in h.filters) for h in root.handlers)
    finally:
        for handler in list(root.handlers):
            if handler not in before[0]:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(before[1])
