"""The runbook schema (pydantic v2) and the loaded set of runbooks.

Each YAML file validates against :class:`RunbookFile`; :class:`RunbookSet` merges the files and offers
the accessors the rest of the bot uses (limits, decisions, commands, reconciler and Docker settings).
Everything here is data: which branch applies, which decision is valid, which approval a decision needs
and every duration come from YAML, never from Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, field_validator

from bot.runbook.conditions import Cond
from bot.runbook.escalation import EscalationSpec
from bot.runbook.installation import (
    ApiSpec,
    DockerSpec,
    HandoffSpec,
    IdsSpec,
    LimitSpec,
    ReconcilerSpec,
    WatchSectionSpec,
    WorkerSpec,
)
from bot.runbook.values import COMMAND_NAME, Duration, Model, Regex, Text, YamlValue
from bot.runbook.vocabulary import STEP_KINDS
from bot.vocab import Policy, StepKind


class TextVariant(Model):
    """One alternative of a conditional text: shown when ``when`` is surely true (no ``when``: always).

    Wording that depends on the facts (e.g. what ``start_fresh`` drops: a checkpoint's context, or
    nothing after STARTUP_FAILED, R2.14) is data too: a list of variants, the first that holds wins.
    """

    when: YamlValue = None
    text: Text
    _cond: Cond | None = PrivateAttr(default=None)

    @property
    def condition(self) -> Cond | None:
        return self._cond


#: A template, or conditional variants of it (first whose ``when`` holds).
Texts = Text | list[TextVariant]


# --- commands ----------------------------------------------------------------------------------------


class ArgSpec(Model):
    """A positional argument. ``pattern`` may contain ``{ids}`` (the runbook's id pattern)."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    help: str = ""
    pattern: Regex | None = None
    choices: Literal["decisions", "commands"] | None = None
    required: bool = True
    rest: bool = False


class FlagSpec(Model):
    """A ``--flag``: with a value or a plain switch; required always or only for some decisions."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$")]
    help: str = ""
    value: bool = True
    pattern: Regex | None = None
    required: bool = False
    required_for: list[str] = Field(default_factory=list)


class CommandSpec(Model):
    """A subcommand of ``/recover``: which Python step kind runs it, its grammar and its help."""

    name: str
    kind: StepKind
    usage: Text
    help: Text
    example: Text
    args: list[ArgSpec] = Field(default_factory=list)
    flags: list[FlagSpec] = Field(default_factory=list)
    channel_restricted: bool = False
    rules: list[str] = Field(default_factory=list)
    text: str | None = None
    checklist: list[str] = Field(default_factory=list)
    source: str = ""  # the file it came from (set by the loader)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not COMMAND_NAME.match(value):
            raise ValueError(f"bad subcommand name {value!r}: lower-case words, e.g. 'dryrun decide'")
        return value

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: object) -> object:
        if value not in STEP_KINDS:
            raise ValueError(f"unknown step kind {value!r} (known: {', '.join(sorted(STEP_KINDS))})")
        return value

    def flag(self, name: str) -> FlagSpec | None:
        return next((f for f in self.flags if f.name == name), None)


# --- branches ----------------------------------------------------------------------------------------


class NoteSpec(Model):
    """A line of explanation shown only when its condition holds (e.g. the R3.5 reading of the stages)."""

    when: YamlValue
    text: Text
    rules: list[str] = Field(default_factory=list)
    _cond: Cond | None = PrivateAttr(default=None)


class BranchSpec(Model):
    """One diagnosis branch: the facts that select it, what it means and which decisions fit."""

    id: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    title: Text
    when: YamlValue = None
    fallback: bool = False
    explanation: Texts
    notes: list[NoteSpec] = Field(default_factory=list)
    rules: list[str] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    not_advised: dict[str, str] = Field(default_factory=dict)
    # What a valid decision does here, shown next to it (e.g. close on a resumable session, R3.9).
    consequences: dict[str, str] = Field(default_factory=dict)
    next: list[str] = Field(default_factory=list)
    show_facts: list[str] = Field(default_factory=list)
    _cond: Cond | None = PrivateAttr(default=None)

    @property
    def condition(self) -> Cond | None:
        return self._cond


# --- decisions ---------------------------------------------------------------------------------------


class RequestSpec(Model):
    """The API call. Body values: ``const:<v>``, ``flag:<name>``, ``fact:<name>``, ``arg:<name>``."""

    method: Literal["POST", "PUT", "PATCH", "DELETE"]
    path: Text
    body: dict[str, str] = Field(default_factory=dict)
    optional: list[str] = Field(default_factory=list)  # body fields left out when their source is empty


class ApprovalSpec(Model):
    policy: str | None = None
    expires: Duration | None = None
    confirm_text: Texts | None = None


class PreconditionSpec(Model):
    """An acceptance check, in the API's order: when ``require`` fails the API would answer ``code``."""

    id: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    require: YamlValue
    status: int = 409
    code: Annotated[str, Field(pattern=r"^[A-Z][A-Z_]*$")]
    reason: Texts
    rules: list[str] = Field(default_factory=list)
    _cond: Cond | None = PrivateAttr(default=None)


class NextStepSpec(Model):
    when: YamlValue = None
    say: Text
    suggest: list[str] = Field(default_factory=list)
    rules: list[str] = Field(default_factory=list)
    _cond: Cond | None = PrivateAttr(default=None)


class WaitSpec(Model):
    """A bounded wait: try every ``every`` (a limit name) for up to ``up_to`` (a limit name); with
    ``max_every`` the interval doubles up to that limit."""

    every: str
    up_to: str
    max_every: str | None = None


class OnErrorSpec(Model):
    advice: Text
    rules: list[str] = Field(default_factory=list)
    wait: WaitSpec | None = None


class WatchSpec(Model):
    """After acceptance the case stays open, *verifying* (R5.1, R5.2): the session is re-read every
    ``every`` (a limit name) until recovery is observed or it fails again; ``window`` (a limit name) is
    the worker's start-up window: past it with no ready report the case says so once and stays open
    (time passing is never recovery, R5.1)."""

    every: str
    window: str


class VerifySpec(Model):
    """What to check after the decision was accepted (R5.1) and what to do next (R3.12)."""

    report: list[str] = Field(default_factory=list)
    next: list[NextStepSpec] = Field(default_factory=list)
    rules: list[str] = Field(default_factory=list)
    watch: WatchSpec | None = None


class DecisionSpec(Model):
    """A recovery decision (or resume): its API call, approval policy, preconditions and checks."""

    title: Text
    summary: Text
    command: str
    decidable: bool = True
    request: RequestSpec
    approval: ApprovalSpec | None = None
    irreversible: bool = False
    drops: Texts | None = None
    warning: Texts | None = None
    # What it does, shown next to it when diagnose lists it as valid (a branch may say it better).
    consequence: Texts | None = None
    # R3.9/R3.10: a request made before the worker was confirmed gone is sent only after its
    # requester or approver re-checks the effects account (``/recover confirm``) once it is gone.
    effects_recheck: bool = False
    rules: list[str] = Field(default_factory=list)
    diagnose_flags: dict[str, str] = Field(default_factory=dict)
    preconditions: list[PreconditionSpec] = Field(default_factory=list)
    verify: VerifySpec = Field(default_factory=VerifySpec)
    on_error: dict[str, OnErrorSpec] = Field(default_factory=dict)
    repeat_threshold: int | None = Field(default=None, ge=1)
    repeat_warning: str | None = None
    name: str = ""  # set by the loader

    @property
    def policy(self) -> Policy:
        """The approval policy (the loader refuses a decision without a known one)."""
        assert self.approval is not None and self.approval.policy is not None
        return Policy(self.approval.policy)


class RunbookFile(Model):
    """One runbook YAML file."""

    version: Literal[1]
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$")]
    title: Text
    description: str = ""
    order: int = 100  # files merge (subcommands, branches) by this, then by file name
    rules: dict[str, Text] = Field(default_factory=dict)
    ids: IdsSpec | None = None
    commands: list[CommandSpec] = Field(default_factory=list)
    branches: list[BranchSpec] = Field(default_factory=list)
    decisions: dict[str, DecisionSpec] = Field(default_factory=dict)
    limits: dict[str, LimitSpec] = Field(default_factory=dict)
    reconciler: ReconcilerSpec | None = None
    workers: WorkerSpec | None = None
    docker: DockerSpec | None = None
    api: ApiSpec | None = None
    watch: WatchSectionSpec | None = None
    handoff: HandoffSpec | None = None
    escalation: EscalationSpec | None = None


# --- the loaded set ----------------------------------------------------------------------------------


@dataclass
class RunbookSet:
    """Every loaded runbook merged: what the rest of the bot reads (never the YAML directly)."""

    files: list[Path] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    rules: dict[str, str] = field(default_factory=dict)
    id_pattern: re.Pattern[str] | None = None
    id_help: str = ""
    commands: dict[str, CommandSpec] = field(default_factory=dict)
    decisions: dict[str, DecisionSpec] = field(default_factory=dict)
    branches: list[BranchSpec] = field(default_factory=list)
    limits: dict[str, LimitSpec] = field(default_factory=dict)
    reconciler: ReconcilerSpec | None = None
    workers: WorkerSpec | None = None
    docker: DockerSpec | None = None
    api: ApiSpec | None = None
    watch: WatchSectionSpec | None = None
    handoff: HandoffSpec | None = None
    escalation: EscalationSpec | None = None

    def limit(self, name: str) -> float:
        """A limit's value: seconds for durations, bytes for sizes, the number for counts."""
        try:
            return self.limits[name].value
        except KeyError:
            raise KeyError(f"no limit named {name!r} in the loaded runbooks ({', '.join(self.files_text())})") from None

    def limit_int(self, name: str) -> int:
        return int(self.limit(name))

    def command(self, name: str) -> CommandSpec:
        return self.commands[name]

    def files_text(self) -> list[str]:
        return [str(p) for p in self.files]

    @property
    def decidable(self) -> list[str]:
        """Decisions a person may name in ``decide`` (resume has its own command)."""
        return [name for name, d in self.decisions.items() if d.decidable]

    def reconciler_review_window(self) -> float:
        assert self.reconciler is not None
        return self.limit(self.reconciler.review_window)

    def reconciler_exec_timeout(self) -> float:
        assert self.reconciler is not None
        return self.limit(self.reconciler.exec_timeout)

    def approval_expiry(self, decision: str) -> float:
        """Seconds an approval request for ``decision`` stays open: the one expiry rule. A two-person
        request expires at the ladder's ``escalation: expiry`` when there is a ladder (its steps all come
        before it); otherwise at the decision's ``expires`` (the loader fills in ``approval_expiry``)."""
        approval = self.decisions[decision].approval
        assert approval is not None and approval.expires is not None
        if approval.policy == "two_person" and self.escalation is not None:
            return self.escalation.expiry_seconds
        return float(approval.expires)

    def repeat_threshold(self, decision: str) -> int:
        value = self.decisions[decision].repeat_threshold
        assert value is not None
        return value

    def required_flags(self, decision: str) -> list[str]:
        """Flags the decision's command requires for this decision (always-required included)."""
        spec = self.decisions[decision]
        command = self.commands.get(spec.command)
        if command is None:
            return []
        return [f.name for f in command.flags if f.required or decision in f.required_for]
