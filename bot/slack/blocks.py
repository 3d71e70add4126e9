"""Pure functions: :class:`bot.messages.Message` → Slack Block Kit (``slack_sdk.models``).

``slack_sdk.models`` validates field lengths only when ``to_dict()`` is called and does not check the
50-block limit or the uniqueness of ``block_id`` / ``action_id``. The builders here truncate and split
so that every message they produce is valid by construction, and :func:`check_blocks` verifies what
the library does not (tests run it on arbitrary messages).

Layout, chosen to read well on a phone: a header (the headline, plain text: no markup), mentions and
the level in words, the lines, the decisive facts as two-column fields, the runbook rules as a context
line, the buttons, and the typed command of every button (``/recover approve req_…``) not already in
the lines, so people who prefer typing can copy it and no command shows twice. A button whose click
cannot be undone (R5.4) carries Block Kit's ``confirm`` dialog. Times in mrkdwn text are Slack date
tokens: each reader sees their own zone, with the UTC time as the fallback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.buttons import BadButtonValue
from bot.messages import Attachment, Button, Mention, Message, brief, find_keys, render_refs
from bot.runbook.usage import FormField, form_errors

# Slack's documented limits (Block Kit reference).
MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
HEADER_TEXT = 150
SECTION_TEXT = 3000
FIELD_TEXT = 2000
MAX_FIELDS = 10
CONTEXT_ELEMENTS = 10
ACTIONS_ELEMENTS = 25
BUTTON_TEXT = 75
BUTTON_VALUE = 2000
ID_LENGTH = 255
# Slack truncates a message's top-level text after 40k characters; notifications show far less.
NOTIFICATION_TEXT = 3000
PREVIEW_CHARS = 2500
MODAL_TITLE = 24
PRIVATE_METADATA = 3000
CONFIRM_TITLE = 100
CONFIRM_TEXT = 300
CONFIRM_BUTTON = 30

ACTION_PREFIX = "rb"
DECIDE_CALLBACK = "recover_decide"

_ICONS = {
    "info": ":large_blue_circle:",
    "ok": ":white_check_mark:",
    "warn": ":warning:",
    "error": ":x:",
    "progress": ":hourglass_flowing_sand:",
}
# The level in words beside its icon: the raw vocabulary word ("warn") means nothing to a reader.
_LEVEL_WORDS = {"warn": "Needs attention", "error": "Failed or refused", "ok": "Done", "progress": "In progress"}


class BlockError(ValueError):
    """A block list Slack would refuse (``problems`` lists why)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(marker))] + marker


_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{2,}")
_PERMALINK = re.compile(r"https://[^\s<>|&]+")


def _escape_plain(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape(text: str) -> str:
    """Text for mrkdwn: every ``&``, ``<`` and ``>`` of outside text (logs, reasons, notes, effects,
    control-host messages) escaped, so ``<!channel>`` or ``<@U…>`` in a log line stays text. Only the
    core's own :class:`bot.messages.Mention` values (made by ``ref``, unforgeable) become mentions.

    Escaping is enough because no message is ever sent with ``link_names`` or ``parse=full`` (see
    :func:`message_payload`): Slack then reads only the ``<…>`` forms as mentions.
    """
    return render_refs(text, render_mention, _escape_plain)


#: The permalinks of the threads the message being rendered refers to (``channel/ts`` → URL), looked
#: up with chat.getPermalink by :class:`bot.slack.web.SlackOut` just before it renders the message.
_PERMALINKS: ContextVar[Mapping[str, str] | None] = ContextVar("permalinks", default=None)


@contextmanager
def permalinks(links: Mapping[str, str]) -> Iterator[None]:
    """Render thread references as these links while the block lasts."""
    token = _PERMALINKS.set(links)
    try:
        yield
    finally:
        _PERMALINKS.reset(token)


def render_mention(m: Mention) -> str:
    """A core mention as Slack writes it: a person by :func:`mention`, a channel id as ``<#C…>``, a
    thread as a link to its permalink (or the words "its thread" when Slack gave none)."""
    if m.kind == "@":
        return mention(m.identity)
    if m.kind == "^":
        url = (_PERMALINKS.get() or {}).get(m.identity)
        return f"<{url}|thread>" if url and _PERMALINK.fullmatch(url) else "its thread"
    return f"<#{m.identity}>" if _CHANNEL_ID.fullmatch(m.identity) else "#" + _escape_plain(m.identity)


# A UTC (or offset) timestamp as the core writes it (bot.clock.isoformat): 2026-12-02T14:20:00.000Z.
_ISO_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})(?![\w:])")
_CODE_SPAN = re.compile(r"(```.*?```|`[^`]*`)", re.S)


