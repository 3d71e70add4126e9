"""Logging for every process the bot runs (the CLI's commands and the serve worker): one format, and
every handler masking secrets (:class:`bot.redact.RedactingFilter`) before anything is written."""

from __future__ import annotations

import logging

from bot.redact import install_log_redaction

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str | int) -> None:
    """Called once at start, before the first record: the root handler, its level, the masking."""
    logging.basicConfig(level=level, format=FORMAT)
    # httpx logs every request at INFO: noise in a console, and URLs are all it would add.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    install_log_redaction()
