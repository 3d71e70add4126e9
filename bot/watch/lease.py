"""A claimed stop's lease, kept alive while its diagnosis and post still run.

A claim's lease (the runbook's ``watch: claim_lease``) is how a live watcher tells a dead owner's
claim from one still being posted. A diagnosis or a Slack post slower than the lease must not look
dead: while the owner works on it, a thread renews the lease every third of it, so another watcher
never takes the claim over and posts it a second time. Just before the post the owner renews once
more and posts only if the claim is still its own (a stalled owner whose lease ran out meanwhile
leaves the post to the watcher that took it over, which looks for it in the channel first).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from bot.clock import Clock
from bot.watch.store import WatchStore

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews ``owner``'s leases of ``lease`` seconds on :class:`WatchStore` claims while they are held."""

    def __init__(self, saved: WatchStore, *, owner: str, lease: float, clock: Clock) -> None:
        self.saved = saved
        self.owner = owner
        self.lease = lease
        self.clock = clock
        self.every = max(lease / 3.0, 0.05)
        self.renewals = 0

    def renew(self, key: str) -> bool:
        """Renew now; True while the claim is still this owner's and unposted (the fence before a post)."""
        ok = self.saved.renew(key, actor=self.owner, now=self.clock.now(), lease=self.lease)
        if ok:
            self.renewals += 1
        return ok

    @contextmanager
    def held(self, key: str) -> Iterator[None]:
        """Keep the lease of ``key`` renewed until the block ends (posted, failed, or the process died)."""
        done = threading.Event()

        def keep() -> None:
            while not done.wait(self.every):
                try:
                    if not self.renew(key):
                        return  # posted meanwhile, or taken over: nothing left to keep
                except Exception:  # noqa: BLE001 - a locked store: the next round tries again
                    log.exception("watch: renewing the lease of %s failed", key)

        thread = threading.Thread(target=keep, name="recover-watch-lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)
