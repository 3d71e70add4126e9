"""What ``/recover watch`` says: the watcher's state in one line, then its poll times and counts."""

from __future__ import annotations

from bot.clock import isoformat
from bot.messages import Message, Reply
from bot.watch.state import WatchStatus


def status_reply(st: WatchStatus, channel: str) -> Reply:
    """``/recover watch``: on, paused or failing first, then the poll times and the counts."""
    if st.failing_since is not None:
        headline = f"Watch cannot read the listing since {isoformat(st.failing_since)}; it keeps retrying."
        level = "warn"
    elif st.paused:
        until = isoformat(st.paused_until) if st.paused_until else "resumed by hand"
        headline, level = f"Watch is paused (until {until}).", "warn"
    else:
        headline, level = f"Watch is on: posting new stops to <#{channel}>.", "ok"
    facts = [
        ("last poll", isoformat(st.last_poll) or "never"),
        ("next poll", isoformat(st.next_poll) or "—"),
        ("seen (last poll)", str(st.seen)),
        ("posted", str(st.posted)),
        ("suppressed (paused or in a storm)", str(st.suppressed)),
        ("errors", str(st.errors)),
    ]
    if st.counts.get("held"):
        facts.append(("held for the quiet-hours digest", str(st.counts["held"])))
    if st.counts.get("claimed"):
        facts.append(("claimed, post unconfirmed", str(st.counts["claimed"])))
    return Reply.of(Message(headline=headline, level=level, facts=facts))  # type: ignore[arg-type]
