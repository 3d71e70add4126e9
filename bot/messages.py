"""Messages as data: built once by the core, rendered by the Slack app (blocks) and the console (text).

The core never imports Slack. A :class:`Message` says what to show; a :class:`Button` says which action
a click performs and which text command does the same, so every button has a typed equivalent.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from bot.ids import split_tag
from bot.runbook.usage import typed_line
from bot.vocab import Action

Level = Literal["info", "ok", "warn", "error", "progress"]

# The core's own references to people and channels: structured values (:class:`Mention`) carried
# inside the text the core composes, so a message can still be written as one f-string. Each front
# renders them its own way (Slack: a live ``<@U…>`` / ``<#C…>``; the console and logs: ``@id``); the
# core never writes a front's syntax. Everything else in a message (logs, reasons, notes, effects,
# control-host messages) is outside text, which Slack output escapes completely; only a reference made
# by :func:`ref` in this process can become a live mention. The key is per process and never shown, so
# outside text cannot forge one; a reference read back from storage after a restart carries an old key
# and comes back as the plain outside text ``@name``.
_REF_KEY = secrets.token_hex(6)
_REF = re.compile("\u2063([0-9a-f]{12})([@#^])([^\u2063<>\\s]{1,80})\u2063")


@dataclass(frozen=True)
class Mention:
    """A person (``@``: a Slack user or group id, or a console actor), a channel (``#``) or a
    message's thread (``^``: ``channel/ts``) the core names on purpose. ``str()`` is the readable form
    (``@U1``, ``#C1``, ``thread C1/17….1``) the console, logs and the audit chain show; Slack renders
    it as a live mention, or a thread as its permalink."""

    kind: Literal["@", "#", "^"]
    identity: str

    def __str__(self) -> str:
        return f"thread {self.identity}" if self.kind == "^" else self.kind + self.identity


def ref(identity: str, kind: Literal["@", "#"] = "@") -> str:
    """A :class:`Mention` of a person (``@``) or a channel (``#``), to write into the core's text."""
    return f"\u2063{_REF_KEY}{kind}{identity}\u2063"


def thread_ref(channel: str, ts: str) -> str:
    """A reference to the thread of the message ``ts`` in ``channel`` (Slack links it: a permalink)."""
    return f"\u2063{_REF_KEY}^{channel}/{ts}\u2063"


def thread_refs(message: Message) -> list[tuple[str, str]]:
    """The (channel, ts) of every thread this process referred to in ``message``'s text."""
    found: list[tuple[str, str]] = []
    for text in (message.headline, *message.lines):
        for p in pieces(text):
            if isinstance(p, Mention) and p.kind == "^":
                channel, _, ts = p.identity.partition("/")
                if ts and (channel, ts) not in found:
                    found.append((channel, ts))
    return found


def pieces(text: str) -> list[str | Mention]:
    """``text`` as outside-text pieces and the :class:`Mention` values this process wrote into it.

    A reference not made by this process (another process's key) comes back as outside text
    ``@name``: it never becomes a mention.
    """
    out: list[str | Mention] = []
    pos = 0
    for m in _REF.finditer(text):
        out.append(text[pos : m.start()])
        kind: Literal["@", "#", "^"] = "#" if m.group(2) == "#" else "^" if m.group(2) == "^" else "@"
        out.append(Mention(kind, m.group(3)) if m.group(1) == _REF_KEY else kind + m.group(3))
        pos = m.end()
    out.append(text[pos:])
    return [p for p in out if p != ""]


def render_refs(text: str, render: Callable[[Mention], str], outside: Callable[[str], str] = str) -> str:
    """``text`` with every :class:`Mention` as ``render`` writes it and every other piece through
    ``outside`` (Slack escapes it; the console keeps it as it is)."""
    if "\u2063" not in text:
        return outside(text)
    return "".join(render(p) if isinstance(p, Mention) else outside(p) for p in pieces(text))


def plain(text: str) -> str:
    """The readable form (``@U1``, ``#C1``): what the console, logs and the audit chain show."""
    return render_refs(text, str)


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
    #: What a click does that cannot be undone (R5.4), asked before the click acts: Slack shows it in
    #: Block Kit's ``confirm`` dialog. None for a click that can be taken back or only opens a form.
    confirm: str | None = None


def irreversible_click(what: str, decision: str, subject: str) -> str:
    """What a click on an irreversible decision's button does (R5.4), for the dialog asked before it."""
    return f"{what} sends {decision} for {subject} to the control host now. Once it is accepted it cannot be undone."


def approval_buttons(target: str, decision: str, subject: str, *, irreversible: bool) -> list[Button]:
    """Approve / Reject of a two-person request or batch, with their typed lines. An irreversible
    decision's Approve asks first (Slack: the confirm dialog) and is not styled as the safe choice;
    Reject is never styled as the dangerous one: it sends nothing."""
    return [
        Button(
            "Approve",
            Action.APPROVE,
            target,
            command=typed_line("approve", target),
            style=None if irreversible else "primary",
            confirm=irreversible_click("Approving", decision, subject) if irreversible else None,
        ),
        Button("Reject", Action.REJECT, target, command=typed_line("reject", target)),
    ]


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
    #: A fleet's installation this message is about (None: the bot serves one): the same session id
    #: exists in every installation, so a front keys a case's thread by both.
    installation: str | None = None
    #: Said at most once per ``kind`` and ``ref`` (a request's first showing, its result), whoever
    #: offers it: the reply that made it, or a look at what a dead process recorded and never said. A
    #: front claims the saying before it posts and drops the message when it was said (never updates).
    said_once: bool = False

    def plain_text(self) -> str:
        """A readable text rendering, mentions as ``@id`` (console, logs); Slack renders
        :meth:`marked_text` itself."""
        return plain(self.marked_text())

    def marked_text(self) -> str:
        """Like :meth:`plain_text`, with the core's references left as :func:`ref` made them."""
        icon = {"info": "", "ok": "[ok] ", "warn": "[!] ", "error": "[error] ", "progress": "[..] "}[self.level]
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


# -- messages by weight ------------------------------------------------------------------------------
# A reply leads with one line and a few facts; the full fact list is one click (Slack) or one command
# (``/recover details <id>``) away, never repeated on every reply. Both fronts render :func:`brief`.

DETAILS_KIND = "details"
#: At most this many lines of body for the heavy kinds (the headline and buttons come on top).
LINE_BUDGET: dict[str, int] = {
    "diagnosis": 16,
    "approval_request": 6,
    "confirmation_request": 6,
    "recheck_request": 7,
    "batch_request": 6,
}


def details_button(target: str) -> Button:
    """The button (and typed line) that shows everything behind ``target``."""
    return Button("Details", Action.RUN, f"details {target}", command=f"/recover details {target}")


def details_target(message: Message) -> str | None:
    """What ``details`` is asked about for this message: its request/batch, else its session."""
    return message.ref or message.session_id


def body_lines(message: Message) -> list[str]:
    """The message's lines as shown, one text line each (a line may carry newlines)."""
    return [piece for line in message.lines for piece in line.split("\n")]


# When a body is cut, these lines are kept first, in this order: who asked and why, what the turn
# did outside, how to approve, what is irreversible; a diagnosis's valid decisions, refusals and next
# steps (a block's head brings its indented lines).
_KEEP_FIRST = (
    "Requested by",
    "Reason",
    "External effects",
    "/recover approve",
    "To approve",
    "To confirm",
    "[!] Irreversible",
    "Valid now",
    "Not valid now",
    "Next",
    "[!]",
    "Turn:",
)


def _rank(line: str) -> int | None:
    return next((n for n, prefix in enumerate(_KEEP_FIRST) if line.startswith(prefix)), None)


def _keep(flat: list[str], room: int) -> list[str]:
    """At most ``room`` of ``flat``, in their order: the first line, the lines to act on, the rest."""
    ranked: dict[int, int] = {0: -1}
    block: int | None = None
    for i, line in enumerate(flat):
        rank = _rank(line)
        if rank is not None:
            ranked.setdefault(i, rank)
            block = rank if line.rstrip().endswith(":") else None
        elif block is not None and line.startswith("  "):
            ranked.setdefault(i, block)
        else:
            block = None
    chosen = sorted(ranked, key=lambda i: (ranked[i], i))[:room]
    chosen += [i for i in range(len(flat)) if i not in ranked][: max(0, room - len(chosen))]
    return [flat[i] for i in sorted(chosen)]


#: Marks a line as a post's find key: what a watcher or the ladder taking over a dead owner's claim
#: looks for in the channel to tell whether the post was made. A machine's id, never shown to a
#: reader: :func:`brief` drops it, and Slack carries it in the notification text only (find_keys).
_FIND_KEY = "\u2064"


def find_key_line(key: str) -> str:
    """A line that finds its post again (``ladder step req_…#0``, ``Watch key …``), hidden from readers."""
    return _FIND_KEY + key


def find_keys(message: Message) -> list[str]:
    """The message's find-key lines (for a front that must keep them findable but unseen)."""
    return [line for line in message.lines if line.startswith(_FIND_KEY)]


def brief(message: Message) -> Message:
    """``message`` as a reply shows it: no fact list and, for the heavy kinds, a bounded body; a
    Details button stands for what was left out. A message with nothing to point at is shown whole.
    Find keys (:func:`find_key_line`) are never shown."""
    if find_keys(message):
        message = dataclasses.replace(message, lines=[line for line in message.lines if not line.startswith(_FIND_KEY)])
    target = details_target(message)
    if message.kind == DETAILS_KIND or target is None:
        return message
    cap = LINE_BUDGET.get(message.kind)
    lines, cut = message.lines, bool(message.facts) or message.attachment is not None
    if cap is not None:
        flat = body_lines(message)
        if len(flat) > cap:  # the Details button (a numbered choice in the console) says where the rest is
            lines, cut = _keep(flat, cap), True
    if not cut:
        return message
    buttons = list(message.buttons)
    # A fleet's button carries its installation after an ``@`` (no id holds one): still this one.
    if not any(split_tag(b.value)[0] == f"details {target}" for b in buttons):
        buttons.append(details_button(target))
    return dataclasses.replace(message, lines=lines, facts=[], buttons=buttons)


def in_full(message: Message) -> Message:
    """Everything of ``message`` as one details message: its facts become lines, nothing is cut."""
    lines = [*message.lines, *(f"  {k}: {v}" for k, v in message.facts)]
    return dataclasses.replace(
        message,
        headline=f"Details of {message.headline}",
        lines=lines,
        facts=[],
        kind=DETAILS_KIND,
        buttons=[],
        mentions=[],
    )
