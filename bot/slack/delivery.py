"""Where a reply goes in Slack: the case's thread, one progress message, approval requests in place.

One :class:`SlackReporter` serves one command or click. It is the core's
:class:`bot.messages.Reporter` while the router runs (``progress`` edits one message with chat.update,
``post`` adds to the thread) and then delivers the final :class:`bot.messages.Reply`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.ids import ScopedId, is_batch_id
from bot.messages import Message, Reply
from bot.slack.blocks import escape, mention
from bot.slack.state import Location, SlackState
from bot.slack.web import SlackOut

# Messages about many sessions that go to the channel even without a case thread.
CHANNEL_KINDS = ("triage",)
PROGRESS_MIN_INTERVAL = 1.0  # chat.update is rate limited (tier 3); the final answer always lands.


class ThreadBook:
    """Finds or starts the one thread of a session's case (a lock per session: one root only)."""

    def __init__(self, state: SlackState, out: SlackOut) -> None:
        self.state = state
        self.out = out
        self._locks: dict[ScopedId, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, session: ScopedId) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(session, threading.Lock())

    def thread_for(self, session: ScopedId, channel: str | None, actor: str | None) -> Location | None:
        with self._lock(session):
            found = self.state.thread_of(session)
            if found is not None or channel is None:
                return found
            who = f" · started by {mention(actor)}" if actor else ""
            what = "Batch" if is_batch_id(session.id) else "Recovery case for session"
            # The root names the installation as every reply does (``[eu-1]``) and the id as a person types
            # it: two installations' cases of one session id in one channel are two threads a reader tells
            # apart, and no internal key (``ses_1@eu-1``) is shown.
            named = "" if session.is_default else f"[{session.installation}] "
            root = self.out.post_text(Location(channel), f":toolbox: *{named}{what} `{escape(session.id)}`*{who}")
            if root is None:
                return None
            where = Location(channel, root)
            self.state.remember_thread(session, where)
            return where


@dataclass
class Origin:
    """Where the command or click came from."""

    actor: str
    channel: str | None
    thread_ts: str | None = None
    response_url: str | None = None
    session_id: str | None = None
    ephemeral_reply: bool = False


