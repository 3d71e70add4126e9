"""What ``/recover watch`` says: the watcher's state in one line, then its poll times, cursor and counts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.clock import isoformat
from bot.messages import Message, Reply, ref
from bot.watch.state import WatchStatus

#: A cursor is an opaque token of the control host: shown shortened, enough to tell two apart.
CURSOR_SHOWN = 24


def cursor_state(*, complete: bool, pages: int, cursor: str | None, at: datetime) -> dict[str, Any]:
    """Where a poll's paging stood: every page read, or the page it could not read (and its cursor)."""
    return {"complete": complete, "pages": pages, "cursor": cursor, "at": isoformat(at)}


def cursor_text(state: dict[str, Any] | None) -> str:
    """``/recover watch``'s cursor line: the end of the listing after N pages, or where paging stopped."""
    if not state:
        return "no poll yet"
    pages = int(state.get("pages") or 0)
    token = state.get("cursor")
    shown = (token[:CURSOR_SHOWN] + "…" if len(token) > CURSOR_SHOWN else token) if token else "the first page"
    if state.get("complete"):
        return f"end of the listing after {pages} page(s)"
    return f"stopped at page {pages + 1} (cursor {shown}): it failed; the next poll reads every page again"


def poller_text(st: WatchStatus) -> str:
    """One line: which holder polls the listing (one bot polls, the others stand by)."""
    if st.poller is None:
        return "nobody right now (the next poll takes it)"
    if st.polling:
        return f"this bot ({st.poller})"
    return f"another bot ({st.poller}); this one stands by and takes over if that one stops"


def status_reply(st: WatchStatus, channel: str) -> Reply:
    """``/recover watch``: on, paused or failing first, then the poll times, the cursor and the counts."""
    if st.failing_since is not None:
        headline = f"Watch cannot read the listing since {isoformat(st.failing_since)}; it keeps retrying."
        level = "warn"
    elif st.paused:
        until = isoformat(st.paused_until) if st.paused_until else "resumed by hand"
        by = f", by {ref(st.paused_by)}" if st.paused_by else ""
        held = f" {st.held} stop(s) held, posted when it ends." if st.held else " Stops found meanwhile are held."
        headline, level = f"Watch is paused (until {until}{by}).{held}", "warn"
    else:
        headline, level = f"Watch is on: posting new stops to {ref(channel, '#')}.", "ok"
    facts = [
        ("last poll", isoformat(st.last_poll) or "never"),
        ("next poll", st.polls_on or isoformat(st.next_poll) or "—"),
        ("listing cursor", cursor_text(st.cursor)),
        ("seen (last poll)", str(st.seen)),
        ("posted", str(st.posted)),
        ("folded into a storm's triage", str(st.suppressed)),
        ("errors", str(st.errors)),
        ("polled by", poller_text(st)),
    ]
    if st.held:
        facts.append(("held by the pause", str(st.held)))
    if st.counts.get("held"):
        facts.append(("held for the quiet-hours digest", str(st.counts["held"])))
    if st.counts.get("known"):
        facts.append(("already stuck when watching began (known, not posted)", str(st.counts["known"])))
    if st.counts.get("claimed"):
        facts.append(("claimed, post unconfirmed", str(st.counts["claimed"])))
    return Reply.of(Message(headline=headline, level=level, facts=facts))  # type: ignore[arg-type]
