"""Messages as data: built once by the core, rendered by the Slack app (blocks) and the console (text).

The core never imports Slack. A :class:`Message` says what to show; a :class:`Button` says which action
a click performs and which text command does the same, so every button has a typed equivalent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

Level = Literal["info", "ok", "warn", "error", "progress"]


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
        """A readable text rendering (console, Slack's notification text, logs)."""
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
