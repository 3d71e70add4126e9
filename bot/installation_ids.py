"""Installation names and the ids that carry them: a leaf every layer may import.

The store, the control-host client and the decisions stamp and check the installation; the
configuration (bot/installations/) builds on them. Keeping the name rules here, importing nothing of
the bot, lets both depend on one definition without a cycle between the packages.
"""

from __future__ import annotations

import re
from pathlib import Path

#: The name of the one installation today's single-installation settings describe.
DEFAULT_INSTALLATION = "default"

#: An installation's name: short, lower case, safe inside ids, file names and Slack text.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


#: The suffix a request, batch or dry-run id of a named installation carries: ``req_3f2a….eu-1``.
ID_SUFFIX = re.compile(r"\.([a-z][a-z0-9-]{0,30})$")


def qualified_id(raw: str, installation: str) -> str:
    """The id as shown and typed: the default installation's ids stay as they always were; another
    installation's carry its name after a dot, so an id alone says where it belongs."""
    return raw if installation == DEFAULT_INSTALLATION else f"{raw}.{installation}"


def installation_of_id(qualified: str) -> str:
    """The installation an id belongs to (``default`` for an id without a suffix)."""
    match = ID_SUFFIX.search(qualified)
    return match.group(1) if match else DEFAULT_INSTALLATION


def store_path(db_path: Path, installation: str) -> Path:
    """Each installation's steps, cases and requests live in a store file of their own, so one
    installation's chain can never authorise another's send: the default installation keeps
    ``RECOVER_DB`` itself (today's stores go on as they are), ``eu-1`` gets ``<stem>-eu-1<suffix>``
    beside it. The Slack app's own tables stay in ``RECOVER_DB``."""
    if installation == DEFAULT_INSTALLATION:
        return db_path
    return db_path.with_name(f"{db_path.stem}-{installation}{db_path.suffix}")


__all__ = [
    "DEFAULT_INSTALLATION",
    "ID_SUFFIX",
    "NAME_PATTERN",
    "installation_of_id",
    "qualified_id",
    "store_path",
]
