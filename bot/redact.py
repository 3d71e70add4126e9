"""Redaction of secrets in text that may reach a log, a chat message or an error.

Logs are masked by :class:`RedactingFilter`, installed on every handler at start
(:func:`install_log_redaction`); :func:`redact` is called by hand only where text leaves the process
another way (a message to Slack, the terminal, an error shown to a person).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

_PATTERNS = [
    re.compile(r"xox[abprse]-[A-Za-z0-9-]+"),  # Slack bot/user/app tokens
    re.compile(r"xapp-[A-Za-z0-9-]+"),  # Slack app-level tokens (Socket Mode)
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"(?i)(token\s+token=)[A-Za-z0-9._~+/=-]+"),  # PagerDuty's REST API credential
    re.compile(r"(?i)(postgres(?:ql)?://[^:/@\s]*:)[^@\s]+(?=@)"),  # a database URL's password
    re.compile(r"(?i)(idempotency-key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9-]+"),
]

_known_secrets: set[str] = set()
#: The bot's own fixed sentences (no secret by construction): a short key that happens to be one of
#: their words (``CONTROL_HOST_API_KEY=wrong``) must not turn "the key is wrong" into "the key is ***".
_own_wording: set[str] = set()

MASK = "***"


def register_secret(value: str | None) -> None:
    """Remember a configured secret so that :func:`redact` masks it wherever it appears."""
    if value and len(value) >= 4:
        _known_secrets.add(value)


def register_wording(*phrases: str) -> None:
    """Declare fixed sentences of the bot's own (constants, never built from a value): :func:`redact`
    leaves each whole occurrence as it is, whatever secret shares a word with it."""
    _own_wording.update(p for p in phrases if p)


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """Mask known secrets and anything shaped like a token or bearer credential (never inside the
    bot's own fixed wording, see :func:`register_wording`)."""
    held: dict[str, str] = {}
    for n, phrase in enumerate(sorted(_own_wording, key=len, reverse=True)):
        if phrase in text:
            held[f"\x00{n}\x00"] = phrase
            text = text.replace(phrase, f"\x00{n}\x00")
    text = _masked(text, extra)
    for placeholder, phrase in held.items():
        text = text.replace(placeholder, phrase)
    return text


def _masked(text: str, extra: Iterable[str]) -> str:
    for secret in sorted({*_known_secrets, *(e for e in extra if e and len(e) >= 4)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """Masks a record before a handler writes it: the message with its arguments, the exception and
    the stack text. Why a filter on the handlers: one forgotten ``redact()`` in a log call must not
    leak a secret, and a handler's filter sees every record that reaches it, from any logger.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a call whose arguments do not fit its format: the handler reports it
            return True
        masked = redact(message)
        if masked != message or record.args:
            record.msg, record.args = masked, None  # the arguments are in the text now
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FORMATTER = logging.Formatter()


def install_log_redaction(logger: logging.Logger | None = None) -> RedactingFilter:
    """Put one :class:`RedactingFilter` on every handler of ``logger`` (the root) and of every logger."""
    root = logger or logging.getLogger()
    loggers = [root, *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger))]
    shared = RedactingFilter()
    for each in loggers:
        for handler in each.handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(shared)
    return shared
