"""Text from outside (chat, forms, buttons) made safe to hash, store and show, once, at the router's entry.

Why: a lone surrogate (``"\\ud800"``, which Slack's JSON can carry) cannot be encoded as UTF-8, so
hashing a request or writing it to SQLite raised; NUL truncates text in C libraries; other control
characters and bidirectional overrides make a stored reason read differently from what was typed.
The rules, applied in this order:

- lone surrogates → U+FFFD (the replacement character: visible, never silently dropped);
- NUL and the other C0/C1 control characters are removed, except tab and newline (``\\r\\n`` → ``\\n``);
- bidirectional embedding/override/isolate characters are removed;
- the result is in Unicode NFC, so the same words always hash the same.
"""

from __future__ import annotations

import re
import unicodedata

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str) -> str:
    """``text`` with the rules above applied (idempotent)."""
    if text.isascii() and text.isprintable():
        return text
    text = _SURROGATE.sub("\ufffd", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROLS.sub("", text)
    return unicodedata.normalize("NFC", text)


def clean_optional(text: str | None) -> str | None:
    return None if text is None else clean_text(text)
