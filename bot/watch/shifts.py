"""What the watcher says at the edges of time windows: the quiet-hours digest and the shift hand-off.

Both are said once, by one process, across restarts: the held stops are taken for the digest, and
each shift change's name is claimed, under the store's write lock with their steps before the post.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from bot.clock import isoformat
from bot.messages import Button, Message, Reply
from bot.runbook.installation import WatchSectionSpec
from bot.runbook.model import RunbookSet
from bot.vocab import Action, Step
from bot.watch.poster import Poster
from bot.watch.stops import described
from bot.watch.store import WatchStore
from bot.watch.windows import shift_changes

#: A shift change found later than this (the bot was down) gets no late hand-off post.
HANDOFF_LATE = 3600.0
#: Held stops listed one per line in the quiet-hours digest; the rest are counted.
DIGEST_LINES = 20


def post_digest(saved: WatchStore, poster: Poster, channel: str, spec: WatchSectionSpec, actor: str) -> None:
    """Quiet hours are over: one digest of the stops held meanwhile, by one process."""
    held = saved.take_held(actor=actor)
    if not held:
        return
    q = spec.quiet_hours
    window = f" ({q.start}–{q.end} {q.time_zone})" if q is not None else ""
    lines = [f"• {sid}: {described(sig)}" for sid, sig in held[:DIGEST_LINES]]
    if len(held) > DIGEST_LINES:
        lines.append(f"… and {len(held) - DIGEST_LINES} more.")
    lines.append("`/recover diagnose <session_id>` for one, `/recover triage` for all of them grouped.")
    poster.post(channel, Message(
        headline=f"Quiet hours are over{window}: {len(held)} session(s) stopped meanwhile.",
        level="warn", lines=lines,
    ))


def take_button(target: str) -> Button:
    """Take the case (or batch) from the hand-off post: ``take``'s own command, as a button and as text."""
    return Button("Take", Action.RUN, f"take {target}", command=f"/recover take {target}")


def with_take(message: Message) -> Message:
    """A hand-off entry of an open case or batch, offering ``take`` (the typed line is shown too)."""
    target = message.ref or message.session_id
    if not target or any(b.value == f"take {target}" for b in message.buttons):
        return message
    return dataclasses.replace(message, buttons=[*message.buttons, take_button(target)],
                               lines=[*message.lines, f"Take it: `/recover take {target}`"])


def post_handoff(
    saved: WatchStore,
    poster: Poster,
    channel: str,
    runbooks: RunbookSet,
    handoff: Callable[[str], Reply] | None,
    now: datetime,
    actor: str,
) -> bool:
    """At each of the runbook's shift changes, the hand-off digest once (by one process, across
    restarts); a change more than HANDOFF_LATE ago (the bot was down) is not posted late. Each open
    case and batch in it can be taken from the post."""
    spec = runbooks.handoff
    if spec is None or handoff is None:
        return False
    changes = shift_changes(spec.times, spec.time_zone, now)
    if not changes or (now - changes[-1]).total_seconds() > HANDOFF_LATE:
        return False
    change = changes[-1]
    name = f"handoff:{isoformat(change)}"
    if not saved.claim_once(name, actor=actor, step=Step.HANDOFF, inputs={"shift_change": isoformat(change)}):
        return False
    reply = handoff(actor)
    local = change.astimezone(ZoneInfo(spec.time_zone)).strftime("%H:%M")
    seen = saved.seen_since(changes[-2]) if len(changes) > 1 else 0
    first, *rest = reply.messages or [Message(headline="Nothing open.")]
    head = dataclasses.replace(
        first, headline=f"Shift change {local} {spec.time_zone}: hand-off. {first.headline}",
        lines=[*first.lines, f"Watch saw {seen} new stop(s) during the shift that ended."],
    )
    ts = poster.post(channel, head)
    for message in rest:
        poster.post(channel, with_take(message), ts)
    return True
