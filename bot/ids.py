"""The one id grammar: installation names, the bot's own ids and the text forms that carry both.

A leaf every layer may import (it imports nothing of the bot), so the store, the control-host client,
the decisions, the fronts and the installations configuration share one definition without a cycle:

- an installation's name (:data:`NAME_PATTERN`);
- the bot's own ids: requests ``req_…``, batches ``bat_…``, dry runs ``dry_…``, triages ``t<n>`` and
  their groups ``t<n>.g<k>``, minted here (:func:`new_id`, :func:`group_id`); a named installation's
  carry its name after a dot (``req_3f2a….eu-1``, :func:`qualified_id`), the default installation's
  stay as they always were, so an id alone says where it belongs;
- the ``@`` tag a front appends to a session id or a button's value (``ses_1@eu-1``, :func:`tagged`,
  :func:`split_tag`) and :class:`ScopedId`, an id as one installation's;
- :func:`parse_own_id`, the one parse of a typed or clicked bot id, at the edges.

Session and turn ids are the control host's: the same id names a session in every installation, so
they never carry a suffix, only a tag.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeGuard

#: The name of the one installation today's single-installation settings describe.
DEFAULT_INSTALLATION = "default"

#: The control host's session and turn ids (docs/control-host-api.md): opaque, from this alphabet.
#: Never suffixed (the same id names a session in every installation), only tagged (``ses_1@eu-1``).
HOST_ID_TEXT = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}"
HOST_ID = re.compile(rf"^{HOST_ID_TEXT}$")

#: An installation's name as a pattern to build others from (unanchored).
NAME_TEXT = _NAME = r"[a-z][a-z0-9-]{0,30}"

#: An installation's name: short, lower case, safe inside ids, file names and Slack text.
NAME_PATTERN = re.compile(rf"^{_NAME}$")


#: The suffix a request, batch, dry-run or triage id of a named installation carries: ``req_3f2a….eu-1``.
ID_SUFFIX = re.compile(rf"\.({_NAME})$")


class IdKind(StrEnum):
    """The bot's own kinds of id (what a reply calls one)."""

    REQUEST = "request"
    BATCH = "batch"
    DRYRUN = "dry run"
    TRIAGE = "triage"
    GROUP = "triage group"


REQUEST_PREFIX, BATCH_PREFIX, DRYRUN_PREFIX = "req_", "bat_", "dry_"
_PREFIX = {IdKind.REQUEST: REQUEST_PREFIX, IdKind.BATCH: BATCH_PREFIX, IdKind.DRYRUN: DRYRUN_PREFIX}
_RANDOM_HEX = {IdKind.REQUEST: 16, IdKind.BATCH: 12, IdKind.DRYRUN: 12}

#: Every id the bot mints, with a named installation's suffix (group 1: the kind's prefix or triage
#: number, group 2: a group's number, group 3: the installation).
OWN_ID = re.compile(rf"^(?:((?:req|bat|dry)_)[0-9a-f]+|t(\d+)(?:\.g(\d+))?)(?:\.({_NAME}))?$")

#: A dry-run id as typed after ``--reviewed`` (older ids had any lower-case letters and digits).
DRYRUN_ID = re.compile(rf"^dry_[a-z0-9]{{4,40}}(?:\.{_NAME})?$")


def qualified_id(raw: str, installation: str) -> str:
    """The id as shown and typed: the default installation's ids stay as they always were; another
    installation's carry its name after a dot, so an id alone says where it belongs."""
    return raw if installation == DEFAULT_INSTALLATION else f"{raw}.{installation}"


def installation_of_id(qualified: str) -> str:
    """The installation an id belongs to (``default`` for an id without a suffix): a bot id by its
    grammar (``t7.g1`` is a group of the default's triage), any other key by its suffix."""
    parsed = parse_own_id(qualified)
    if parsed is not None:
        return parsed.installation
    match = ID_SUFFIX.search(qualified)
    return match.group(1) if match else DEFAULT_INSTALLATION


@dataclass(frozen=True)
class OwnId:
    """One of the bot's own ids, parsed: its kind, the id as stored and shown (``text``, suffix
    included) and the installation its suffix names (None: no suffix, the default installation's
    form, which says nothing once ``default`` is not served)."""

    kind: IdKind
    text: str
    suffix: str | None

    @property
    def installation(self) -> str:
        """The installation the id was minted by (``default`` for an id without a suffix)."""
        return self.suffix or DEFAULT_INSTALLATION

    @property
    def triage_id(self) -> str:
        """A triage's or group's triage, as stored (``t7`` / ``t7.eu-1``); '' for other kinds."""
        match = OWN_ID.match(self.text)
        if match is None or match.group(2) is None:
            return ""
        return qualified_id(f"t{match.group(2)}", self.installation)


