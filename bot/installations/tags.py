"""What a message of one installation carries so a later click cannot reach another.

Every button a named installation's core makes gets the installation after an ``@`` in its value (no
id may contain ``@``: the runbook's id pattern) and ``--install <name>`` in its typed equivalent; the
fleet router reads the tag back and resolves it with the channel (bot/installations/resolve.py), so
a payload replayed in a channel bound to another installation is refused. The reply's lead line
names the installation once.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from bot.ids import TAG, split_tag, tagged
from bot.messages import Button, Message, Reply, Reporter, brief


def tag_value(value: str, installation: str) -> str:
    return tagged(value, installation)


def untag(value: str) -> tuple[str, str | None]:
    """``(value, installation)``: the button's own value and the installation it was made by."""
    return split_tag(value)


def _button(button: Button, installation: str) -> Button:
    if untag(button.value)[1] is not None:
        return button
    command = button.command
    if command and "--install" not in command:
        command = f"{command} --install {installation}"
    return dataclasses.replace(button, value=tag_value(button.value, installation), command=command)


def tag_message(message: Message, installation: str) -> Message:
    """The message as a reply shows it (:func:`bot.messages.brief`, so its Details button exists now)
    with every button tagged; a copy (the full message the router kept for ``details`` stays as it was)."""
    shown = brief(message)
    return dataclasses.replace(
        shown, buttons=[_button(b, installation) for b in shown.buttons], installation=installation
    )


def name_lead(message: Message, installation: str) -> Message:
    """The lead line names the installation once: ``[eu-1] …`` (a copy)."""
    mark = f"[{installation}] "
    if message.headline.startswith(mark):
        return message
    return dataclasses.replace(message, headline=mark + message.headline)


def tag_reply(reply: Reply, installation: str) -> Reply:
    messages = [tag_message(m, installation) for m in reply.messages]
    if messages:
        messages[0] = name_lead(messages[0], installation)
    return dataclasses.replace(reply, messages=messages)


class TaggingReporter:
    """A reporter whose messages leave with their installation's tag (and name in the lead line)."""

    def __init__(self, inner: Reporter, installation: str) -> None:
        self.inner, self.installation = inner, installation

    def progress(self, message: Message) -> None:
        self.inner.progress(name_lead(tag_message(message, self.installation), self.installation))

    def post(self, message: Message) -> None:
        self.inner.post(name_lead(tag_message(message, self.installation), self.installation))

    def __getattr__(self, name: str) -> object:  # what else the front's reporter offers (rate limits)
        return getattr(self.inner, name)


class NoticePoster(Protocol):
    """What break-glass's loud notice is posted through (bot.decisions.Notice, structurally)."""

    def post(self, where: str, message: Message) -> str | None: ...


class TaggingNotice:
    """A front's notice poster for one named installation: each notice names it in the lead line, as
    every other message of that installation does (a channel or approver told of a break-glass must
    see whose control host it is about)."""

    def __init__(self, inner: NoticePoster, installation: str) -> None:
        self.inner, self.installation = inner, installation

    def post(self, where: str, message: Message) -> str | None:
        return self.inner.post(where, name_lead(tag_message(message, self.installation), self.installation))


__all__ = [
    "TAG",
    "NoticePoster",
    "TaggingNotice",
    "TaggingReporter",
    "name_lead",
    "tag_message",
    "tag_reply",
    "tag_value",
    "untag",
]
