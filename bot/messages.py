"""Messages as data: built once by the core, rendered by the Slack app (blocks) and the console (text).

The core never imports Slack. A :class:`Message` says what to show; a :class:`Button` says which action
a click performs and which text command does the same, so every button has a typed equivalent.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

Level = Literal["info", "ok", "warn", "error", "progress"]

# The core's own references to people and channels. Everything else in a message (logs, reasons,
# notes, effects, control-host messages) is outside text, which Slack output escapes completely; only a
# reference made by :func:`ref` in this process can become a live mention. The key is per process
# and never shown, so outside text cannot forge one; a reference read back from storage after a
# restart carries an old key and is shown as plain ``@name``.
_REF_KEY = secrets.token_hex(6)
_REF = re.compile("\u2063([0-9a-f]{12})([@#])([^\u2063<>\\s]{1,80})\u2063")


def ref(identity: str, kind: Literal["@", "#"] = "@") -> str:
    """A reference to a person (``@``) or a channel (``#``) the core names on purpose."""
    return f"\u2063{_REF_KEY}{kind}{identity}\u2063"


def render_refs(text: str, render: Callable[[str, str, bool], str]) -> str:
    """Replace every :func:`ref` in ``text`` with ``render(kind, identity, made_by_this_process)``."""
    if "\u2063" not in text:
        return text
    return _REF.sub(lambda m: render(m.group(2), m.group(3), m.group(1) == _REF_KEY), text)


def split_refs(text: str) -> list[tuple[str, str | None, str | None]]:
    """``text`` as pieces ``(outside_text, kind, identity)``; kind/identity None for plain pieces and
    for references not made by this process (those come back as outside text ``@name``)."""
    out: list[tuple[str, str | None, str | None]] = []
    pos = 0
    for m in _REF.finditer(text):
        out.append((text[pos : m.start()], None, None))
        if m.group(1) == _REF_KEY:
            out.append(("", m.group(2), m.group(3)))
        else:
            out.append((m.group(2) + m.group(3), None, None))
        pos = m.end()
    out.append((text[pos:], None, None))
    return out


def plain(text: str) -> str:
    """References as Slack writes them (``<@U1>``, ``<#C1>``): the console and logs read these."""
    return render_refs(text, lambda kind, ident, _ours: f"<{kind}{ident}>")


@dataclass(frozen=True)
class Button:
    """A clickable choice. ``action`` names the handler, ``value`` its opaque argument.

    ``command`` is the equivalent text (``/recover approve req_…``): the console shows buttons as
    numbered choices that run it, and Slack messages print it for people who prefer typing.
    """

    label: str
    action: str
    value: str
    command: str | None = None
    style: Literal["primary", "danger"] | None = None


@dataclass(frozen=True)
class Attachment:
    """Long output (a dry-run log, a timeline): uploaded as a file, or shown truncated."""

    filename: str
    text: str


@dataclass
class Message:
    """One message for a person.

    ``kind`` lets front ends find a message to update in place (e.g. an approval request, keyed by
    ``ref``); ``session_id`` ties it to the case's thread.
    """

    headline: str
    level: Level = "info"
    lines: list[str] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    buttons: list[Button] = field(default_factory=list)
    attachment: Attachment | None = None
    session_id: str | None = None
    kind: str = "text"
    ref: str | None = None
    mentions: list[str] = field(default_factory=list)

    def plain_text(self) -> str:
        """A readable text rendering (console, logs); Slack renders :meth:`marked_text` itself."""
        return plain(self.marked_text())

    def marked_text(self) -> str:
        """Like :meth:`plain_text`, with the core's references left as :func:`ref` made them."""
        icon = {"info": "", "ok": "[ok] ", "warn": "[!] ", "error": "[error] ", "progress": "[..] "}[
            self.level
        ]
        out = [f"{icon}{self.headline}"]
        out.extend(self.lines)
        out.extend(f"  {k}: {v}" for k, v in self.facts)
        if self.rules:
            out.append("Runbook: " + ", ".join(self.rules))
        if self.attachment is not None:
            out.append(f"(full text: {self.attachment.filename}, {len(self.attachment.text)} chars)")
        return "\n".join(out)


@dataclass
class Reply:
    """What a command produced: its messages, and whether it succeeded (console exit status).

    ``deferred``: work the command started that reports later through the command's reporter (e.g.
    diagnose's follow-up once the whole worker log is read). A front end runs each callable after it
    delivered ``messages``, so what they post comes after the answer: the console before its next
    prompt, Slack on a background pool.
    """

    messages: list[Message] = field(default_factory=list)
    ok: bool = True
    deferred: list[Callable[[], object]] = field(default_factory=list)

    @classmethod
    def of(cls, *messages: Message, ok: bool = True) -> Reply:
        return cls(list(messages), ok)


class Reporter(Protocol):
    """Where slow work reports while it runs (waits, resume, dry runs).

    ``progress`` replaces the one progress message of this piece of work (Slack: chat.update);
    ``post`` adds a new message to the case's thread.
    """

    def progress(self, message: Message) -> None: ...

    def post(self, message: Message) -> None: ...


class NullReporter:
    """A reporter that drops everything (tests that only look at the final reply)."""

    def progress(self, message: Message) -> None:
        return None

    def post(self, message: Message) -> None:
        return None


class ListReporter:
    """A reporter that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.progressed: list[Message] = []
        self.posted: list[Message] = []

    def progress(self, message: Message) -> None:
        self.progressed.append(message)

    def post(self, message: Message) -> None:
        self.posted.append(message)
