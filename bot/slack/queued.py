"""What each queued delivery is, as data in, and how it becomes a call on the Slack front end's work.

The ack side (:mod:`bot.slack.app`'s listeners) stores a delivery as ``(kind, payload)`` in the
:mod:`bot.slack.inbox`; whoever claims it (a thread of the same process in tests and embedded use,
the :mod:`bot.slack.worker` process under ``recover-bot serve``) calls :func:`run_claimed`. Kept apart
from both so neither imports the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from bot.buttons import BadButtonValue, DecisionChoice
from bot.messages import Message
from bot.slack import blocks as kit
from bot.slack.inbox import Inbox, Item
from bot.slack.web import SlackOut
from bot.vocab import Action

log = logging.getLogger("recover_bot.slack")

COMMAND, ACTION, DECIDE, HOME = "command", "action", "decide", "home"


class QueuedWork(Protocol):
    """The work a delivery stands for (implemented by :class:`bot.slack.app.SlackBot`)."""

    @property
    def out(self) -> SlackOut: ...

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


class BadItem(ValueError):
    """A claimed row that is not a delivery of its kind: quarantined, never run."""


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _call(item: Item) -> Callable[[QueuedWork], None]:
    """The work one item stands for, read and checked before anything runs (:class:`BadItem` if it cannot be).

    Why apart from running it: an error of the work itself is the work's (each method guards itself);
    only a row that cannot be read as its kind is quarantined.
    """
    if item.damage is not None:
        raise BadItem(item.damage)
    p = item.payload
    try:
        if item.kind == COMMAND:
            body = p["body"]
            if not isinstance(body, dict):
                raise TypeError("body")
            return lambda work: work.run_command(body)
        if item.kind == ACTION:
            body, name, value = p["body"], p["action"], p["value"]
            if not (isinstance(body, dict) and isinstance(name, str) and isinstance(value, str)):
                raise TypeError("body, action or value")
            return lambda work: work.run_action(body, name, value)
        if item.kind == DECIDE:
            actor, form, raw = p["actor"], kit.DecideForm.from_metadata(str(p["form"])), p.get("fields") or {}
            if not (isinstance(actor, str) and isinstance(raw, dict)):
                raise TypeError("actor or fields")
            fields = {str(k): str(v) for k, v in raw.items()}
            return lambda work: work.run_decide(actor, form, fields)
        if item.kind == HOME:
            user = p["user"]
            if not isinstance(user, str):
                raise TypeError("user")
            return lambda work: work.home_opened(user)
    except (KeyError, TypeError, ValueError, BadButtonValue) as exc:
        raise BadItem(f"its {item.kind} payload is not one this bot stores ({type(exc).__name__})") from None
    raise BadItem(f"its kind {item.kind[:40]!r} is not one this bot queues")


class Lanes(Protocol):
    """Which installation a delivery's work acts on, by the router's own rule, without running it
    (implemented by :class:`bot.app.fleet_router.FleetRouter`)."""

    def installation_of_text(self, text: str, channel: str | None) -> str | None: ...

    def installation_of_action(
        self, action: str, value: str, channel: str | None, form: dict[str, str] | None = None
    ) -> str | None: ...


def installation_of(item: Item, lanes: Lanes) -> str | None:
    """The installation an item's work will act on, from what it holds (the command's text or the
    click's value and form, and its channel) as the work itself will hand it to the router; None
    for work of no one installation (App Home, the fleet's own commands, a row that is not a
    delivery, one that names none). Parsing only: no core, no network."""
    try:
        _call(item)  # a row that is not a delivery is quarantined unrun: it acts on no installation
    except BadItem:
        return None
    p = item.payload
    body = _obj(p.get("body"))
    _, channel, _ = _recipient(item)
    if item.kind == COMMAND:
        return lanes.installation_of_text(str(body.get("text") or ""), channel)
    if item.kind == ACTION:
        return lanes.installation_of_action(str(p["action"]), str(p["value"]), channel)
    if item.kind == DECIDE:
        form = kit.DecideForm.from_metadata(str(p["form"]))
        choice = DecisionChoice(form.session_id, form.decision).encode()
        return lanes.installation_of_action(
            Action.DECIDE, choice, form.channel, {"session_id": form.session_id, "decision": form.decision}
        )
    return None


def run_claimed(work: QueuedWork, inbox: Inbox, worker: str, item: Item) -> None:
    """Run one item ``worker`` claimed and mark it done; a row that is not a delivery is quarantined
    instead (logged, counted on ``/healthz``, its author told when the row says who), never run, and
    never in the way of the items claimed with it."""
    try:
        call = _call(item)
    except BadItem as exc:
        if inbox.quarantine(item.id, worker):
            who = _recipient(item)[2]
            log.error("queued delivery %d quarantined, not run: %s (author: %s)", item.id, exc, who or "unknown")
            tell_quarantined(work.out, item)
        return
    try:
        call(work)
    finally:
        inbox.finish(item.id, worker)


def _what(item: Item) -> str:
    body = _obj(item.payload.get("body"))
    if item.kind == COMMAND:
        return f"`/recover {' '.join(str(body.get('text') or 'help').split())[:200]}`"
    return "your click" if item.kind == ACTION else "your decision form"


def interrupted_message(item: Item) -> Message:
    """Said to the person whose command was running when its worker process died."""
    return Message(
        headline="recover-bot restarted while working on " + _what(item),
        level="warn",
        lines=[
            "It is not run again by itself (it may have sent a request). A request it had stored is"
            " finished with its stored key and reported in the case's thread.",
            "Check `/recover history <session_id>` before repeating it.",
        ],
    )


def quarantined_message(item: Item) -> Message:
    """Said to the person whose delivery was stored damaged: nothing was run, so repeating it is safe."""
    return Message(
        headline=f"recover-bot could not read back {_what(item)} after receiving it: nothing was run",
        level="warn",
        lines=["Send it again. The damaged copy is kept aside for the operators (`/healthz` counts it)."],
    )


def _recipient(item: Item) -> tuple[str | None, str | None, str | None]:
    """(response_url, channel, user) of an item's author, from whatever the payload holds (or None)."""
    p = item.payload
    body = _obj(p.get("body"))
    if item.kind == COMMAND:
        return _text(body.get("response_url")), _text(body.get("channel_id")), _text(body.get("user_id"))
    if item.kind == ACTION:
        channel = _text(_obj(body.get("channel")).get("id")) or _text(_obj(body.get("container")).get("channel_id"))
        return None, channel, _text(_obj(body.get("user")).get("id"))
    if item.kind == DECIDE:
        try:
            channel = kit.DecideForm.from_metadata(str(p.get("form") or "{}")).channel
        except BadButtonValue:
            channel = None
        return None, channel, _text(p.get("actor"))
    return None, None, None  # App Home opens (nobody to tell) and kinds this bot does not queue


def _tell(out: SlackOut, item: Item, message: Message, *, use_url: bool) -> None:
    url, channel, user = _recipient(item)
    if use_url and url and out.respond(url, message, ephemeral=True):
        return
    if channel and user:
        out.ephemeral(channel, user, message)


def tell_interrupted(out: SlackOut, item: Item) -> None:
    """Tell the actor, only them, that their delivery was interrupted (nothing for App Home opens)."""
    _tell(out, item, interrupted_message(item), use_url=item.damage is None)


def tell_quarantined(out: SlackOut, item: Item) -> None:
    """Tell the actor, only them, that their delivery was stored damaged; never through a URL read
    from a damaged row (only Slack's own ephemeral post to the channel and user it names)."""
    _tell(out, item, quarantined_message(item), use_url=item.damage is None)
