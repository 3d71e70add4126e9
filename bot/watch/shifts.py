"""What the watcher says at the edges of time windows: the quiet-hours digest and the shift hand-off.

Both are said once, by one process, across restarts: the held stops are taken for the digest, and
each shift change is claimed like a stop, with a lease (bot/watch/store.py), under the store's write
lock with its step before the post; a dead owner's claim is taken over and its missing parts posted.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo

from bot.clock import isoformat, parse_time
from bot.messages import Button, Message
from bot.runbook.installation import WatchSectionSpec
from bot.runbook.model import RunbookSet
from bot.vocab import Action
from bot.watch.lease import LeaseKeeper
from bot.watch.poster import Poster, key_line
from bot.watch.stops import described
from bot.watch.store import Claim, WatchStore
from bot.watch.windows import shift_changes

#: A shift change found later than this (the bot was down) gets no late hand-off post.
HANDOFF_LATE = 3600.0
#: Who the hand-off's digest step names (the watcher, not one process of it).
ACTOR = "watch"
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
    poster.post(
        channel,
        Message(
            headline=f"Quiet hours are over{window}: {len(held)} session(s) stopped meanwhile.",
            level="warn",
            lines=lines,
        ),
    )


def take_button(target: str) -> Button:
    """Take the case (or batch) from the hand-off post: ``take``'s own command, as a button and as text."""
    return Button("Take", Action.RUN, f"take {target}", command=f"/recover take {target}")


def with_take(message: Message) -> Message:
    """A hand-off entry of an open case or batch, offering ``take`` (the typed line is shown too)."""
    target = message.ref or message.session_id
    if not target or any(b.value == f"take {target}" for b in message.buttons):
        return message
    return dataclasses.replace(
        message,
        buttons=[*message.buttons, take_button(target)],
        lines=[*message.lines, f"Take it: `/recover take {target}`"],
    )


class HandoffSource(Protocol):
    """The ``handoff`` command's own parts (bot/app/handoff.py): its head, then (key, message) per listed
    entry; the requests expired since the last hand-off before ``before`` are in them."""

    def __call__(self, actor: str, before: datetime, /) -> tuple[Message, list[tuple[str, Message]]]: ...


def _change_of(name: str) -> datetime | None:
    return parse_time(name.removeprefix("handoff:"))


def post_handoff(
    saved: WatchStore,
    poster: Poster,
    channel: str,
    runbooks: RunbookSet,
    handoff: HandoffSource | None,
    now: datetime,
    leases: LeaseKeeper,
) -> bool:
    """At each of the runbook's shift changes, the hand-off digest once (by one process, across
    restarts and kills); a change more than HANDOFF_LATE ago (the bot was down) is not posted late.
    The change is claimed with a lease like a stop: see :func:`say_handoff`."""
    spec = runbooks.handoff
    if spec is None or handoff is None:
        return False
    changes = shift_changes(spec.times, spec.time_zone, now)
    if not changes or (now - changes[-1]).total_seconds() > HANDOFF_LATE:
        return False
    claim = saved.claim_handoff(f"handoff:{isoformat(changes[-1])}", actor=leases.owner, now=now, lease=leases.lease)
    if claim is None:
        return False
    say_handoff(saved, poster, channel, runbooks, handoff, claim, leases, now, look=False)
    return True


def say_handoff(
    saved: WatchStore,
    poster: Poster,
    channel: str,
    runbooks: RunbookSet,
    handoff: HandoffSource | None,
    claim: Claim,
    leases: LeaseKeeper,
    now: datetime,
    *,
    look: bool,
) -> None:
    """Post a claimed shift change's head, then each listed case (with Take) and request in its thread,
    each with its key line. ``look`` (a claim taken over from a dead owner): each part is looked for
    in the channel by its key line first and posted only if missing, so no part is said twice and none
    is lost, wherever the kill landed. The lease (job ``handoff:<time>``) is renewed throughout,
    fenced and recorded under its token just before each post, and fenced again by each mark: an owner
    deposed meanwhile (taken over with token + 1) posts and marks nothing more."""
    spec, change = runbooks.handoff, _change_of(claim.stop.session_id)
    if spec is None or handoff is None or change is None:
        return
    key, lease = claim.stop.key, claim.lease
    with leases.held(lease):
        first, parts = handoff(ACTOR, change)
        local = change.astimezone(ZoneInfo(spec.time_zone)).strftime("%H:%M")
        changes = shift_changes(spec.times, spec.time_zone, change)
        seen = saved.seen_since(changes[-2]) if len(changes) > 1 else 0
        head = dataclasses.replace(
            first,
            headline=f"Shift change {local} {spec.time_zone}: hand-off. {first.headline}",
            lines=[*first.lines, f"Watch saw {seen} new stop(s) during the shift that ended.", key_line(key)],
        )
        root = claim.thread_ts or (poster.find(channel, key_line(key)) if look else None)
        if root is None:
            if not leases.posting(lease, f"the head of {key}"):
                return
            root = poster.post(channel, head)
            if root is None:
                raise RuntimeError("Slack did not take the hand-off's head; the claim is taken over later")
            if not saved.rooted(key, channel, root, lease=lease):
                return
        for part, message in parts:
            line = key_line(f"{key}:{part}:")
            if look and poster.find(channel, line, root) is not None:
                continue
            if not leases.posting(lease, f"part {part} of {key}"):
                return
            offered = with_take(message)
            if poster.post(channel, dataclasses.replace(offered, lines=[*offered.lines, line]), root) is None:
                # Not marked posted: the lease runs out and a taker posts what is still missing.
                raise RuntimeError(f"Slack did not take the hand-off's part {part}; it is taken over later")
        saved.posted(key, channel, root, root_ts=root, now=now, lease=lease)
