"""Redaction of secrets in text that may reach a log, a chat message or an error."""

from __future__ import annotations

import re
from collections.abc import Iterable

_PATTERNS = [
    re.compile(r"xox[abprse]-[A-Za-z0-9-]+"),  # Slack bot/user/app tokens
    re.compile(r"xapp-[A-Za-z0-9-]+"),  # Slack app-level tokens (Socket Mode)
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"(?i)(idempotency-key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9-]+"),
]

_known_secrets: set[str] = set()

MASK = "***"


def register_secret(value: str | None) -> None:
    """Remember a configured secret so that :func:`redact` masks it wherever it appears."""
    if value and len(value) >= 4:
        _known_secrets.add(value)


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """Mask known secrets and anything shaped like a token or bearer credential."""
    for secret in sorted({*_known_secrets, *(e for e in extra if e and len(e) >= 4)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text