def parse_own_id(text: str) -> OwnId | None:
    """The bot id ``text`` is, or None for anything else (a session id, a tagged value, garbage)."""
    match = OWN_ID.match(text or "")
    if match is None:
        return None
    prefix, _, group, suffix = match.groups()
    if prefix is not None:
        kind = next(k for k, p in _PREFIX.items() if p == prefix)
    else:
        kind = IdKind.GROUP if group is not None else IdKind.TRIAGE
    return OwnId(kind, text, suffix)


def is_kind(text: str, kind: IdKind) -> bool:
    """True when ``text`` is one of the bot's ids of ``kind`` (by the grammar, not by a lookup)."""
    parsed = parse_own_id(text)
    return parsed is not None and parsed.kind == kind


def is_batch_id(text: str | None) -> TypeGuard[str]:
    """A batch's id (``bat_…``), where a command or button takes a request or a batch."""
    return text is not None and is_kind(text, IdKind.BATCH)


def is_request_id(text: str | None) -> TypeGuard[str]:
    """A request's id (``req_…``)."""
    return text is not None and is_kind(text, IdKind.REQUEST)


def new_id(kind: IdKind, installation: str = DEFAULT_INSTALLATION) -> str:
    """A fresh request, batch or dry-run id of ``installation``: ``req_<16 hex>``, ``bat_<12 hex>``,
    ``dry_<12 hex>``, a named installation's with its suffix."""
    return qualified_id(_PREFIX[kind] + secrets.token_hex(_RANDOM_HEX[kind] // 2), installation)


def triage_id(number: int, installation: str = DEFAULT_INSTALLATION) -> str:
    """A triage's id: ``t7``, a named installation's ``t7.eu-1``."""
    return qualified_id(f"t{number}", installation)


def triage_number(triage: str) -> int:
    """The stored number of a triage id (``t7.eu-1`` -> 7); ValueError for anything else."""
    parsed = parse_own_id(triage)
    if parsed is None or parsed.kind != IdKind.TRIAGE:
        raise ValueError(f"not a triage id: {triage!r}")
    match = OWN_ID.match(triage)
    assert match is not None
    return int(match.group(2))


def group_id(triage: str, index: int) -> str:
    """The ``index``-th group of a triage: ``t7.g2``, ``t7.g2.eu-1`` (the suffix stays last)."""
    parsed = parse_own_id(triage)
    if parsed is None or parsed.kind != IdKind.TRIAGE:
        raise ValueError(f"not a triage id: {triage!r}")
    return qualified_id(f"t{triage_number(triage)}.g{index}", parsed.installation)


#: What a front appends to an id (and a button's value) of a named installation: ``ses_1@eu-1``. No id
#: may contain ``@`` (the runbook's id pattern), so the last one always starts the installation.
TAG = "@"


def tagged(text: str, installation: str) -> str:
    """``text`` as a named installation's front carries it: ``ses_1@eu-1``, ``ses_1|restart@eu-1``."""
    return f"{text}{TAG}{installation}"


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
        return self.id if self.is_default else tagged(self.id, self.installation)


def store_path(db_path: Path, installation: str) -> Path:
    """Each installation's steps, cases and requests live in a store file of their own, so one
    installation's chain can never authorise another's send: the default installation keeps
    ``RECOVER_DB`` itself (today's stores go on as they are), ``eu-1`` gets ``<stem>-eu-1<suffix>``
    beside it. The Slack app's own tables stay in ``RECOVER_DB``."""
    if installation == DEFAULT_INSTALLATION:
        return db_path
    return db_path.with_name(f"{db_path.stem}-{installation}{db_path.suffix}")


__all__ = [
    "BATCH_PREFIX",
    "DEFAULT_INSTALLATION",
    "DRYRUN_ID",
    "DRYRUN_PREFIX",
    "HOST_ID",
    "HOST_ID_TEXT",
    "ID_SUFFIX",
    "NAME_PATTERN",
    "NAME_TEXT",
    "OWN_ID",
    "REQUEST_PREFIX",
    "TAG",
    "IdKind",
    "OwnId",
    "ScopedId",
    "group_id",
    "installation_of_id",
    "is_batch_id",
    "is_kind",
    "is_request_id",
    "new_id",
    "parse_own_id",
    "qualified_id",
    "split_tag",
    "store_path",
    "tagged",
    "triage_id",
    "triage_number",
]
