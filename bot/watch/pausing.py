"""``/recover watch pause`` and ``resume``: only by a member of the watch channel, each a chain step.

Pausing watch mode silences a channel other people rely on, so only someone in that channel may do
it (or undo it). Who is asking is the person behind the actor, by the approvals' identity rule
(:func:`bot.decisions.person_of`: a mapped console login is its Slack id); whether they are in the
channel is asked each time (Slack's conversations.members, paged: membership changes during an
incident). A channel whose members cannot be read refuses, never allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Protocol

from bot.clock import isoformat
from bot.decisions import person_of
from bot.messages import Message, Reply, ref
from bot.redact import redact
from bot.store import Store
from bot.vocab import Step
from bot.watch.store import WatchStore


class ChannelMembers(Protocol):
    """Who is in a channel (Slack: conversations.members; the console demo: its one user)."""

    def is_member(self, channel: str, user: str) -> bool: ...


class ConsoleMembers:
    """The console is a channel of its own, and the person at it is its member."""

    def is_member(self, channel: str, user: str) -> bool:
        return True


def member_refusal(
    members: ChannelMembers | None, channel: str, actor: str, console_users: Mapping[str, str], verb: str
) -> Reply | None:
    """None when ``actor`` may ``verb`` watch mode (a member of its channel), else the one-line refusal."""
    person = person_of(actor, console_users) or actor
    why: str | None = None
    if members is None:
        why = "this bot cannot read the channel's members"
    else:
        try:
            if members.is_member(channel, person):
                return None
        except Exception as exc:  # noqa: BLE001 - unreadable membership refuses, never allows
            why = f"its members could not be read ({redact(str(exc)) or type(exc).__name__})"
    head = f"Only members of {ref(channel, '#')} {verb} watch mode: "
    head += f"{why}; nothing changed." if why else f"{ref(person)} is not one; nothing changed."
    return Reply.of(Message(headline=head, level="error"), ok=False)


def record_pause(
    saved: WatchStore, store: Store, *, actor: str, seconds: float | None, now: datetime
) -> Reply:
    """The shared pause (every process reads it) and its ``watch`` step, committed together."""
    until = now + timedelta(seconds=seconds) if seconds else None
    with store.write() as db:
        saved.put("pause", {"paused": True, "until": isoformat(until), "by": actor, "at": isoformat(now)}, db=db)
        store.record_step(None, actor, Step.WATCH, {"action": "pause", "seconds": seconds,
                                                    "installation": saved.installation}, "paused", db=db)
    when = f"until {isoformat(until)}" if until else "until `/recover watch resume`"
    return Reply.of(Message(
        headline=f"Watch paused {when}: new stops are recorded, not posted.", level="ok",
        lines=["`/recover watch resume` to post again; `/recover triage` shows every stopped session."],
    ))


def record_resume(saved: WatchStore, store: Store, *, actor: str, now: datetime) -> Reply:
    with store.write() as db:
        saved.put("pause", {"paused": False, "by": actor, "at": isoformat(now)}, db=db)
        store.record_step(None, actor, Step.WATCH, {"action": "resume", "installation": saved.installation},
                          "resumed", db=db)
    return Reply.of(Message(headline="Watch resumed: new stops are posted again.", level="ok"))
