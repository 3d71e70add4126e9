"""What every room of the decisions core shares: one typed object handed to each of them.

Why: the lifecycle rooms (decide, approvals, cases) and the execution rooms (send, waits,
verification, resume) need the same store, client, runbooks, clock and approver settings, and the
same few helpers (time stamps, the runbook's policy for a decision, a recorded step, a recorded
refusal, a fresh diagnosis). Each room receives this object (composition) instead of being mixed into
one class that owns everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlite_utils import Database

from bot.channels import RecoveryChannels
from bot.clock import Clock, isoformat
from bot.controlhost import ControlHostClient, ControlHostError
from bot.decisions import _text as text
from bot.decisions._policy import DecisionPolicy, Limits, decision_policy, runbook_limits
from bot.decisions._requests import RequestStore
from bot.decisions._rules import ApproverDirectory
from bot.decisions._sendlease import SendLeases, lease_limit
from bot.diagnosis import Diagnoser
from bot.messages import Message, Reply, plain
from bot.runbook.evaluate import DecisionVerdict, check_decision
from bot.runbook.model import RunbookSet
from bot.runbook.suggest import did_you_mean
from bot.store import Store

#: What to do about a session id the control host does not have, when no known id is near it.
CHECK_THE_ID = "Check the id: copy it from the alert, or `/recover cases` lists the open ones."

# The actor of what the bot does by itself (expiry, background re-sends, refusals for want of authority).
BOT = "recover-bot"


@dataclass
class DecisionContext:
    """The decisions core's dependencies and its shared helpers. Cheap: all state lives in SQLite."""

    store: Store
    client: ControlHostClient
    runbooks: RunbookSet
    diagnoser: Diagnoser
    clock: Clock
    approvers: tuple[str, ...] = ()
    #: The channel rule (bot/channels.py): where the restricted commands may run.
    channels: RecoveryChannels = field(default_factory=RecoveryChannels)
    directory: ApproverDirectory | None = None
    # RECOVER_CONSOLE_USERS: console login → Slack id; people are compared by that id.
    console_users: dict[str, str] = field(default_factory=dict)
    requests: RequestStore = field(init=False)
    limits: Limits = field(init=False)
    #: This bot's send leases (``send:<key>``): who sends a stored request now.
    sends: SendLeases = field(init=False)

    def __post_init__(self) -> None:
        self.approvers = tuple(self.approvers)
        self.console_users = dict(self.console_users)
        self.requests = RequestStore(self.store)
        self.limits = runbook_limits(self.runbooks)
        self.sends = SendLeases(self.store.leases, lambda: lease_limit(self.runbooks, "send_lease"))

    def now(self) -> datetime:
        return self.clock.now()

    def iso(self, when: datetime | None = None) -> str:
        return isoformat(when or self.now()) or ""

    def policy(self, decision: str) -> DecisionPolicy:
        """The runbook's definition of ``decision`` (an unknown one raises DecisionError)."""
        return decision_policy(self.runbooks, decision, self.limits)

    def irreversible(self, decision: str) -> bool:
        """Does the runbook mark ``decision`` irreversible (said in every approval message)? A decision the
        loaded runbook no longer defines is said to be: the reading that cannot mislead."""
        spec = self.runbooks.decisions.get(decision)
        return True if spec is None else spec.irreversible

    def record(
        self,
        session_id: str | None,
        actor: str,
        step: str,
        inputs: Mapping[str, Any],
        outcome: str,
        *,
        detail: Mapping[str, Any] | None = None,
        http_status: int | None = None,
        idempotency_key: str | None = None,
        receipt_id: str | None = None,
        db: Database | None = None,
        opens_case: bool = True,
    ) -> None:
        """Append one step to the hash chain (with ``db``, inside the caller's transaction)."""
        self.store.record_step(
            session_id,
            actor,
            step,
            dict(inputs),
            outcome,
            detail=detail,
            http_status=http_status,
            idempotency_key=idempotency_key,
            receipt_id=receipt_id,
            db=db,
            opens_case=opens_case,
        )

    def refuse(
        self,
        actor: str,
        session_id: str | None,
        step: str,
        inputs: Mapping[str, Any],
        headline: str,
        *lines: str,
        rules: Sequence[str] = (),
        extra: Sequence[Message] = (),
        code: str = "refused",
    ) -> Reply:
        """Record a refusal as a step (the audit shows attempts too) and say why, actionably."""
        # Stored with mentions readable (@U1): the per-process markers of ref() never reach the chain.
        detail = {"why": plain(headline), "lines": [plain(line) for line in lines]}
        # A refusal changes nothing: it joins an open case, never re-opens a closed one (a repeated
        # approve of an executed request) nor opens one for a mistyped id.
        self.record(session_id, actor, step, inputs, code, detail=detail, opens_case=False)
        msg = text.refusal(headline, *lines, rules=list(rules), session_id=session_id)
        return Reply([*extra, msg], ok=False)

    def diagnose(self, session_id: str, turn_id: str | None) -> tuple[dict[str, Any], str | None]:
        """A fresh diagnosis: its facts, and the target turn's status when a turn is named."""
        facts: dict[str, Any] = dict(self.diagnoser.gather(session_id).facts)
        turn_status: str | None = None
        if turn_id:
            if facts.get("unknown_turn.id") == turn_id and facts.get("unknown_turn.present"):
                turn_status = "outcome_unknown"
            else:
                try:
                    turn_status = self.client.get_turn(session_id, turn_id).status
                except ControlHostError:
                    turn_status = None
        return facts, turn_status

    def unknown_session_lines(self, session_id: str, line_for: Callable[[str], str]) -> list[str]:
        """What to type instead of a command on a session the control host does not have: the same
        command (``line_for``) on each known id near it, else where to find the id. The mistyped id is
        never offered as a command to run."""
        near = self.diagnoser.near_sessions(session_id)
        return did_you_mean(*(line_for(n) for n in near)) if near else [CHECK_THE_ID]

    def verdict(self, policy: DecisionPolicy, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> DecisionVerdict:
        """Would the API accept it? The runbook's preconditions, in the API's order (R2.10, R3.9, R3.11)."""
        return check_decision(self.runbooks, policy.name, facts, flags)

    def mentions(self) -> list[str]:
        """Who an approval request names (RECOVER_APPROVERS)."""
        return list(self.approvers)