def _local_time(match: re.Match[str]) -> str:
    try:
        when = datetime.fromisoformat(match.group(0).replace("Z", "+00:00"))
    except ValueError:
        return match.group(0)
    fallback = when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"<!date^{int(when.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def _utc_time(match: re.Match[str]) -> str:
    """A timestamp where no date token renders (plain_text): the fallback's readable UTC form."""
    token = _local_time(match)
    return token[token.index("|") + 1 : -1] if token.startswith("<!date^") else token


def local_times(mrkdwn: str) -> str:
    """Each timestamp of escaped mrkdwn as Slack's date token: every reader sees their own zone, and a
    client that cannot render it shows the UTC fallback. Code spans keep the literal text (a token
    inside backticks would show raw)."""
    parts = _CODE_SPAN.split(mrkdwn)
    return "".join(p if i % 2 else _ISO_TIME.sub(_local_time, p) for i, p in enumerate(parts))


def mrkdwn(text: str) -> str:
    """Outside text for a mrkdwn field: escaped (:func:`escape`), times in the reader's zone."""
    return local_times(escape(text))


def header_text(text: str) -> str:
    """A header is plain_text: markup would show literally, so backticks go (mentions stay readable)."""
    return _ISO_TIME.sub(_utc_time, plain_refs(text).replace("`", ""))


def plain_refs(text: str) -> str:
    """For plain_text fields (headers, button labels): mentions readable (``@U1``), nothing else touched."""
    return render_refs(text, str)


def mention(identity: str) -> str:
    """``U…``/``W…`` → ``<@U…>``, ``S…`` → ``<!subteam^S…>``; anything else (console names) → ``@name``."""
    if identity[:1] in ("U", "W") and identity[1:].isalnum() and identity.isupper():
        return f"<@{identity}>"
    if identity[:1] == "S" and identity[1:].isalnum() and identity.isupper():
        return f"<!subteam^{identity}>"
    return "@" + _escape_plain(identity)


def action_id(button: Button, index: int) -> str:
    """Unique per message; the router's action name is recovered by :func:`parse_action_id`."""
    return truncate(f"{ACTION_PREFIX}:{button.action}:{index}", ID_LENGTH, "")


def parse_action_id(value: str) -> str | None:
    """The router action named by an action_id built by :func:`action_id` (None if not ours)."""
    parts = value.split(":")
    if len(parts) < 3 or parts[0] != ACTION_PREFIX:
        return None
    return ":".join(parts[1:-1])


def notification_text(message: Message) -> str:
    """The message's top-level ``text``: shown in notifications and by clients without blocks.

    It is mrkdwn too (a ``<!channel>`` in it would notify the channel): escaped like the blocks. The
    message's find keys end it, uncut: conversations.history finds the post by them, and the blocks,
    which people read, never show them.
    """
    keys = "".join("\n" + escape(key) for key in find_keys(message))
    return truncate(escape(brief(message).marked_text()), NOTIFICATION_TEXT - len(keys)) + keys


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _lines_sections(lines: Sequence[str]) -> list[Block]:
    """Group lines into as few sections as fit (3000 chars each)."""
    sections: list[Block] = []
    current: list[str] = []
    size = 0
    for raw in lines:
        line = mrkdwn(raw)
        for piece in _chunks(line, SECTION_TEXT):
            if current and size + len(piece) + 1 > SECTION_TEXT:
                sections.append(SectionBlock(text=MarkdownTextObject(text="\n".join(current))))
                current, size = [], 0
            current.append(piece)
            size += len(piece) + 1
    if current and any(current):
        sections.append(SectionBlock(text=MarkdownTextObject(text="\n".join(current))))
    return sections


def _fact_sections(facts: Sequence[tuple[str, str]]) -> list[Block]:
    sections: list[Block] = []
    for start in range(0, len(facts), MAX_FIELDS):
        fields = [
            MarkdownTextObject(text=truncate(f"*{escape(k)}*\n{mrkdwn(v) or ' '}", FIELD_TEXT))
            for k, v in facts[start : start + MAX_FIELDS]
        ]
        sections.append(SectionBlock(fields=fields))
    return sections


