"""What a front end needs of the router (``bot.app.fleet_router.FleetRouter`` satisfies it).

Declared in the core, beside the router and apart from it, so both front ends type-check against one
interface without importing each other or the router's dependencies, and tests can drive them with
the real router.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from bot.buttons import DecisionChoice
from bot.messages import Message, Reply, Reporter
from bot.runbook.usage import FormField


@dataclass(frozen=True)
class Completions:
    """The words Tab completes in the console, read from the runbook: each subcommand with its flags
    (``--reason``), the decisions, and which subcommands take a decision."""

    commands: dict[str, list[str]] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)
    takes_decision: frozenset[str] = frozenset()


class RouterProtocol(Protocol):
    """One entry point for text commands and button actions; every rule is enforced behind it."""

    def startup(self, reporter: Reporter) -> Reply:
        """Finish what a previous run left half-done (replays, approved requests)."""
        ...

    def handle_text(self, text: str, *, actor: str, channel: str | None, reporter: Reporter) -> Reply: ...

    def handle_action(
        self,
        action: str,
        value: str,
        *,
        actor: str,
        channel: str | None,
        reporter: Reporter,
        form: dict[str, str] | None = None,
    ) -> Reply: ...

    def help_text(self) -> str: ...

    def decision_form(self, decision: str) -> list[FormField]: ...

    def decision_choice(self, value: str) -> DecisionChoice:
        """A decision button's value parsed strictly (``bot.buttons.BadButtonValue`` when it is not ours)."""
        ...

    def session_of(self, text: str) -> str | None: ...

    def open_cases_view(self) -> list[Message]: ...

    def pending_approvals_view(self) -> list[Message]: ...

    def expire_due(self) -> list[Message]: ...

    def completions(self) -> Completions: ...

    def now(self) -> str:
        """The core's clock, as the store writes times."""
        ...

    def withdraw_interrupted(self, actor: str, since: str) -> list[Message]: ...

    def left_waiting(self, actor: str, since: str) -> list[Message]: ...

    def waiting_count(self, actor: str, since: str) -> int: ...
