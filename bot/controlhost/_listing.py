"""One walk over the listing of sessions needing an operator: every page, each session once.

Triage, watch and a batch's recheck all read the listing through :class:`SessionListing`, so the
listing is paged and de-duplicated in one place. A control host (or a proxy or cache in front of it)
may repeat a session, within a page or on a later page (a page boundary that moved while the listing
changed): the first listing of an id is kept and every repeat is dropped, counted in :attr:`repeated`
and logged. Without that, triage counted a session twice, listed it twice in its file, and a batch over
its group could not be made at all (its members are one row per session).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from bot.controlhost._models import Session, SessionPage

log = logging.getLogger("recover_bot.controlhost")

#: How many repeated ids a log line names (the count is always whole).
_NAMED = 5

Fetch = Callable[[str | None, int | None], SessionPage]


class SessionListing:
    """Iterate it for each page's sessions not listed before on this walk (following ``next``).

    ``cursor`` is the cursor of the page asked for last (where a failing page failed), ``pages`` the
    pages read, ``repeated`` the repeats dropped. The walk ends at a page without ``next``, a ``next``
    equal to the cursor just used, or after ``max_pages`` pages.
    """

    def __init__(self, fetch: Fetch, *, limit: int | None = None, max_pages: int = 10_000) -> None:
        self._fetch = fetch
        self.limit = limit
        self.max_pages = max_pages
        self.cursor: str | None = None
        self.pages = 0
        self.repeated = 0
        self._seen: set[str] = set()

    def __iter__(self) -> Iterator[list[Session]]:
        cursor: str | None = None
        for _ in range(self.max_pages):
            self.cursor = cursor
            page = self._fetch(cursor, self.limit)
            self.pages += 1
            yield self._new(page.sessions)
            if not page.next or page.next == cursor:
                return
            cursor = page.next

    def _new(self, sessions: list[Session]) -> list[Session]:
        fresh: list[Session] = []
        repeats: list[str] = []
        for session in sessions:
            if session.id in self._seen:
                repeats.append(session.id)
            else:
                self._seen.add(session.id)
                fresh.append(session)
        if repeats:
            self.repeated += len(repeats)
            # repr: an id from the host cannot forge a log line.
            more = f" and {len(repeats) - _NAMED} more" if len(repeats) > _NAMED else ""
            shown = ", ".join(map(repr, repeats[:_NAMED])) + more
            log.warning(
                "control host listing: page %d repeated %d session(s) already listed (%s); each is counted once",
                self.pages, len(repeats), shown,
            )  # fmt: skip
        return fresh