def attachment_preview(attachment: Attachment, *, uploaded: bool) -> str:
    """A code block with the start of a long text, saying where the rest is."""
    text = attachment.text
    head = truncate(text, PREVIEW_CHARS, "")
    cut = len(text) - len(head)
    note = (
        f"_Full text: `{escape(attachment.filename)}` ({len(text)} chars, attached in this thread)._"
        if uploaded
        else f"_Showing the first {len(head)} of {len(text)} chars of `{escape(attachment.filename)}`._"
    )
    body = "```" + escape(head).replace("```", "`\u200b``") + ("\n…" if cut else "") + "```"
    return truncate(body, SECTION_TEXT - len(note) - 1) + "\n" + note


def message_blocks(message: Message, *, attachment_uploaded: bool = False) -> list[Block]:
    """Blocks for one message, always within Slack's limits (checked by :func:`check_blocks`): its
    short form, the fact list behind a Details button (:func:`bot.messages.brief`)."""
    message = brief(message)
    blocks: list[Block] = []
    icon = _ICONS.get(message.level, "")
    blocks.append(
        HeaderBlock(text=PlainTextObject(text=truncate(header_text(message.headline) or " ", HEADER_TEXT), emoji=True))
    )
    if message.mentions:
        who = " ".join(mention(m) for m in message.mentions)
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=truncate(f"{icon} {who}", SECTION_TEXT))]))
    elif message.level in ("warn", "error", "ok", "progress"):
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=f"{icon} {_LEVEL_WORDS[message.level]}")]))
    blocks.extend(_lines_sections(message.lines))
    blocks.extend(_fact_sections(message.facts))
    if message.rules:
        rules = truncate("Runbook: " + ", ".join(escape(r) for r in message.rules), SECTION_TEXT)
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=rules)]))
    if message.attachment is not None:
        blocks.append(
            SectionBlock(
                text=MarkdownTextObject(text=attachment_preview(message.attachment, uploaded=attachment_uploaded))
            )
        )
    printed = "\n".join(message.lines)
    blocks.extend(_button_blocks(message.buttons, printed=printed))
    blocks = _fit(blocks, MAX_MESSAGE_BLOCKS, reserve_tail=_tail_count(message.buttons, printed))
    _assign_block_ids(blocks)
    check_blocks(blocks, MAX_MESSAGE_BLOCKS)
    return blocks


def _tail_count(buttons: Sequence[Button], printed: str = "") -> int:
    if not buttons:
        return 0
    n_actions = (len(buttons) + ACTIONS_ELEMENTS - 1) // ACTIONS_ELEMENTS
    return n_actions + (1 if _unprinted_commands(buttons, printed) else 0)


def _unprinted_commands(buttons: Sequence[Button], printed: str) -> list[str]:
    """The buttons' typed lines not already in the message's own lines, each once: a command printed
    twice in one message reads as two different things to do."""
    out: list[str] = []
    for b in buttons:
        if b.command and b.command not in printed and b.command not in out:
            out.append(b.command)
    return out


def _confirm(button: Button) -> ConfirmObject | None:
    """Block Kit's "are you sure" for a click that cannot be undone (R5.4): what happens, irreversibly."""
    if not button.confirm:
        return None
    label = plain_refs(button.label or button.action)
    return ConfirmObject(
        title=PlainTextObject(text=truncate(f"{label}: irreversible", CONFIRM_TITLE)),
        text=PlainTextObject(text=truncate(plain_refs(button.confirm), CONFIRM_TEXT)),
        confirm=PlainTextObject(text=truncate(f"Yes, {label}", CONFIRM_BUTTON)),
        deny=PlainTextObject(text="Cancel"),
        style="danger",
    )


def _button_blocks(buttons: Sequence[Button], offset: int = 0, *, printed: str = "") -> list[Block]:
    out: list[Block] = []
    for start in range(0, len(buttons), ACTIONS_ELEMENTS):
        elements = [
            ButtonElement(
                text=PlainTextObject(text=truncate(plain_refs(b.label or b.action), BUTTON_TEXT), emoji=True),
                action_id=action_id(b, offset + start + i),
                value=truncate(b.value, BUTTON_VALUE, ""),
                style=b.style,
                confirm=_confirm(b),
            )
            for i, b in enumerate(buttons[start : start + ACTIONS_ELEMENTS])
        ]
        out.append(ActionsBlock(elements=elements))
    commands = [f"`{escape(command)}`" for command in _unprinted_commands(buttons, printed)]
    if commands:
        out.append(
            ContextBlock(
                elements=[MarkdownTextObject(text=truncate("Or type: " + "  ·  ".join(commands), SECTION_TEXT))]
            )
        )
    return out


