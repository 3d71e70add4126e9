"""The watcher's leases: its holder name and ``claim_lease``, over the store's one lease mechanism.

A claim's lease (the runbook's ``watch: claim_lease``; jobs ``watch:<stop key>`` and
``handoff:<time>``, bot/store/leases.py) is how a live watcher tells a dead owner's claim from one
still being posted. A diagnosis or a Slack post slower than the lease must not look dead: while the
owner works on it, :meth:`Leases.held` renews it every third of it, so another watcher never takes it
over and posts it a second time. Just before each post the owner fences the lease and records the post
under its token (:meth:`LeaseKeeper.posting`), and the mark after it is fenced again: an owner deposed
meanwhile (its claim taken over with token + 1) posts and marks nothing, and the taker looks for the
post in the channel first. Nothing here keeps leases itself; it only names the holder and the TTL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from bot.store import Store
from bot.store.leases import Lease, LeaseHolding, holder_id

#: The watcher's role in its lease holder names (``watch:host:pid:…``) and in its steps.
ROLE = "watch"


class LeaseKeeper:
    """``owner``'s leases of ``lease`` seconds on the watcher's jobs (stops, hand-offs, the poll)."""

    def __init__(self, store: Store, *, lease: float, owner: str | None = None) -> None:
        self.store = store
        self.owner = owner or holder_id(ROLE)
        self.lease = lease
        self.every: float | None = None  # renew this often (None: every third of the lease)
        self.renewals = 0

    @contextmanager
    def held(self, lease: Lease | None, *, ttl: float | None = None) -> Iterator[LeaseHolding | None]:
        """Keep ``lease`` renewed until the block ends. Not released at the end: a claim whose post
        failed stays its holder's until the lease runs out, then a live watcher takes it over."""
        if lease is None:
            yield None
            return
        with self.store.leases.held(lease, ttl or self.lease, release=False, every=self.every) as holding:
            try:
                yield holding
            finally:
                self.renewals += holding.renewals

    def posting(self, lease: Lease | None, what: str) -> bool:
        """The fence just before a post (bot/store/leases.py ``posting``): False when deposed."""
        return lease is None or self.store.leases.posting(lease, what)
