"""The session ids a mistyped one was probably meant to be, from what the bot knows.

Why: at 3 a.m. ``ses_restore_transiet`` is one letter from the session on the alert. A reply that
only says "no such session" and then repeats the wrong id in its next steps sends the person round in
a circle; the ids nearest to it among the open cases and the host's list of sessions needing an
operator (``recovery_required``) are most likely what was meant.
"""

from __future__ import annotations

import logging

from bot.controlhost import ControlHostClient
from bot.errors import ControlHostError
from bot.runbook.suggest import nearest
from bot.store import Store

log = logging.getLogger("recover_bot.diagnosis")

#: The host's listing read for candidates: a few pages at most (one GET each), only after a 404.
LISTING_PAGE = 200
LISTING_PAGES = 5


def known_session_ids(client: ControlHostClient, store: Store) -> list[str]:
    """The open cases' sessions, then the host's sessions needing an operator (what it could list)."""
    known = [case.session_id for case in store.list_open_cases()]
    try:
        for page in client.listing(limit=LISTING_PAGE, max_pages=LISTING_PAGES):
            known.extend(session.id for session in page)
    except ControlHostError as exc:  # a suggestion is a help, never a second failure
        log.info("no listing for a did-you-mean: %s", exc)
    return list(dict.fromkeys(known))


def near_session_ids(session_id: str, client: ControlHostClient, store: Store) -> list[str]:
    """The known session ids nearest to ``session_id`` (nearest first; none when none is near)."""
    return nearest(session_id, known_session_ids(client, store))
