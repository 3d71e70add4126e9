"""What each queued delivery is, as data in, and how it becomes a call on the Slack front end's work.

The ack side (:mod:`bot.slack.app`'s listeners) stores a delivery as ``(kind, payload)`` in the
:mod:`bot.slack.inbox`; whoever claims it (a thread of the same process in tests and embedded use,
the :mod:`bot.slack.worker` process under ``recover-bot serve``) calls :func:`run_item`. Kept apart
from both so neither imports the other.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from bot.messages import Message
from bot.slack import blocks as kit
from bot.slack.inbox import Item
from bot.slack.web import SlackOut

log = logging.getLogger("recover_bot.slack")

COMMAND, ACTION, DECIDE, HOME = "command", "action", "decide", "home"


class QueuedWork(Protocol):
    """The work a delivery stands for (implemented by :class:`bot.slack.app.SlackBot`)."""

    def run_command(self, body: dict[str, Any]) -> None: ...

    def run_action(self, body: dict[str, Any], action: str, value: str) -> None: ...

    def run_decide(self, actor: str, form: kit.DecideForm, fields: dict[str, str]) -> None: ...

    def home_opened(self, user_id: str) -> None: ...


#: Not stored with a queued body: Slack's deprecated verification token is a secret the work never needs.
_UNSTORED = frozenset({"token"})


def _stored(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in _UNSTORED}


def command(body: dict[str, Any]) -> dict[str, Any]:
    return {"body": _stored(body)}


def action(body: dict[str, Any], name: str, value: str) -> dict[str, Any]:
    return {"body": _stored(body), "action": name, "value": value}


def decide(actor: str, form: kit.DecideForm, fields: dict[str, str]) -> dict[str, Any]:
    return {"actor": actor, "form": form.to_metadata(), "fields": fields}


def home(event_id: str, user: str) -> dict[str, Any]:
    return {"event_id": event_id, "user": user}


def run_item(work: QueuedWork, item: Item) -> None:
    """Run one claimed delivery (its errors are the work's own: each method guards itself)."""
    p = item.payload
    if item.kind == COMMAND:
        work.run_command(p["body"])
    elif item.kind == ACTION:
        work.run_action(p["body"], str(p["action"]), str(p["value"]))
    elif item.kind == DECIDE:
        fields = {str(k): str(v) for k, v in (p.get("fields") or {}).items()}
        work.run_decide(str(p["actor"]), kit.DecideForm.from_metadata(str(p["form"])), fields)
    elif item.kind == HOME:
        work.home_opened(str(p["user"]))
    else:
        log.warning("queued delivery %d of unknown kind %r skipped", item.id, item.kind)


def interrupted_message(item: Item) -> Message:
    """Said to the person whose command was running when its worker process died."""
    body = item.payload.get("body") or {}
    what = f"`/recover {' '.join(str(body.get('text') or 'help').split())[:200]}`" if item.kind == COMMAND else (
        "your click" if item.kind == ACTION else "your decision form"
    )
    return Message(
        headline="recover-bot restarted while working on " + what,
        level="warn",
        lines=[
            "It is not run again by itself (it may have sent a request). A request it had stored is"
            " finished with its stored key and reported in the case's thread.",
            "Check `/recover history <session_id>` before repeating it.",
        ],
    )


def tell_interrupted(out: SlackOut, item: Item) -> None:
    """Tell the actor, only them, that their delivery was interrupted (nothing for App Home opens)."""
    if item.kind == HOME:
        return
    p = item.payload
    body: dict[str, Any] = p.get("body") or {}
    message = interrupted_message(item)
    if item.kind == COMMAND:
        url, channel, user = body.get("response_url"), body.get("channel_id"), body.get("user_id")
    elif item.kind == ACTION:
        container = body.get("container") or {}
        url = None
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        user = (body.get("user") or {}).get("id")
    else:
        url, user = None, p.get("actor")
        channel = kit.DecideForm.from_metadata(str(p.get("form") or "{}")).channel
    if url and out.respond(str(url), message, ephemeral=True):
        return
    if channel and user:
        out.ephemeral(str(channel), str(user), message)
