"""The ladder's runner: due steps claimed, recorded, posted in the request's thread, exactly once.

``run_due(now)`` is one pass (``serve`` runs it every few seconds on a daemon thread; tests and the
console call it once): expire what is past its expiry (the one expiry rule, ``expire_if_due``), then
for each due row claim it (:meth:`LadderStore.claim`: lease, pending check and chain step in one write
transaction), post it, mark it posted; a dead owner's claim is taken over after looking for its post
in the thread by its key line; then edit the live line of pending requests (at most once per
``live_update`` each; a 429 only pushes the next edit back).

Why no reminder follows a decision (approve, confirm, reject, withdraw, void, expire):

1. A post of step *s* happens only after the claim of *s* committed while the request was pending,
   only after a write transaction just before it fenced the step's lease (``ladder:<request>:<index>``,
   bot/store/leases.py: still this runner's, with its token, and running) and recorded the post
   under its token, and only while the claim's lease has at least ``POST_MARGIN`` left; the poster's one HTTP attempt
   (no retry, no 429 sleep) times out within that margin. So every post ends before its lease ends.
2. A request leaves ``requested``/``recheck`` only through :meth:`RequestStore.transition`, which,
   in the same transaction, refuses while any claim of the request holds an unexpired lease
   (:class:`LadderBusy`) and cancels every unposted row. Claims and transitions take the same write
   lock, so one of them commits first: if the claim did, the transition commits only after its lease
   ended — after the post (1); if the transition did, the claim sees the request ended and cancels.
3. Hence every post precedes the decision's commit. The ending paths first :func:`fence` (hold the
   rows, wait out an in-flight claim) so that (2) refuses only if the hold lapsed meanwhile.

Nothing is lost or said twice: a row is ``posted`` only after Slack answered; a claim whose owner died
(SIGKILL, restart) is taken over once its lease lapsed, and the new owner posts only if the thread has
no message with the step's key line (an unreadable thread: it waits for the next pass). The caveat any
lease has: a process frozen mid-post for longer than the margin (SIGSTOP) could post late. A runner
deposed before its fence (its step taken over with token + 1 while it was paused, or while its clock
lagged) posts nothing and marks nothing: every mark of a row is fenced in its own transaction too.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from bot.decisions._context import BOT, DecisionContext
from bot.decisions._guards import expire_if_due
from bot.decisions._ladder_rows import EXPIRY_INDEX, LEASE_SECONDS, POST_MARGIN
from bot.decisions._requests import DecisionRequest
from bot.escalation import text
from bot.escalation.ladder import PENDING_STATES, eligible_now, next_step, spec_of
from bot.escalation.live import live_message
from bot.escalation.status import who_may_approve
from bot.escalation.store import Claim, LadderStore
from bot.format import duration
from bot.messages import Message
from bot.store.leases import holder_id

log = logging.getLogger("bot.escalation")


class LadderPoster(Protocol):
    """Where the ladder speaks (Slack; the console has none). Every call may fail; none raises but
    :meth:`find`, which raises when the thread cannot be read (so nobody posts blind)."""

    def thread_of(self, request: DecisionRequest) -> tuple[str, str | None] | None:
        """The request's thread (channel, thread ts), or None when it was never posted to Slack."""
        ...

    def post(self, channel: str, message: Message, thread_ts: str | None) -> str | None: ...

    def find(self, channel: str, text: str, thread_ts: str | None) -> str | None: ...

    def request_message(self, request_id: str) -> tuple[str, str] | None:
        """Where the approval request message is (channel, ts), to edit its live line."""
        ...

    def update(self, channel: str, ts: str, message: Message) -> float | None:
        """Edit in place; None when done, else the seconds to wait before the next edit (a 429's
        Retry-After, or the live interval after another failure)."""
        ...


@dataclass
class Pass:
    """What one pass did (tests and the bench count these)."""

    posted: list[tuple[str, int]] = field(default_factory=list)
    found: list[tuple[str, int]] = field(default_factory=list)  # a taken-over step already in the thread
    expired: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    unsaid: list[tuple[str, int]] = field(default_factory=list)  # due, but nowhere to post it: tried again


def owner_id() -> str:
    """The runner's lease holder (bot/store/leases.py): this process of the ladder."""
    return holder_id("escalation")