def _fit(blocks: list[Block], limit: int, *, reserve_tail: int = 0) -> list[Block]:
    """Drop middle blocks beyond the limit, keeping the header and the buttons, and say so."""
    if len(blocks) <= limit:
        return blocks
    tail = blocks[len(blocks) - reserve_tail :] if reserve_tail else []
    body = blocks[: len(blocks) - reserve_tail] if reserve_tail else blocks
    keep = limit - len(tail) - 1
    dropped = len(body) - keep
    note = ContextBlock(elements=[MarkdownTextObject(text=f"_… {dropped} more blocks not shown (Slack's limit)._")])
    return [*body[:keep], note, *tail]


def _assign_block_ids(blocks: Iterable[Block]) -> None:
    for i, block in enumerate(blocks):
        block.block_id = f"b{i}"


def check_blocks(blocks: Sequence[Block | dict[str, Any]], limit: int = MAX_MESSAGE_BLOCKS) -> list[dict[str, Any]]:
    """Serialise and check what ``slack_sdk`` does not: block count, unique block_id, action_id per block.

    Returns the dicts (``to_dict()`` also runs the library's own length checks).
    """
    dicts = [b if isinstance(b, dict) else b.to_dict() for b in blocks]
    problems: list[str] = []
    if len(dicts) > limit:
        problems.append(f"{len(dicts)} blocks (Slack allows {limit})")
    block_ids = [d["block_id"] for d in dicts if d.get("block_id")]
    if len(block_ids) != len(set(block_ids)):
        problems.append("duplicate block_id")
    # Slack requires an action_id to be unique within its block (our messages make them unique overall).
    for d in dicts:
        elements = [
            *(d.get("elements") or []),
            *([d["element"]] if isinstance(d.get("element"), dict) else []),
        ]
        ids = [e["action_id"] for e in elements if isinstance(e, dict) and e.get("action_id")]
        if len(ids) != len(set(ids)):
            problems.append(f"duplicate action_id in block {d.get('block_id')!r}")
    for d in dicts:
        if d.get("type") == "actions" and len(d.get("elements", [])) > ACTIONS_ELEMENTS:
            problems.append(f"an actions block with more than {ACTIONS_ELEMENTS} elements")
        if d.get("type") == "context" and len(d.get("elements", [])) > CONTEXT_ELEMENTS:
            problems.append(f"a context block with more than {CONTEXT_ELEMENTS} elements")
    if problems:
        raise BlockError(problems)
    return dicts


def message_payload(message: Message, *, attachment_uploaded: bool = False) -> dict[str, Any]:
    """``text`` + ``blocks`` for chat.postMessage / chat.update / response_url.

    Never with ``link_names`` or ``parse=full``: with those Slack would turn a plain ``@channel`` or
    ``#name`` of outside text into live mentions, and escaping ``&<>`` (:func:`escape`) would no
    longer be enough. Only the core's own references render.
    """
    return {
        "text": notification_text(message),
        "blocks": check_blocks(message_blocks(message, attachment_uploaded=attachment_uploaded)),
    }


# -- the decide modal ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecideForm:
    """What the decide modal carries: the decision and where the click came from."""

    session_id: str
    decision: str
    channel: str | None = None
    thread_ts: str | None = None

    def to_metadata(self) -> str:
        text = json.dumps(
            {"s": self.session_id, "d": self.decision, "c": self.channel, "t": self.thread_ts},
            separators=(",", ":"),
        )
        if len(text) > PRIVATE_METADATA:
            raise BlockError(["decide form metadata too long"])
        return text

    @classmethod
    def from_metadata(cls, text: str) -> DecideForm:
        """The form :meth:`to_metadata` wrote; :class:`BadButtonValue` for anything else (it comes back
        from outside; the router still checks the session and the decision it names)."""
        try:
            data = json.loads(text or "{}")
            s, d, c, t = data["s"], data["d"], data.get("c"), data.get("t")
        except (ValueError, TypeError, KeyError, AttributeError):
            s = d = c = t = None
        if not (isinstance(s, str) and isinstance(d, str) and all(v is None or isinstance(v, str) for v in (c, t))):
            raise BadButtonValue(
                "Refused a decision form this bot did not open; nothing was done. "
                "Click the decision button again, or type the decide command."
            )
        return cls(session_id=s, decision=d, channel=c, thread_ts=t)


