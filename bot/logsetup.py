"""Logging for every process the bot runs (the CLI's commands and the serve worker): one format, and
every handler masking secrets (:class:`bot.redact.RedactingFilter`) before anything is written."""

from __future__ import annotations

import logging
from pathlib import Path

from bot.redact import install_log_redaction

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str | int) -> None:
    """Called once at start, before the first record: the root handler, its level, the masking."""
    logging.basicConfig(level=level, format=FORMAT)
    # httpx logs every request at INFO: noise in a console, and URLs are all it would add.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    install_log_redaction()


def log_to_file(path: Path, level: str | int = logging.INFO) -> Path:
    """The console's logging: every record to ``path``, the terminal (stderr) only warnings and errors
    the person must act on; both handlers masked like every other."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setFormatter(logging.Formatter(FORMAT))
    to_file.setLevel(level)
    terminal = logging.StreamHandler()
    terminal.setLevel(logging.WARNING)
    terminal.setFormatter(logging.Formatter("[log %(levelname)s] %(message)s"))
    root.addHandler(to_file)
    root.addHandler(terminal)
    root.setLevel(min(logging.getLevelName(level) if isinstance(level, str) else level, logging.WARNING))
    install_log_redaction()
    return path
