"""What a ``RECOVER_DB`` value is: a SQLite file path, a ``postgresql://`` URL, or a refused URL.

One owner for the reading, shared by the settings (which refuse a wrong value in one line) and the
store (which picks its engine, bot/store/_engine.py); and the one place that masks a URL's password
for a message (logs are masked by bot/redact.py's filter too).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# A value that looks like a URL (``scheme://…``); a Windows drive (``C:\``) or a plain path does not.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
PG_SCHEMES = ("postgresql", "postgres")


def looks_like_url(value: str) -> bool:
    return bool(_URL.match(value.strip()))


def is_pg_url(value: str) -> bool:
    text = value.strip()
    return looks_like_url(text) and text.split("://", 1)[0].lower() in PG_SCHEMES


def refused_url(value: str, name: str = "RECOVER_DB") -> str:
    """The one line that refuses a URL of another scheme (the value itself is never echoed: it may
    carry a password)."""
    scheme = value.strip().split("://", 1)[0]
    return (
        f"{name}: a {scheme}:// URL is not a store recover-bot can use; give a SQLite file path "
        "(e.g. /data/recover.db) or a postgresql:// URL (pip install 'recover-bot[postgres]')"
    )


def redacted(url: str) -> str:
    """The URL with its password masked: what a message or a log line may show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username or ''}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