def refusal_view(text: str) -> View:
    """What a refused form submission shows in place of the form: the one line, and nothing was sent."""
    body = SectionBlock(block_id="b0", text=MarkdownTextObject(text=truncate(escape(text), SECTION_TEXT)))
    return View(
        type="modal",
        title=PlainTextObject(text="Not done"),
        close=PlainTextObject(text="Close"),
        blocks=check_blocks([body], MAX_VIEW_BLOCKS),
    )


def decide_modal(form: DecideForm, fields: Sequence[FormField]) -> View:
    """The modal behind a decision button: only the fields that decision uses (from the runbook's
    flags, e.g. the ``--effects`` account of R3.10 for abandon), required ones not optional."""
    blocks: list[Block] = [
        SectionBlock(
            text=MarkdownTextObject(
                text=truncate(
                    f"*{escape(form.decision)}* on session `{escape(form.session_id)}`.\n"
                    "The reason is sent to the control host and recorded.",
                    SECTION_TEXT,
                )
            )
        )
    ]
    for field in fields:
        blocks.append(
            InputBlock(
                block_id=field.name,
                label=PlainTextObject(text=truncate(field.label + ("" if field.required else " (optional)"), 2000)),
                element=PlainTextInputElement(action_id="value", multiline=field.multiline, max_length=2000),
                optional=not field.required,
                hint=PlainTextObject(text=truncate(field.help, 2000)) if field.help else None,
            )
        )
    check_blocks(blocks, MAX_VIEW_BLOCKS)
    return View(
        type="modal",
        callback_id=DECIDE_CALLBACK,
        title=PlainTextObject(text=truncate(f"Decide: {form.decision}", MODAL_TITLE)),
        submit=PlainTextObject(text="Submit"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=form.to_metadata(),
        blocks=blocks,
    )


def read_decide_state(values: dict[str, Any], fields: Sequence[FormField]) -> dict[str, str]:
    """``view.state.values`` of the decide modal → ``{"reason": …, "turn": …}`` (empty fields dropped)."""
    out: dict[str, str] = {}
    for field in fields:
        raw = ((values.get(field.name) or {}).get("value") or {}).get("value")
        if isinstance(raw, str) and raw.strip():
            out[field.name] = raw.strip()
    return out


def decide_form_errors(fields: Sequence[FormField], form: dict[str, str]) -> dict[str, str]:
    """What the modal refuses at once, shown under the inputs (``response_action: errors``): an empty
    required field (the reason always), a value the runbook's pattern refuses. Nothing leaves."""
    return form_errors(list(fields), form)


# -- App Home ---------------------------------------------------------------------------------------


def home_view(cases: Sequence[Message], approvals: Sequence[Message]) -> View:
    """The App Home tab: pending approvals first (they wait for someone), then open cases."""
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text="Pending approvals"))]
    blocks.extend(_summary_blocks(approvals, "No approval is waiting."))
    blocks.append(HeaderBlock(text=PlainTextObject(text="Open cases")))
    blocks.extend(_summary_blocks(cases, "No open case."))
    blocks = _fit(blocks, MAX_VIEW_BLOCKS)
    _assign_block_ids(blocks)
    check_blocks(blocks, MAX_VIEW_BLOCKS)
    return View(type="home", blocks=blocks)


def _summary_blocks(messages: Sequence[Message], empty: str) -> list[Block]:
    if not messages:
        return [ContextBlock(elements=[MarkdownTextObject(text=f"_{empty}_")])]
    out: list[Block] = []
    offset = 0
    for m in messages:
        text = [f"{_ICONS.get(m.level, '')} *{mrkdwn(m.headline)}*"]
        text.extend(mrkdwn(line) for line in m.lines[:4])
        text.extend(f"{escape(k)}: {mrkdwn(v)}" for k, v in m.facts[:6])
        out.append(SectionBlock(text=MarkdownTextObject(text=truncate("\n".join(text), SECTION_TEXT))))
        out.extend(_button_blocks(m.buttons, offset, printed="\n".join(m.lines[:4])))
        offset += len(m.buttons)
    return out
