"""Installation names and the ids that carry them: a leaf every layer may import.

The store, the control-host client and the decisions stamp and check the installation; the
configuration (bot/installations/) builds on them. Keeping the name rules here, importing nothing of
the bot, lets both depend on one definition without a cycle between the packages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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


#: What a front appends to an id (and a button's value) of a named installation: ``ses_1@eu-1``. No id
#: may contain ``@`` (the runbook's id pattern), so the last one always starts the installation.
TAG = "@"


def split_tag(text: str) -> tuple[str, str | None]:
    """``(id, installation)`` of a tagged text form; ``(text, None)`` when it carries no valid tag."""
    head, sep, tail = text.rpartition(TAG)
    if sep and NAME_PATTERN.fullmatch(tail):
        return head, tail
    return text, None


@dataclass(frozen=True)
class ScopedId:
    """A session, request or batch id as one installation's: what a front remembers about it (its
    case's thread, where a message about it lives) is keyed by this, never by the bare id, because
    eu-1's ``ses_1`` is not us-1's. The default installation's key is the bare id, exactly as the rows
    written before an installations file existed; a named installation's always carries its name, so a
    lookup for it can never fall through to the default's rows or to another installation's."""

    installation: str
    id: str

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.installation):
            raise ValueError(f"not an installation name: {self.installation!r}")
        if not self.id or TAG in self.id:
            raise ValueError(f"not an id: {self.id!r}")

    @classmethod
    def of(cls, raw: str, installation: str | None) -> ScopedId:
        """``raw`` of ``installation`` (None: the default's, as a message of a single-installation bot)."""
        return cls(installation or DEFAULT_INSTALLATION, raw)

    @property
    def is_default(self) -> bool:
        return self.installation == DEFAULT_INSTALLATION

    @property
    def key(self) -> str:
        """The text form stored by a front: ``ses_1`` for the default, ``ses_1@eu-1`` otherwise."""
        return self.id if self.is_default else f"{self.id}{TAG}{self.installation}"


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
    "TAG",
    "ScopedId",
    "installation_of_id",
    "qualified_id",
    "split_tag",
    "store_path",
]
