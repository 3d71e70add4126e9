"""Who is on call for a named tier: the interface every on-call source implements.

A tier is named by the id the runbook and ``RECOVER_APPROVERS`` use (a Slack user group ``S…``); a
source says which Slack user ids are on call for it now. It satisfies the core's
:class:`~bot.decisions.ApproverDirectory` (``members``), so the one approver rule uses it unchanged.
A source that cannot answer raises :class:`OnCallUnavailable`, and the approver rule refuses: a
failing directory never makes anyone eligible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from bot.errors import RecoverError


class OnCallUnavailable(RecoverError):
    """The on-call source could not say who is on call (eligibility is refused, never assumed)."""


@dataclass(frozen=True)
class OnCall:
    """Who is on call for ``group_id`` now, as Slack user ids, and where that was read.

    ``unmatched`` names the people the source has on call but could not map to a Slack user: they
    cannot approve until mapped, and the ladder can say so instead of losing them silently. ``dropped``
    counts the entries of the source's answer that belonged to something other than what was asked for
    (another escalation policy): never approvers, counted and logged by the source.
    """

    group_id: str
    source: str
    slack_ids: frozenset[str]
    unmatched: tuple[str, ...] = ()
    dropped: int = 0


class OnCallDirectory(Protocol):
    """An on-call source. Implementations subclass it and write :meth:`on_call`; :meth:`members` is
    the :class:`~bot.decisions.ApproverDirectory` view of it."""

    def on_call(self, group_id: str) -> OnCall:
        """Raises :class:`OnCallUnavailable` when the source cannot answer."""
        ...

    def members(self, group_id: str) -> set[str]:
        return set(self.on_call(group_id).slack_ids)


class RoutedDirectory(OnCallDirectory):
    """Each tier read from the source it is mapped to (``routes``), every other one from ``default``."""

    def __init__(self, default: OnCallDirectory, routes: Mapping[str, OnCallDirectory]) -> None:
        self.default = default
        self.routes = dict(routes)

    def source_for(self, group_id: str) -> OnCallDirectory:
        return self.routes.get(group_id, self.default)

    def on_call(self, group_id: str) -> OnCall:
        return self.source_for(group_id).on_call(group_id)