class SlackReporter:
    """The core's Reporter for one piece of work, and the delivery of its final reply."""

    def __init__(
        self,
        out: SlackOut,
        threads: ThreadBook,
        origin: Origin,
        *,
        on_posted: Callable[[], None] | None = None,
    ) -> None:
        self.out = out
        self.threads = threads
        self.origin = origin
        self._progress: tuple[str, str] | None = None
        self._progress_at = 0.0
        self._lock = threading.Lock()
        self._on_posted = on_posted
        self._asked = time.monotonic()

    # -- where ---------------------------------------------------------------------------------

    def _where(self, message: Message) -> Location | None:
        session_id = message.session_id or self.origin.session_id
        if message.kind in CHANNEL_KINDS and self.origin.channel and not message.session_id:
            # A triage summary is for the whole channel, updated in place (it has no case thread).
            return Location(self.origin.channel, self.origin.thread_ts)
        if session_id:
            # eu-1's ses_1 is not us-1's: the thread is the installation's (the ladder reads the same key)
            session = ScopedId.of(session_id, message.installation)
            where = self.threads.thread_for(session, self.origin.channel, self.origin.actor)
            if where is not None:
                return where
        if self.origin.channel and (self.origin.thread_ts or not self.origin.response_url):
            return Location(self.origin.channel, self.origin.thread_ts)
        return None

    # -- Reporter ------------------------------------------------------------------------------

    def progress(self, message: Message) -> None:
        """Edit this work's one progress message (post it the first time)."""
        with self._lock:
            now = time.monotonic()
            if self._progress is not None and now - self._progress_at < PROGRESS_MIN_INTERVAL:
                return
            self._progress_at = now
            if self._progress is not None:
                channel, ts = self._progress
                if self.out.update(channel, ts, message):
                    return
            where = self._where(message)
            if where is None:
                return
            ts_new = self.out.post(where, message)
            if ts_new:
                self._progress = (where.channel, ts_new)

    def rate_limited_for(self) -> float | None:
        """Retry-After of a 429 Slack answered since the last time this was asked (a long job's
        progress throttle widens its interval and says so; the work itself is not slowed)."""
        since, self._asked = self._asked, time.monotonic()
        return self.out.rate_limited_since(since)

    def post(self, message: Message) -> None:
        """A new message in the case's thread (or an in-place update of a tracked one)."""
        self._deliver(message, reuse_progress=False)

    # -- final reply ---------------------------------------------------------------------------

    def finish(self, reply: Reply) -> None:
        """Deliver the reply: the first message replaces the progress message, the rest follow."""
        for i, message in enumerate(reply.messages):
            self._deliver(message, reuse_progress=(i == 0))
        if reply.messages and self._on_posted is not None:
            self._on_posted()

    def _deliver(self, message: Message, *, reuse_progress: bool) -> None:
        tracked = message.ref is not None and message.kind != "text"
        ref = ScopedId.of(message.ref, message.installation) if message.ref is not None else None
        if message.said_once and ref is not None:
            self._say_once(message, ref, reuse_progress=reuse_progress)
            return
        if tracked:
            assert ref is not None
            known = self.threads.state.ref_location(message.kind, ref)
            if known is not None and self.out.update(known[0], known[1], message):
                return
        progress: tuple[str, str] | None = None
        if reuse_progress:
            with self._lock:
                progress, self._progress = self._progress, None
        where = self._where(message)
        if where is None and progress is None:
            if self.origin.response_url:
                self.out.respond(self.origin.response_url, message, ephemeral=self.origin.ephemeral_reply)
            return
        # Long output goes up as a file in the same thread; if that fails, a truncated preview.
        uploaded = False
        if message.attachment is not None and where is not None:
            uploaded = self.out.upload(where, message.attachment)
        if progress is not None and self.out.update(progress[0], progress[1], message, attachment_uploaded=uploaded):
            ts: str | None = progress[1]
            channel = progress[0]
        elif where is not None:
            ts = self.out.post(where, message, attachment_uploaded=uploaded)
            channel = where.channel
        else:
            return
        if ts and tracked:
            assert ref is not None
            self.threads.state.remember_ref(message.kind, ref, channel, ts)

    def _say_once(self, message: Message, ref: ScopedId, *, reuse_progress: bool) -> None:
        """A message said once (``said_once``: a request's first showing, its result): posted by whichever
        delivery claims it first — this reply, or a look at what a dead worker recorded and never said
        (bot/slack/unsaid.py) — and dropped by the others, never updated by them."""
        state = self.threads.state
        if state.ref_location(message.kind, ref) is not None:
            return  # said (a read: most offers a look makes were said by their reply)
        progress: tuple[str, str] | None = None
        if reuse_progress:
            with self._lock:
                progress, self._progress = self._progress, None
        where = self._where(message)
        channel = progress[0] if progress is not None else where.channel if where is not None else None
        if channel is None:
            if self.origin.response_url:  # no thread to say it in: the person who asked is told
                self.out.respond(self.origin.response_url, message, ephemeral=self.origin.ephemeral_reply)
            return
        if not state.claim_ref(message.kind, ref, channel):
            return  # said, or being said, by another delivery
        ts: str | None = None
        if progress is not None and self.out.update(progress[0], progress[1], message):
            ts = progress[1]
        elif where is not None:
            channel, ts = where.channel, self.out.post(where, message)
        if ts:
            state.remember_ref(message.kind, ref, channel, ts)
        else:
            state.release_ref(message.kind, ref)  # Slack refused it: a later offer may say it

    def error(self, message: Message) -> None:
        """An error only the actor needs to see: ephemeral, never in the shared thread."""
        if self.origin.response_url and self.out.respond(self.origin.response_url, message, ephemeral=True):
            return
        if self.origin.channel:
            self.out.ephemeral(self.origin.channel, self.origin.actor, message)
