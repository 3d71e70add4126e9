"""``/recover watch pause`` and ``resume``: only by a member of the watch channel, each a chain step.

Pausing watch mode silences a channel other people rely on, so only someone in that channel may do
it (or undo it). Who is asking is the person behind the actor, by the approvals' identity rule
(:func:`bot.decisions.person_of`: a mapped console login is its Slack id); whether they are in the
channel is asked each time (Slack's conversations.members, paged: membership changes during an
incident). A channel whose members cannot be read refuses, never allows.

A pause holds what it finds, like quiet hours: the stops seen meanwhile are kept (``pause_held``) and,
when the pause ends (``resume`` or the end of ``--for``), one digest names them and each session
still stuck is posted as usual. Nothing found during a pause dies unseen.
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
from bot.watch.stops import Stop, described
from bot.watch.store import PAUSE_HELD, WatchStore


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


def record_pause(saved: WatchStore, store: Store, *, actor: str, seconds: float | None, now: datetime) -> Reply:
    """The shared pause (every process reads it) and its ``watch`` step, committed together."""
    until = now + timedelta(seconds=seconds) if seconds else None
    with store.write() as db:
        saved.put("pause", {"paused": True, "until": isoformat(until), "by": actor, "at": isoformat(now)}, db=db)
        store.record_step(
            None,
            actor,
            Step.WATCH,
            {"action": "pause", "seconds": seconds, "installation": saved.installation},
            "paused",
            db=db,
        )
    when = f"until {isoformat(until)}" if until else "until `/recover watch resume`"
    return Reply.of(
        Message(
            headline=f"Watch paused {when}: new stops are held, not posted; at resume one digest names them.",
            level="ok",
            lines=[
                "`/recover watch resume` to post again (each session still stuck then is posted as usual); "
                "`/recover triage` shows every stopped session now."
            ],
        )
    )


def record_resume(saved: WatchStore, store: Store, *, actor: str, now: datetime) -> Reply:
    with store.write() as db:
        saved.put("pause", {"paused": False, "by": actor, "at": isoformat(now)}, db=db)
        store.record_step(
            None, actor, Step.WATCH, {"action": "resume", "installation": saved.installation}, "resumed", db=db
        )
    held = saved.counts().get(PAUSE_HELD, 0)
    lines = (
        [
            f"{held} stop(s) held during the pause: the next poll names them in one digest and posts each "
            "session still stuck."
        ]
        if held
        else []
    )
    return Reply.of(Message(headline="Watch resumed: new stops are posted again.", level="ok", lines=lines))


#: Held stops listed one per line in the pause digest; the rest are counted.
PAUSE_DIGEST_LINES = 20


def pause_digest(stuck: list[Stop], recovered: list[tuple[str, str]]) -> Message:
    """What the pause held, said once at its end: each still-stuck session (posted as usual after this)
    and each that recovered meanwhile (only named here)."""
    lines = [f"• {stop.session_id}: {stop.describe()} — still stuck" for stop in stuck]
    lines += [f"• {sid}: {described(sig)} — no longer stopped" for sid, sig in recovered]
    total = len(lines)
    if total > PAUSE_DIGEST_LINES:
        lines = [*lines[:PAUSE_DIGEST_LINES], f"… and {total - PAUSE_DIGEST_LINES} more: `/recover triage`."]
    return Message(
        headline=f"Watch pause over: {total} session(s) stopped during the pause, {len(stuck)} still stuck "
        "(posted now).",
        level="warn" if stuck else "info",
        lines=lines,
    )