def _ids(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


class LadderRunner:
    """Runs the ladder of every pending two-person request (see the module docstring)."""

    def __init__(
        self,
        ctx: DecisionContext,
        poster: LadderPoster | None,
        *,
        owner: str | None = None,
        lease: float = LEASE_SECONDS,
        margin: float | None = None,
    ) -> None:
        self.ctx = ctx
        self.poster = poster
        self.rows = LadderStore(ctx.store)
        self.owner = owner or owner_id()
        self.lease = lease
        # Post only with this much of the lease left (the poster's one attempt times out within it).
        self.margin = POST_MARGIN if margin is None and lease == LEASE_SECONDS else (margin or lease * 2 / 3)
        self.stopping = threading.Event()

    # -- one pass ------------------------------------------------------------------------------

    def run_due(self, now: datetime | None = None) -> Pass:
        done = Pass()
        if self.ctx.runbooks.escalation is None:
            return done
        for req in self.ctx.requests.find(states=PENDING_STATES):
            updated = expire_if_due(self.ctx, req, BOT)  # the one expiry rule; its announcement is a row
            if updated is not None:
                done.expired.append(req.id)
                self._edit(req.id, updated)
        for request_id, index in self.rows.due(now or self.ctx.now()):
            self._one(request_id, index, done)
        self._live(done)
        return done

    def inputs_for(self, req: DecisionRequest, index: int, now: datetime) -> dict[str, object]:
        """What the step's chain step records: whom a mention names, whom a widening makes eligible."""
        spec = spec_of(self.ctx, req)
        if index == EXPIRY_INDEX or spec is None or index >= len(spec.steps):
            return {}
        step = spec.steps[index]
        if step.kind == "widen":
            return {"groups": list(step.groups)}
        if step.kind == "mention":
            return {"mentions": list(eligible_now(self.ctx, req, now).ids)}
        return {}

    def _one(self, request_id: str, index: int, done: Pass) -> None:
        req = self.ctx.requests.get(request_id)
        if req is None:
            return
        if self._nowhere(req, index):
            # Not claimed (no chain step each pass) and never marked posted: a step nobody saw does not
            # count towards the ladder's end, so it cannot open break-glass; the next pass retries.
            if self.rows.unsaid(request_id, index):
                log.warning(
                    "escalation: step %s of request %s has nowhere to be posted (no thread of the "
                    "request found); it is tried again every pass, and break-glass stays closed",
                    index,
                    request_id,
                )
            done.unsaid.append((request_id, index))
            return
        now = self.ctx.now()
        claim = self.rows.claim(
            request_id, index, owner=self.owner, now=now, lease=self.lease, inputs=self.inputs_for(req, index, now)
        )
        if isinstance(claim, Claim):
            self._say(claim, done)

    def _nowhere(self, req: DecisionRequest, index: int) -> bool:
        """A pending request's ladder step that the front (a poster) has no thread for. Without a poster
        (the console) the chain and ``pending`` are where a step is said; the expiry's announcement and
        an ended request's rows take the usual path (posted or cancelled)."""
        if self.poster is None or index == EXPIRY_INDEX or req.state not in PENDING_STATES:
            return False
        return self.poster.thread_of(req) is None

    def say_now(self, claim: Claim, done: Pass) -> Message | None:
        """Post a step claimed now (``remind``); with nowhere to post it, the message to reply with."""
        req = self.ctx.requests.get(claim.request_id)
        assert req is not None
        where = self.poster.thread_of(req) if self.poster is not None else None
        if where is None:
            if claim.index >= 0 and not (claim.inputs or {}).get("instead"):
                self.rows.posted(claim, None, self.ctx.now())
            return self._message(req, claim, dict(claim.inputs or {}), self.ctx.now())
        self._say(claim, done)
        return None

    def _say(self, claim: Claim, done: Pass) -> None:
        """Post a claimed step (a taken-over one only if its key is not in the thread yet)."""
        req = self.ctx.requests.get(claim.request_id)
        assert req is not None
        inputs = dict(claim.inputs or self.rows.claimed_inputs(claim.request_id, claim.index))
        instead = bool(inputs.get("instead"))
        poster = self.poster
        where = poster.thread_of(req) if poster is not None else None
        if poster is None or where is None:
            if claim.ended:
                self.rows.cancel(claim)
            elif poster is not None and claim.index != EXPIRY_INDEX and not instead:
                self.rows.unclaim(claim)  # the thread is gone since the claim: said nowhere, so not posted
                done.unsaid.append((claim.request_id, claim.index))
            elif not instead:
                self.rows.posted(claim, None, self.ctx.now())  # no front: the chain and `pending` say it
            return
        channel, thread_ts = where
        if claim.taken_over:
            try:
                found = poster.find(channel, text.key_line(claim.request_id, claim.index), thread_ts)
            except Exception:  # noqa: BLE001 - an unreadable thread: never post blind; the lease lapses again
                log.exception("escalation: cannot look for step %s#%s in its thread", claim.request_id, claim.index)
                return
            if found is not None:
                if self.rows.posted(claim, found, self.ctx.now()):
                    done.found.append((claim.request_id, claim.index))
                return
            if claim.ended:
                self.rows.cancel(claim)  # never said, and its request has ended: it never will be
                return
        now = self.ctx.now()
        if (claim.lease_until - now).total_seconds() < self.margin:
            return  # too late to post within the lease: a live runner takes it over (module docstring, 1)
        message = self._message(req, claim, inputs, now)
        if not self.rows.posting(claim):
            return  # deposed (a fenced lease): the runner that took the step over with token + 1 posts it
        ts = poster.post(channel, message, thread_ts)
        if ts is None:
            return  # Slack did not answer: the lease lapses, a runner looks in the thread and posts
        if not instead and not self.rows.posted(claim, ts, self.ctx.now()):
            return  # deposed after the post: the taker finds it in the thread by its key line
        done.posted.append((claim.request_id, claim.index))

    @staticmethod
    def _message(req: DecisionRequest, claim: Claim, inputs: dict[str, object], now: datetime) -> Message:
        if claim.kind == "expired":
            return text.expired(req, claim.index)
        if inputs.get("instead"):  # a remind's mention in place of a widening: its own key
            return text.mention(req, f"{claim.index}-remind-{inputs.get('at', '')}", _ids(inputs.get("mentions")), now)
        if claim.kind == "mention":
            return text.mention(req, claim.index, _ids(inputs.get("mentions")), now)
        if claim.kind == "widen":
            return text.widened(req, claim.index, _ids(inputs.get("groups")), now)
        return text.reminder(req, claim.index, now)

    # -- the live line ---------------------------------------------------------------------------

    def _live(self, done: Pass) -> None:
        spec = self.ctx.runbooks.escalation
        if spec is None or self.poster is None:
            return
        for req in self.ctx.requests.find(states=PENDING_STATES):
            now = self.ctx.now()
            if spec_of(self.ctx, req) is None or self.poster.request_message(req.id) is None:
                continue
            if not self.rows.claim_live(req.id, now, spec.live_update_seconds):
                continue
            if self._edit(
                req.id, live_message(self.ctx, req, self._live_text(req, now)), interval=spec.live_update_seconds
            ):
                done.edited.append(req.id)

    def _live_text(self, req: DecisionRequest, now: datetime) -> str:
        nxt = next_step(self.ctx, req)
        if nxt is None:
            upcoming = "none (the ladder ran to its end)"
        else:
            _i, step, at = nxt
            left = max(0.0, ((at or now) - now).total_seconds())
            upcoming = f"{step.kind} in {duration(left)}"
        return text.live_line(req, who_may_approve(self.ctx, req, now), upcoming, now)

    def _edit(self, request_id: str, message: Message, *, interval: float | None = None) -> bool:
        if self.poster is None:
            return False
        where = self.poster.request_message(request_id)
        if where is None:
            return False
        wait = self.poster.update(where[0], where[1], message)
        if interval is not None and wait is not None and wait > interval:
            # A 429 pushes the next edit back by its Retry-After; a decision is never waited for.
            self.rows.live_edited(request_id, self.ctx.now(), wait)
        return wait is None

    # -- serve ---------------------------------------------------------------------------------

    def run(self, every: float = 2.0) -> None:
        """``serve``: a pass every ``every`` seconds until :attr:`stopping` is set (errors are logged)."""
        stop = self.stopping
        while not stop.is_set():
            try:
                self.run_due()
            except Exception:  # noqa: BLE001 - one bad pass must not end the ladder
                log.exception("escalation: a pass failed")
            stop.wait(every)
