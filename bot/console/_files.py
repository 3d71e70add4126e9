"""Where the console keeps the long texts it names (a triage's CSV, a timeline, a dry run's log).

A reply names a file only where one exists: the console writes each attachment it shows into one
folder (``$XDG_STATE_HOME/recover-bot/files`` for ``demo`` and ``console``) and names that path; with
no folder, or when the write fails, it names the command that shows the text instead.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from bot.messages import Attachment
from bot.redact import redact

log = logging.getLogger("recover_bot.console")

#: An attachment's name is the bot's own (``triage-t1.csv``), but it may carry an id from the
#: control host: only these characters reach the file system, so no name leaves the folder.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(filename: str) -> str:
    """``filename`` as one plain name inside the folder (no separator, no leading dot)."""
    name = _UNSAFE.sub("_", filename).lstrip(".")
    return name or "attachment.txt"


def save_attachment(folder: Path, attachment: Attachment) -> Path | None:
    """Write ``attachment`` to ``folder`` (replacing an earlier copy of the same name, readable by
    its owner only: logs and reasons may be sensitive); its path, or None when it cannot be written
    (the reply then names the command that shows it)."""
    path = folder / safe_name(attachment.filename)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(redact(attachment.text))
    except OSError as exc:
        log.warning("could not save %s in %s: %s", path.name, folder, exc.strerror or type(exc).__name__)
        return None
    return path
