"""``/recover handoff``: the digest for the next shift, said where it was asked.

One line per open case and per pending, expired or break-glass-under-review request: the session, its
state, its owner, its age and the one next command that works for it, with a link to the case's
thread (the details stay there). What needs someone now comes first; cases that need no one (stops
only counted by watch: a storm, a pause, quiet hours) are counted, not listed. The console gets the
same digest; past :data:`LISTED` entries it ends with "… n more: `/recover cases`".

The shift change's post (bot/watch/shifts.py) is made of the same parts: its head, then one message per
listed entry in the head's thread, each with a Take button.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from bot.app.services import Services
from bot.clock import isoformat
from bot.decisions import IN_HAND, NOW, DecisionRequest, HandoffDigest, HandoffEntry
from bot.escalation.status import pending_line
from bot.format import age
from bot.messages import Message, Reply, ref, thread_ref
from bot.runbook.usage import typed_line

#: Entries listed one per line; the rest are counted with the command that lists them all.
LISTED = 20
KIND = "handoff"


def request_line(services: Services, r: DecisionRequest, now: datetime) -> str:
    """A pending request's line, as ``pending``, App Home and the ladder's live line say it: its one
    owner is :func:`bot.escalation.status.pending_line` (the right verb, who may act now)."""
    return pending_line(services.decisions.ctx, r, now).text


def _who(user: str | None) -> str:
    return ref(user) if user else "nobody"


def _thread(e: HandoffEntry) -> str:
    return (
        f"details in its {thread_ref(*e.thread)}"
        if e.thread
        else f"no thread yet: `{typed_line('history', e.session_id)}`"
    )


def expired_line(r: DecisionRequest, now: datetime) -> str:
    # Said until the hand-off after its expiry: who asked, when it expired and how to ask again (a new
    # request: an expired one is never sent, and asking again is the only way on).
    return (
        f"Expired: `{r.id}` {r.decision} on `{r.session_id}` · asked by {_who(r.requester)} · expired at "
        f"{r.expires_at} ({age(r.expires_at, now)} ago), nothing was sent · ask again: "
        f'`/recover decide {r.session_id} {r.decision} --reason "…"`'
    )


@dataclass
class Part:
    """One listed entry: its digest lines and the message the shift change posts for it."""

    key: str  # how a watcher taking over the post finds it (a session or request id)
    lines: list[str]
    message: Message


@dataclass
class Digest:
    head: Message
    now: list[Part] = field(default_factory=list)
    in_hand: list[Part] = field(default_factory=list)
    extra: list[Message] = field(default_factory=list)  # open batches (their own summary)


def _case_part(services: Services, e: HandoffEntry, now: datetime) -> Part:
    head = (
        f"`{e.session_id}` · {e.state} · owner {_who(e.owner)} · open {age(e.opened_at, now)}"
        + ("" if e.requests else f" · next: {e.next_step}")
        + f" · {_thread(e)}"
    )
    subs = [request_line(services, r, now) for r in e.requests] + [expired_line(r, now) for r in e.expired]
    lines = [head, *(f"  ↳ {s}" for s in subs)]
    # ``ref``: the shift change's post offers Take for it (bot/watch/shifts.py).
    message = Message(headline=f"Case `{e.session_id}`", lines=[*lines[:1], *subs], ref=e.session_id)
    return Part(e.session_id, lines, message)


def digest_of(services: Services, actor: str, *, before: datetime | None = None) -> Digest:
    """The hand-off's parts, recorded as one ``handoff`` step (see CaseBook.handoff for ``before``)."""
    d: HandoffDigest = services.decisions.handoff(actor, before=before)
    now = d.at
    out = Digest(head=Message(headline=""))
    for e in d.entries:
        if e.group == NOW:
            out.now.append(_case_part(services, e, now))
        elif e.group == IN_HAND:
            out.in_hand.append(_case_part(services, e, now))
    for r in d.expired:  # its case is closed: the request itself is still handed off once
        line = expired_line(r, now)
        out.now.append(Part(r.id, [line], Message(headline=f"Expired request `{r.id}`", lines=[line])))
    for review in services.decisions.reviews.open_reviews():
        line = review.line(now)
        out.now.append(
            Part(
                review.request_id,
                [line],
                Message(headline=f"Break-glass review `{review.request_id}`", lines=[line], level="warn"),
            )
        )
    if services.bulk is not None:
        out.extra = services.bulk.batches.handoff_messages()
    quiet = d.needing_no_one
    counts = [f"{len(out.now)} need someone now", f"{len(out.in_hand)} in hand"]
    if quiet:
        counts.append(f"{quiet} need no one")
    lines = [f"Audit head: {d.head} (includes this hand-off's own step; before it: {d.head_before})"]
    if quiet:
        lines.append(
            f"{quiet} case(s) need no one now (stops only counted by watch: a storm, a pause or quiet "
            "hours): `/recover cases` lists them."
        )
    out.head = Message(
        headline=f"Hand-off: {len(d.entries)} open case(s) at {isoformat(now)} — {', '.join(counts)}",
        lines=lines,
        kind=KIND,
    )
    return out


def _listed(d: Digest) -> tuple[list[tuple[str, Part]], int]:
    """(group heading, part) for at most :data:`LISTED` parts, needs-someone-now first; how many more."""
    ordered = [("Needs someone now:", p) for p in d.now] + [("In hand:", p) for p in d.in_hand]
    return ordered[:LISTED], max(0, len(ordered) - LISTED)


def handoff_reply(services: Services, actor: str) -> Reply:
    """The digest as one message where it was asked (no line goes to a case's own thread)."""
    d = digest_of(services, actor)
    lines: list[str] = []
    listed, more = _listed(d)
    heading = None
    for group, part in listed:
        if group != heading:
            lines.append(group)
            heading = group
        lines.extend(f"• {line}" if i == 0 else line for i, line in enumerate(part.lines))
    if more:
        lines.append(f"… {more} more: `/recover cases`")
    if not listed:
        lines.append("Nothing needs anyone now.")
    head = Message(headline=d.head.headline, lines=[*lines, *d.head.lines], kind=KIND)
    return Reply([head, *d.extra])


def handoff_parts(
    services: Services, actor: str, before: datetime | None = None
) -> tuple[Message, list[tuple[str, Message]]]:
    """The shift change's head and its parts, each by its key (every listed entry, then the open
    batches): what bot/watch/shifts.py posts and a taker looks for."""
    d = digest_of(services, actor, before=before)
    listed, more = _listed(d)
    head = d.head
    if more:
        head = Message(headline=head.headline, lines=[*head.lines, f"… {more} more: `/recover cases`"], kind=KIND)
    parts = [(p.key, p.message) for _, p in listed]
    parts += [(f"batches{i}", m) for i, m in enumerate(d.extra)]
    return head, parts


def watch_handoff(services: Services) -> Callable[[str, datetime], tuple[Message, list[tuple[str, Message]]]]:
    """The watcher's hand-off source (bot/watch/shifts.py HandoffSource) over these services."""
    return lambda actor, before: handoff_parts(services, actor, before)
