"""DecisionService: decide, the two-person rule, execution exactly once, verification, resume, cases.

Plain Python, no Slack: the Slack app and the console both reach it through the router, so no front
end can skip a rule. Every method returns a :class:`bot.messages.Reply`; slow work (waits, resume)
reports through a :class:`bot.messages.Reporter`. Time comes from the injected clock only.

Exactly once, whatever happens to the network or the process:
- approval is a compare-and-set ``pending → approved`` in the database (one winner across processes);
- execution is a second compare-and-set ``approved → sending`` that stores the Idempotency-Key and
  the exact body *before* the idempotency record is written and anything is sent; ``expected_revision``
  comes from the same fresh diagnosis that compared the decisive facts;
- after a crash :meth:`recover_after_restart` finishes ``approved`` requests (fresh facts check) and
  re-sends ``sending``/``uncertain`` ones with their stored key and body, so the API sees one logical request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.clock import Clock, isoformat, parse_time
from bot.controlhost import PURPOSE_DECISION, PURPOSE_RESUME, ControlHostClient
from bot.decisions import _text as text
from bot.decisions._authority import AuthorityMixin, approval_evidence
from bot.decisions._cases import CasesMixin
from bot.decisions._context import DecisionContext
from bot.decisions._duplicates import identical_open, pointer_message, repeats
from bot.decisions._policy import DecisionPolicy, Limits
from bot.decisions._requests import IN_FLIGHT_STATES, DecisionRequest, new_request_id
from bot.decisions._rules import (
    ID_RE,
    ApproverDirectory,
    approver_allowed,
    changed_facts,
    channel_allowed,
    console_login,
    decisive_facts,
    identity_refusal,
    person_of,
    same_person,
    settled_reason,
)
from bot.decisions._uncertain import UncertainMixin, is_uncertain
from bot.decisions._unfinished import UnfinishedMixin
from bot.diagnosis import Diagnoser
from bot.errors import ControlHostError, DecisionError, Interrupted, RecoverError, StoreError
from bot.messages import Message, Reply, Reporter, ref
from bot.runbook.evaluate import check_decision
from bot.runbook.model import RunbookSet
from bot.store import Store

BOT = "recover-bot"
log = logging.getLogger(__name__)

# Facts shown with a request (the second person sees what the requester saw).
SHOWN_FACTS = (
    "session.status",
    "session.admission_state",
    "session.revision",
    "session.resumable",
    "attention.code",
    "attention.reason",
    "attention.failures",
    "attention.retry_at",
    "checkpoint.id",
    "checkpoint.covers_turn_id",
    "execution.state",
    "execution.confirmed_gone",
    "unknown_turn.id",
    "unknown_turn.terminal_reason",
    "unknown_turn.covered_by_checkpoint",
    "logs.likely_cause",
    # Whether each object exists, so an absent one reads "none" and an unread one "unknown".
    "attention.present",
    "checkpoint.present",
    "unknown_turn.present",
)

# R5.1: always reported after a decision, besides what the runbook's verify.report adds.
VERIFY_FACTS = ("session.revision", "session.status", "session.admission_state", "session.resumable")

# A refusal the bot waits out rather than refuses (R3.9).
WAITABLE = "RECOVERY_REQUIRED"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    code: str | None
    reason: str | None
    rules: tuple[str, ...]


def _attr(obj: Any, *path: str) -> Any:
    """Tolerant field access on client models or dicts (missing → None, shown as unknown)."""
    for name in path:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return obj


def _flags(req: DecisionRequest | None = None, **kw: Any) -> dict[str, Any]:
    if req is not None:
        return {
            "turn": req.turn_id,
            "evidence": req.evidence_ref,
            "effects": req.effects,
            "reason": req.reason,
            "yes": True,
        }
    return dict(kw)


class DecisionService(CasesMixin, AuthorityMixin, UnfinishedMixin, UncertainMixin):
    """The decisions core. Cheap to construct: all state lives in the store's SQLite file."""

    def __init__(
        self,
        *,
        store: Store,
        client: ControlHostClient,
        runbooks: RunbookSet,
        diagnoser: Diagnoser,
        clock: Clock,
        approvers: tuple[str, ...] = (),
        channels: tuple[str, ...] = (),
        directory: ApproverDirectory | None = None,
        console_users: Mapping[str, str] | None = None,
    ) -> None:
        self.ctx = DecisionContext(
            store=store,
            client=client,
            runbooks=runbooks,
            diagnoser=diagnoser,
            clock=clock,
            approvers=tuple(approvers),
            channels=tuple(channels),
            directory=directory,
            console_users=dict(console_users or {}),
        )
        # The mixins still read these by name; the rooms that replace them take ``ctx``.
        self.store = store
        self.client = client
        self.runbooks = runbooks
        self.diagnoser = diagnoser
        self.clock = clock
        self.approvers = self.ctx.approvers
        self.channels = self.ctx.channels
        self.directory = directory
        self.console_users = self.ctx.console_users
        self.requests = self.ctx.requests
        self.limits: Limits = self.ctx.limits

    # == helpers (the context's, under their old names) ===========================================

    def _now(self) -> datetime:
        return self.ctx.now()

    def _iso(self, when: datetime | None = None) -> str:
        return self.ctx.iso(when)

    def _policy(self, decision: str) -> DecisionPolicy:
        return self.ctx.policy(decision)

    def _record(
        self, session_id: str | None, actor: str, step: str, inputs: Any, outcome: str, **kw: Any
    ) -> None:
        self.ctx.record(session_id, actor, step, inputs, outcome, **kw)

    def _refuse(
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
        return self.ctx.refuse(actor, session_id, step, inputs, headline, *lines, rules=rules, extra=extra, code=code)

    def _diagnose(self, session_id: str, turn_id: str | None) -> tuple[dict[str, Any], str | None]:
        return self.ctx.diagnose(session_id, turn_id)

    def _verdict(self, policy: DecisionPolicy, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> Verdict:
        """Would the API accept it? The runbook's preconditions, in the API's order (R2.10, R3.9, R3.11)."""
        v = check_decision(self.runbooks, policy.name, dict(facts), dict(flags))
        return Verdict(bool(v.ok), v.code, v.reason, tuple(v.rules))

    def _mentions(self) -> list[str]:
        return self.ctx.mentions()

    def _ensure_owner(self, session_id: str, actor: str, channel: str | None) -> None:
        case = self.store.open_case(session_id, actor, channel)
        if case.owner is None:
            self.store.set_owner(case.id, actor)

    def _repeated(self, session_id: str, decision: str, facts: Mapping[str, Any]) -> int:
        """R5.4: how often this decision already ran here without fixing the cause (same attention)."""
        code = facts.get("attention.code")
        if code is None:
            return 0
        return sum(
            1
            for r in self.requests.find(states=("executed",), session_id=session_id)
            if r.decision == decision and r.facts.get("attention.code") == code
        )

    # == decide ===================================================================================

    def decide(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None = None,
        evidence: str | None = None,
        effects: str | None = None,
        reason: str,
        yes: bool = False,
        reporter: Reporter,
    ) -> Reply:
        """Check a decision against a fresh diagnosis; then ask for approval, confirmation, or send it."""
        flags = _flags(turn=turn, evidence=evidence, effects=effects, reason=reason, yes=yes)
        inputs = {"decision": decision, **flags, "channel": channel}
        pre = self._precheck(actor, channel, session_id, decision, flags, "decide", inputs)
        if isinstance(pre, Reply):
            return pre
        policy = pre
        identity = {"session_id": session_id, "decision": decision, "requester": actor, "turn_id": turn,
                    "evidence_ref": evidence, "effects": effects, "reason": reason}
        same = repeats(identical_open(self.requests, identity), yes=yes)
        if same is not None:
            # a replay or a double submit: no second request
            return Reply.of(pointer_message(same, irreversible=self.ctx.irreversible(same.decision)))
        facts, turn_status = self._diagnose(session_id, turn)
        verdict = self._verdict(policy, facts, flags)
        if not verdict.ok and verdict.code != WAITABLE:
            advice = policy.advice(verdict.code or "", facts, flags, self.runbooks)
            return self._refuse(
                actor,
                session_id,
                "decide",
                inputs,
                f"`{decision}` on `{session_id}` will not be accepted: {verdict.reason}",
                f"The control host would answer {verdict.code}. Nothing was sent.",
                *([advice.text] if advice else []),
                f"See `/recover diagnose {session_id}` for the decisions valid now.",
                rules=list(verdict.rules or policy.rules),
                code=verdict.code or "refused",
            )
        now = self._now()
        repeated = self._repeated(session_id, decision, facts)
        flagged = repeated > 0 and repeated + 1 >= policy.repeat_threshold
        content = {
            "id": new_request_id(),
            "session_id": session_id,
            "decision": decision,
            "turn_id": turn,
            "evidence_ref": evidence,
            "effects": effects,
            "reason": reason,
            "requester": actor,
            "channel": channel,
            "policy": policy.approval,
            "facts": decisive_facts(facts, turn_status),
            "shown_facts": {k: facts.get(k) for k in SHOWN_FACTS},
            "repeated": repeated if flagged else 0,
            "created_at": self._iso(now),
            "expires_at": self._iso(now + timedelta(seconds=policy.expiry_seconds)),
        }
        self._ensure_owner(session_id, actor, channel)
        with self.store.write() as db:
            same = repeats(identical_open(self.requests, content, db=db), yes=yes)  # concurrently
            if same is not None:
                return Reply.of(pointer_message(same, irreversible=self.ctx.irreversible(same.decision)))
            req = self.requests.insert(db, content)
            self.store.record_step(
                session_id,
                actor,
                "decision_requested",
                inputs,
                req.state,
                detail={
                    "request_id": req.id,
                    "state": req.state,  # the first state; the chain then records every transition
                    "policy": req.policy,
                    "content_hash": req.content_hash,
                    "facts": req.facts,
                    "repeated": req.repeated,
                    # Who the requester is, by Slack id (None: an unmapped console login); the
                    # authority check compares the approver with it (RECOVER_CONSOLE_USERS).
                    "person": person_of(actor, self.console_users),
                },
                db=db,
            )
        rules = list(verdict.rules or policy.rules)
        notes = [n for n in (policy.warning(facts, flags),) if n]
        if verdict.code == WAITABLE:
            notes.append(
                f"{verdict.reason}: once executed, the bot waits for the scheduler's confirmation "
                "and then submits it once (R3.9)."
            )
        if policy.approval == "two_person":
            msg = text.approval_request_message(req, self._mentions(), rules, irreversible=self.ctx.irreversible(decision))
            drops = policy.drops(facts, flags)
            msg.lines[4:4] = [*(f"[!] {n}" for n in notes), *([f"Drops: {drops}"] if drops else [])]
            if yes:
                msg.lines.insert(
                    0, "`--yes` does not apply: a two-person decision is never executed by its requester."
                )
            return Reply.of(msg)
        if policy.approval == "confirm" and not yes:
            command = self._decide_command(req) + " --yes"
            msg = text.confirmation_message(
                req, policy.drops(facts, flags), rules, command, policy.confirm_text(facts, flags),
                irreversible=self.ctx.irreversible(decision),
            )
            msg.lines[4:4] = [f"[!] {n}" for n in notes]
            return Reply.of(msg)
        # Confirmed from text (--yes), or a decision that needs no confirmation.
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, ("requested",), "approved", approved_by=actor, approved_at=self._iso()
            )
            if won:
                self.store.record_step(
                    session_id,
                    actor,
                    "decision_confirmed",
                    {"request_id": req.id, "content_hash": req.content_hash, "yes": yes, "channel": channel},
                    "approved",
                    db=db,
                )
        if not won:
            return Reply.of(text.refusal(self._state_text(self.requests.get(req.id) or req)), ok=False)
        return self._execute(req.id, actor, reporter)

    @staticmethod
    def _decide_command(req: DecisionRequest) -> str:
        parts = [f"/recover decide {req.session_id} {req.decision}"]
        if req.turn_id:
            parts.append(f"--turn {req.turn_id}")
        if req.evidence_ref:
            parts.append(f"--evidence {json.dumps(req.evidence_ref)}")
        if req.effects:
            parts.append(f"--effects {json.dumps(req.effects)}")
        parts.append(f"--reason {json.dumps(req.reason)}")
        return " ".join(parts)

    def _precheck(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        flags: Mapping[str, Any],
        step: str,
        inputs: Mapping[str, Any],
    ) -> DecisionPolicy | Reply:
        """Checks that need no network: channel, ids, the decision's required flags."""
        if step == "decide" and not channel_allowed(channel, self.channels):
            return self._refuse(
                actor,
                None,
                step,
                {**inputs, "session_id": session_id},
                "`decide` is refused outside the recovery channels (RECOVER_CHANNELS)",
                "Run it in one of: " + ", ".join(ref(c, "#") for c in self.channels) + ".",
            )
        for label, value in (("session", session_id), ("turn", flags.get("turn"))):
            if value is not None and not ID_RE.match(value):
                return self._refuse(
                    actor,
                    None,
                    step,
                    inputs,
                    f"invalid {label} id {value!r}",
                    "Ids are letters, digits and _.:- (up to 128 characters).",
                )
        try:
            policy = self._policy(decision)
            if not policy.spec.decidable:
                raise DecisionError(
                    f"`{decision}` is not a decision for `decide`",
                    hint=f"Use `/recover {policy.spec.command} <session_id>`.",
                )
        except DecisionError as exc:
            return self._refuse(
                actor, session_id, step, inputs, exc.message, *([exc.hint] if exc.hint else [])
            )
        missing = [f"--{f}" for f in policy.required if not str(flags.get(f) or "").strip()]
        if missing:
            return self._refuse(
                actor,
                session_id,
                step,
                inputs,
                f"`{decision}` needs {', '.join(missing)}",
                "Usage: /recover decide <session_id> <decision> [--turn <turn_id>] [--evidence <ref>] "
                '[--effects "<what the turn did outside>"] --reason "<text>" [--yes]',
                rules=list(policy.rules),
            )
        return policy

    def dryrun_decide(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None = None,
        evidence: str | None = None,
        effects: str | None = None,
        reason: str,
        yes: bool = False,
        reporter: Reporter,
    ) -> Reply:
        """Show exactly what ``decide`` would send and what is expected back; send nothing."""
        flags = _flags(turn=turn, evidence=evidence, effects=effects, reason=reason, yes=yes)
        inputs = {"decision": decision, **flags}
        pre = self._precheck(actor, channel, session_id, decision, flags, "dryrun_decide", inputs)
        if isinstance(pre, Reply):
            return pre
        policy = pre
        facts, _ = self._diagnose(session_id, turn)
        verdict = self._verdict(policy, facts, flags)
        method, path, body = policy.request(session_id, facts, flags)
        revision = facts.get("session.revision")
        lines = [
            f"{method} {path}",
            "Authorization: Bearer ***",
            "Idempotency-Key: *** (a new uuid4, stored before the first send and reused on every retry)",
            "Content-Type: application/json",
            "",
            json.dumps(body, indent=2, sort_keys=True),
            "",
        ]
        if verdict.ok:
            after = revision + 1 if isinstance(revision, int) else "unknown"
            lines.append(
                f"Expected back: 200 with a decision receipt (status accepted, session revision {after}); "
                "then the bot verifies the session (R5.1)."
            )
        else:
            advice = policy.advice(verdict.code or "", facts, flags, self.runbooks)
            lines.append(f"Expected back: 409 {verdict.code} — {verdict.reason}.")
            if advice:
                lines.append(advice.text)
        if policy.approval == "two_person":
            lines.append("It needs approval by a second person before it is sent.")
        elif policy.approval == "confirm":
            lines.append("It needs an explicit confirmation (button or --yes) before it is sent.")
        drops = policy.drops(facts, flags)
        if drops:
            lines.append(f"Drops: {drops}")
        self._record(
            session_id,
            actor,
            "dryrun_decide",
            inputs,
            "shown",
            detail={"method": method, "path": path, "body": body},
        )
        return Reply.of(
            Message(
                headline=f"Dry run: `{decision}` on `{session_id}` (nothing sent)",
                lines=lines,
                rules=list(verdict.rules or policy.rules),
                session_id=session_id,
            )
        )

    # == approval, confirmation, rejection ========================================================

    def _load(self, request_id: str) -> DecisionRequest | None:
        if not isinstance(request_id, str) or not request_id.startswith("req_"):
            return None
        return self.requests.get(request_id)

    def _tampered(self, req: DecisionRequest) -> bool:
        """The stored content must hash to the value written into the hash-chained step log."""
        from bot.decisions._requests import content_hash

        if content_hash(req.content()) != req.content_hash:
            return True
        for step in self.store.steps(session_id=req.session_id):
            if step.step == "decision_requested" and (step.detail or {}).get("request_id") == req.id:
                return (step.detail or {}).get("content_hash") != req.content_hash
        return True

    def _expire_if_due(self, req: DecisionRequest, actor: str) -> Message | None:
        expires = parse_time(req.expires_at)
        # An unanswered effects re-check lapses with the request (R3.9): the approval's expiry governs.
        if req.state not in ("requested", "recheck") or expires is None or self._now() < expires:
            return None
        with self.store.write() as db:
            if self.requests.transition(
                db,
                req.id,
                (req.state,),
                "expired",
                decided_by=actor,
                decided_at=self._iso(),
                note="expired",
            ):
                self.store.record_step(
                    req.session_id, actor, "decision_expired", {"request_id": req.id}, "expired", db=db
                )
        fresh = self.requests.get(req.id) or req
        if fresh.state != "expired":
            return None
        return text.updated_request_message(fresh, f"expired at {req.expires_at}; nothing was sent", "warn")

    def _approver_problem(self, actor: str) -> list[str] | None:
        person = person_of(actor, self.console_users)
        if person is None:
            return [f"{actor} is not mapped to a Slack user id (RECOVER_CONSOLE_USERS)."]
        allowed, problem = approver_allowed(person, self.approvers, self.directory)
        if allowed:
            return None
        return [*([problem] if problem else []), "Allowed approvers: " + ", ".join(self.approvers) + "."]

    def _approval_evidence(self, actor: str) -> tuple[dict[str, Any] | None, str | None]:
        """What allows ``actor`` to approve, by its Slack id; a console login's mapping is recorded too."""
        person = person_of(actor, self.console_users)
        if person is None:
            return None, f"{actor} is not mapped to a Slack user id (RECOVER_CONSOLE_USERS)"
        evidence, problem = approval_evidence(person, self.approvers, self.directory)
        if evidence is not None and person != actor:
            evidence = {**evidence, "person": person, "login": console_login(actor)}
        return evidence, problem

    def _is_requester(self, actor: str, req: DecisionRequest) -> bool:
        """One person, compared by Slack id (a Slack user and their own mapped console login are one)."""
        return same_person(actor, req.requester, self.console_users)

    def _identity_refusal(
        self, actor: str, req: DecisionRequest
    ) -> tuple[str, str, list[str], list[str]] | None:
        """The two-person rule's identity check (code, headline, lines, rules), in the core for every path."""
        refusal = identity_refusal(actor, req.requester, self.console_users)
        if refusal is None:
            return None
        code, headline, lines = refusal
        if code == "self_approval":
            return code, headline, [f"Ask another on-call engineer to run `/recover approve {req.id}`."], ["R3.10"]
        return code, headline, lines, []

    def approve(self, actor: str, channel: str | None, request_id: str, reporter: Reporter) -> Reply:
        """A second, allowed person approves (button or text both end here); then it executes once."""
        inputs = {"request_id": request_id, "channel": channel}
        req = self._load(request_id)
        if req is None:
            return self._refuse(
                actor,
                None,
                "approve",
                inputs,
                f"no decision request {request_id!r}",
                "Copy the id from the approval request (req_…).",
            )
        sid = req.session_id
        if not channel_allowed(channel, self.channels):
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                "approvals are refused outside the recovery channels (RECOVER_CHANNELS)",
                "Approve in one of: " + ", ".join(ref(c, "#") for c in self.channels) + ".",
            )
        if req.policy != "two_person":
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                f"request {req.id} is a single-person `{req.decision}`: it is confirmed, not approved",
                "Its requester confirms it with the button or `--yes`.",
            )
        refusal = self._identity_refusal(actor, req)
        if refusal is not None:
            code, headline, lines, rules = refusal
            return self._refuse(actor, sid, "approve", inputs, headline, *lines, rules=rules, code=code)
        # What allows this approver, as seen now: recorded with the approval, never looked up again.
        evidence, problem = self._approval_evidence(actor)
        if evidence is None:
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                f"{ref(actor)} is not an allowed approver (RECOVER_APPROVERS)",
                *([problem] if problem else []),
                "Allowed approvers: " + ", ".join(self.approvers) + ".",
                code="not_approver",
            )
        if req.state == "approved":
            # Approved but not executed (a crash, an unreadable API): an allowed person retries execution.
            return self._execute(req.id, actor, reporter)
        if req.state != "requested":
            return self._refuse(actor, sid, "approve", inputs, self._state_text(req))
        if self._tampered(req):
            with self.store.write() as db:
                self.requests.transition(
                    db,
                    req.id,
                    ("requested",),
                    "void",
                    decided_by=actor,
                    decided_at=self._iso(),
                    note="content changed after it was requested",
                )
            fresh = self.requests.get(req.id) or req
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                f"request {req.id} was changed after it was requested: approval refused",
                "Its stored content no longer matches the hash recorded when it was made. "
                "Make a new request, and check the step store with `recover-bot audit verify`.",
                extra=[text.updated_request_message(fresh, "void: content changed", "error")],
                code="tampered",
            )
        expired = self._expire_if_due(req, actor)
        if expired is not None:
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                f"request {req.id} has expired: nothing was sent",
                "Make a new request with `/recover decide …` if it is still needed.",
                extra=[expired],
                code="expired",
            )
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, ("requested",), "approved", approved_by=actor, approved_at=self._iso()
            )
            if won:
                self.store.record_step(
                    sid,
                    actor,
                    "decision_approved",
                    {
                        "request_id": req.id,
                        "content_hash": req.content_hash,
                        "channel": channel,
                        "allowed_by": evidence,
                    },
                    "approved",
                    db=db,
                )
        if not won:
            return self._refuse(
                actor, sid, "approve", inputs, self._state_text(self.requests.get(req.id) or req)
            )
        return self._execute(req.id, actor, reporter)

    def confirm(
        self,
        actor: str,
        channel: str | None,
        request_id: str,
        reporter: Reporter,
        effects: str | None = None,
    ) -> Reply:
        """One word, two uses (docs/commands.md, "confirm"): the explicit confirmation of a single-person
        decision by its requester, or the effects re-check of a two-person decision once its worker is
        confirmed gone (R3.9, R3.10)."""
        inputs = {"request_id": request_id, "channel": channel, "effects": effects}
        req = self._load(request_id)
        if req is None:
            return self._refuse(actor, None, "confirm", inputs, f"no decision request {request_id!r}")
        sid = req.session_id
        if not channel_allowed(channel, self.channels):
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                "decisions are refused outside the recovery channels (RECOVER_CHANNELS)",
            )
        if req.state == "recheck":
            return self._recheck(req, actor, channel, effects, reporter, inputs)
        if effects is not None:
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"--effects applies only to the effects re-check of a request whose worker is confirmed gone; "
                f"request {req.id} is {req.state}",
                "The re-check is asked for in the case's thread once the scheduler confirms the worker gone (R3.9).",
                rules=["R3.9", "R3.10"],
            )
        if req.policy == "two_person" and req.state == "waiting":
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"request {req.id} waits for the scheduler to confirm the worker gone: nothing to re-check yet",
                "The effects re-check is asked for in the case's thread once it is (R3.9, R3.10).",
                rules=["R3.9", "R3.10"],
            )
        if req.policy == "two_person" and req.state != "requested":
            return self._refuse(actor, sid, "confirm", inputs, self._state_text(req))
        if req.policy == "two_person":
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"request {req.id} needs approval by a second person, not a confirmation",
                f"Another person runs `/recover approve {req.id}`.",
            )
        if not self._is_requester(actor, req):
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"only {ref(req.requester)}, who asked for it, confirms request {req.id}",
                "Make your own request with `/recover decide …` if you want it.",
            )
        if req.state == "approved":
            return self._execute(req.id, actor, reporter)
        if req.state != "requested":
            return self._refuse(actor, sid, "confirm", inputs, self._state_text(req))
        if self._tampered(req):
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"request {req.id} was changed after it was made",
                code="tampered",
            )
        expired = self._expire_if_due(req, actor)
        if expired is not None:
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"request {req.id} has expired: nothing was sent",
                extra=[expired],
                code="expired",
            )
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, ("requested",), "approved", approved_by=actor, approved_at=self._iso()
            )
            if won:
                self.store.record_step(
                    sid,
                    actor,
                    "decision_confirmed",
                    {"request_id": req.id, "content_hash": req.content_hash, "channel": channel},
                    "approved",
                    db=db,
                )
        if not won:
            return self._refuse(
                actor, sid, "confirm", inputs, self._state_text(self.requests.get(req.id) or req)
            )
        return self._execute(req.id, actor, reporter)

    def _recheck(
        self,
        req: DecisionRequest,
        actor: str,
        channel: str | None,
        effects: str | None,
        reporter: Reporter,
        inputs: Mapping[str, Any],
    ) -> Reply:
        """R3.10 after R3.9: the effects account re-checked now that the worker is gone, then sent once.

        The same account (or none given) confirms it; a different one is new content: a new request
        (new id) that needs a new approval by someone other than its editor. The approval's own expiry
        still governs: an unanswered re-check lapses with the request.
        """
        sid = req.session_id
        if actor not in (req.requester, req.approved_by):
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"only {ref(req.requester)} (requester) or {ref(req.approved_by or '?')} (approver) re-checks the effects "
                f"of request {req.id}",
                "They know what was checked; anyone else makes their own request with `/recover decide …`.",
                rules=["R3.10"],
                code="not_party",
            )
        if self._tampered(req):
            return self._refuse(
                actor, sid, "confirm", inputs, f"request {req.id} was changed after it was made", code="tampered"
            )
        expired = self._expire_if_due(req, actor)
        if expired is not None:
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"request {req.id} has expired: the effects re-check lapsed with it; nothing was sent",
                "Make a new request with `/recover decide …` if it is still needed.",
                extra=[expired],
                rules=["R3.9"],
                code="expired",
            )
        edited = effects is not None and effects.strip() != (req.effects or "").strip()
        if edited:
            return self._supersede(req, actor, channel, str(effects).strip(), inputs)
        with self.store.write() as db:
            current = self.requests.get(req.id, db=db)
            if current is None or current.state != "recheck":
                still = False
            else:
                still = True
                self.requests.mark(db, req.id, rechecked_by=actor, rechecked_at=self._iso())
        if not still:
            return self._refuse(actor, sid, "confirm", inputs, self._state_text(self.requests.get(req.id) or req))
        with self.store.write() as db:
            self.store.record_step(
                sid,
                actor,
                "decision_effects_rechecked",
                {"request_id": req.id, "effects": req.effects, "channel": channel},
                "recheck",
                detail={"content_hash": req.content_hash},
                db=db,
            )
        fresh = self.requests.get(req.id) or req
        try:
            facts, turn_status = self._diagnose(sid, fresh.turn_id)
        except RecoverError as exc:
            return Reply.of(
                text.refusal(
                    f"request {req.id}: the session could not be read: {exc.message}",
                    f"Nothing was sent. `/recover confirm {req.id}` again in a moment.",
                    session_id=sid,
                ),
                ok=False,
            )
        reply = self._check_and_send(fresh, actor, facts, turn_status, reporter, from_state="recheck")
        return self._after_submit(req.id, actor, reply, reporter)

    def _supersede(
        self, req: DecisionRequest, actor: str, channel: str | None, effects: str, inputs: Mapping[str, Any]
    ) -> Reply:
        """A changed effects account: the old request is void, a new one (new id) waits for approval."""
        sid = req.session_id
        try:
            facts, turn_status = self._diagnose(sid, req.turn_id)
        except RecoverError as exc:
            return self._refuse(actor, sid, "confirm", inputs, f"the session could not be read: {exc.message}")
        now = self._now()
        policy = self._policy(req.decision)
        content = {
            "id": new_request_id(),
            "session_id": sid,
            "decision": req.decision,
            "turn_id": req.turn_id,
            "evidence_ref": req.evidence_ref,
            "effects": effects,
            "reason": req.reason,
            "requester": actor,  # its editor: someone else must approve it
            "channel": channel or req.channel,
            "policy": req.policy,
            "facts": decisive_facts(facts, turn_status),
            "shown_facts": {k: facts.get(k) for k in SHOWN_FACTS},
            "repeated": req.repeated,
            "created_at": self._iso(now),
            "expires_at": self._iso(now + timedelta(seconds=policy.expiry_seconds)),
        }
        with self.store.write() as db:
            if not self.requests.transition(
                db,
                req.id,
                ("recheck",),
                "void",
                actor=actor,
                decided_by=actor,
                decided_at=self._iso(now),
                note=f"superseded by {content['id']}: the effects account changed",
            ):
                return self._refuse(actor, sid, "confirm", inputs, self._state_text(self.requests.get(req.id) or req))
            new = self.requests.insert(db, content)
            self.requests.mark(db, req.id, superseded_by=new.id)
            self.store.record_step(
                sid,
                actor,
                "decision_requested",
                {**inputs, "decision": req.decision, "supersedes": req.id},
                new.state,
                detail={
                    "request_id": new.id,
                    "policy": new.policy,
                    "content_hash": new.content_hash,
                    "facts": new.facts,
                    "repeated": new.repeated,
                    "supersedes": req.id,
                },
                db=db,
            )
        old = self.requests.get(req.id) or req
        msg = text.approval_request_message(
            new, self._mentions(), ["R3.9", "R3.10"], irreversible=self.ctx.irreversible(new.decision)
        )
        msg.lines.insert(
            0,
            f"The effects account of {req.id} changed after the worker was confirmed gone: this is a new request; "
            f"it needs a new approval by someone other than {ref(actor)} (R3.10).",
        )
        return Reply(
            [text.updated_request_message(old, f"void: superseded by {new.id} (effects account changed)", "warn"), msg]
        )

    def reject(self, actor: str, channel: str | None, request_id: str, reason: str | None = None) -> Reply:
        """An allowed approver rejects; the requester may withdraw their own request."""
        inputs = {"request_id": request_id, "channel": channel, "reason": reason}
        req = self._load(request_id)
        if req is None:
            return self._refuse(actor, None, "reject", inputs, f"no decision request {request_id!r}")
        sid = req.session_id
        if not channel_allowed(channel, self.channels):
            return self._refuse(
                actor,
                sid,
                "reject",
                inputs,
                "rejections are refused outside the recovery channels (RECOVER_CHANNELS)",
            )
        if not self._is_requester(actor, req):
            problem = self._approver_problem(actor)
            if problem is not None:
                return self._refuse(
                    actor,
                    sid,
                    "reject",
                    inputs,
                    f"{ref(actor)} is not an allowed approver (RECOVER_APPROVERS)",
                    *problem,
                )
        to_state = "withdrawn" if self._is_requester(actor, req) else "rejected"
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, ("requested",), to_state, decided_by=actor, decided_at=self._iso(), note=reason
            )
            if won:
                self.store.record_step(sid, actor, "decision_rejected", inputs, to_state, db=db)
        if not won:
            return self._refuse(
                actor, sid, "reject", inputs, self._state_text(self.requests.get(req.id) or req)
            )
        fresh = self.requests.get(req.id) or req
        how = "withdrawn by its requester" if self._is_requester(actor, req) else f"rejected by {ref(actor)}"
        because = f": {reason}" if reason else ""
        return Reply.of(text.updated_request_message(fresh, f"{how}{because}; nothing was sent", "warn"))

    def expire_due(self) -> list[Message]:
        """Expire every pending request past its expiry; returns the updated messages to show."""
        out: list[Message] = []
        for req in self.requests.find(states=("requested", "recheck")):
            msg = self._expire_if_due(req, BOT)
            if msg is not None:
                out.append(msg)
        return out

    @staticmethod
    def _state_text(req: DecisionRequest) -> str:
        if req.state == "uncertain":
            return (
                f"request {req.id} is uncertain (sent, no definite answer): the bot re-sends it in the background "
                "with the same Idempotency-Key and body and posts the outcome in the case's thread"
            )
        by = req.decided_by or req.approved_by
        who = f" by {ref(by)}" if by else ""
        when = req.decided_at or req.approved_at or req.updated_at
        note = f" ({req.note})" if req.note else ""
        return f"request {req.id} is already {req.state}{who} at {when}{note}: nothing more to do"

    # == execution ================================================================================

    def _execute(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        """approved → sending; Ctrl-C on the way withdraws it unless a send is in doubt."""
        with self._interruptible(request_id, actor):
            return self._execute_now(request_id, actor, reporter)

    def _execute_now(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        """approved → sending: facts re-checked, expected_revision read in that same check, then sent."""
        req = self.requests.get(request_id)
        if req is None or req.state != "approved":
            return Reply.of(
                text.refusal(self._state_text(req) if req else f"no request {request_id}"), ok=False
            )
        sid = req.session_id
        try:
            facts, turn_status = self._diagnose(sid, req.turn_id)
        except RecoverError as exc:
            return Reply.of(
                text.refusal(
                    f"request {req.id} is approved but the session could not be read: {exc.message}",
                    f"Nothing was sent. `/recover approve {req.id}` retries; a restarted bot also finishes it.",
                    session_id=sid,
                ),
                ok=False,
            )
        reply = self._check_and_send(req, actor, facts, turn_status, reporter, from_state="approved")
        return self._after_submit(req.id, actor, reply, reporter)

    def _after_submit(self, request_id: str, actor: str, reply: Reply, reporter: Reporter) -> Reply:
        """A request left ``waiting`` (the worker is not confirmed gone, R3.9) gets the bounded wait.

        Called only from the top of an execution path, never from inside a send: the wait is a loop,
        not a recursion (a second RECOVERY_REQUIRED goes back to the same loop).
        """
        req = self.requests.get(request_id)
        if req is None or req.state != "waiting":
            return reply
        waited = self._wait_for_gone(request_id, actor, reporter)
        return Reply([*reply.messages, *waited.messages], ok=waited.ok)

    @staticmethod
    def _observation(facts: Mapping[str, Any]) -> str | None:
        """Which confirmed-gone observation these facts show (None: the worker is not confirmed gone).

        The scheduler's ``confirmed_gone_at`` names a pass; without it the revision stands in (every
        pass that confirms a worker gone moves it). One submission per observation (R3.9).
        """
        if facts.get("execution.confirmed_gone") is not True:
            return None
        at = facts.get("execution.confirmed_gone_at")
        return str(at) if at else f"revision {facts.get('session.revision')}"

    def _needs_recheck(self, req: DecisionRequest, facts: Mapping[str, Any]) -> bool:
        """R3.9 then R3.10: an effects account written while the worker could still act is re-checked
        once the worker is confirmed gone, before anything is sent."""
        if not getattr(self._policy(req.decision).spec, "effects_recheck", False):
            return False
        if facts.get("execution.confirmed_gone") is not True:
            return False
        account_at = parse_time(req.rechecked_at or req.created_at)
        gone_at = parse_time(facts.get("execution.confirmed_gone_at"))
        written_after_gone = req.rechecked_at is not None or req.shown_facts.get("execution.confirmed_gone") is True
        if not written_after_gone:
            return True
        return gone_at is not None and account_at is not None and gone_at > account_at

    def _check_and_send(
        self,
        req: DecisionRequest,
        actor: str,
        facts: Mapping[str, Any],
        turn_status: str | None,
        reporter: Reporter,
        *,
        from_state: str,
    ) -> Reply:
        sid = req.session_id
        policy = self._policy(req.decision)
        flags = _flags(req)
        changes = changed_facts(req.facts, decisive_facts(facts, turn_status))
        verdict = self._verdict(policy, facts, flags)
        revision = facts.get("session.revision")
        why: list[str] = []
        if changes:
            why = ["The session's decisive facts changed since the request:", *(f"  {c}" for c in changes)]
        elif not verdict.ok and verdict.code != WAITABLE:
            why = [f"The runbook no longer expects it to be accepted: {verdict.reason} ({verdict.code})"]
        elif not isinstance(revision, int):
            why = [
                f"The session's revision is unknown (source.session {facts.get('source.session')}): "
                "expected_revision cannot be set."
            ]
        if why:
            with self.store.write() as db:
                if self.requests.transition(
                    db,
                    req.id,
                    (from_state,),
                    "void",
                    decided_by=actor,
                    decided_at=self._iso(),
                    note="; ".join(why),
                ):
                    self.store.record_step(
                        sid,
                        actor,
                        "decision_void",
                        {"request_id": req.id},
                        "void",
                        detail={"changes": changes, "why": why},
                        db=db,
                    )
            fresh = self.requests.get(req.id) or req
            msg = text.refusal(
                f"the approval of {req.id} is void: nothing was sent",
                *why,
                f"Look again (`/recover diagnose {sid}`) and make a new request.",
                session_id=sid,
            )
            # Every changed fact, not only the first line: the approver must see all that moved.
            outcome = "void: facts changed: " + "; ".join(changes) if changes else "void: " + why[0]
            return Reply([text.updated_request_message(fresh, outcome, "error"), msg], ok=False)
        if verdict.code == WAITABLE:
            # R3.9: the runbook already says 409 RECOVERY_REQUIRED: nothing is sent; wait for the pass.
            if from_state != "waiting":
                with self.store.write() as db:
                    self.requests.transition(
                        db, req.id, (from_state,), "waiting", actor=actor, error_code=WAITABLE, note=verdict.reason
                    )
            return Reply.of(
                Message(
                    headline=f"`{req.decision}` on `{sid}` waits: {verdict.reason}",
                    level="progress",
                    lines=["Nothing was sent: the control host would answer 409 RECOVERY_REQUIRED (R3.9)."],
                    rules=["R3.9"],
                    session_id=sid,
                )
            )
        if self._needs_recheck(req, facts):
            return self._ask_recheck(req, actor, facts, from_state)
        method, path, body = policy.request(sid, facts, flags)
        return self._send(
            req, actor, method, path, body, reporter, from_state=from_state, seen=self._observation(facts)
        )

    def _ask_recheck(self, req: DecisionRequest, actor: str, facts: Mapping[str, Any], from_state: str) -> Reply:
        """R3.9/R3.10: the worker is gone now; ask in the case thread for the effects re-check."""
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, (from_state,), "recheck", actor=actor, note="effects re-check asked"
            )
            if won:
                self.requests.mark(db, req.id, gone_seen_at=self._observation(facts))
        fresh = self.requests.get(req.id) or req
        if not won:
            return Reply.of(text.refusal(self._state_text(fresh)), ok=False)
        gone_at = facts.get("execution.confirmed_gone_at")
        return Reply.of(text.recheck_message(fresh, gone_at, irreversible=self.ctx.irreversible(fresh.decision)))

    def _send(
        self,
        req: DecisionRequest,
        actor: str,
        method: str,
        path: str,
        body: Mapping[str, Any],
        reporter: Reporter,
        *,
        from_state: str,
        seen: str | None = None,
    ) -> Reply:
        """Compare-and-set to sending with a new key and the exact body; commit the record; send.

        ``seen`` is the confirmed-gone observation this submission is made for (R3.9): a 409
        RECOVERY_REQUIRED on it waits for the next one instead of re-submitting.
        """
        refused = self._authorise(req, actor, reporter)
        if refused is not None:
            return refused
        # One commit: the compare-and-set to sending, the idempotency record (the client's key rule:
        # new key, exact body, stored before any send) and the step; a crash leaves all or none.
        with self.store.write() as db:
            current = self.requests.get(req.id, db=db)
            won = current is not None and current.state == from_state
            if won:
                record = self.client.begin(method, path, body, PURPOSE_DECISION, session_id=req.session_id, db=db)
                if not self.requests.transition(
                    db, req.id, (from_state,), "sending", actor=actor, idem_key=record.key, body=record.body
                ):
                    raise StoreError(f"request {req.id} moved inside its own write transaction")
                self.requests.count_sends(db, req.id)
                if seen is not None:
                    self.requests.mark(db, req.id, gone_seen_at=seen)
                self.store.record_step(
                    req.session_id,
                    actor,
                    "decision_sending",
                    {"request_id": req.id, "method": method, "path": path, "body": dict(body)},
                    "sending",
                    idempotency_key=record.key,
                    db=db,
                )
        if not won:
            return Reply.of(text.refusal(self._state_text(self.requests.get(req.id) or req)), ok=False)
        return self._deliver(req.id, actor, record, reporter)

    def _deliver(self, request_id: str, actor: str, record: Any, reporter: Reporter) -> Reply:
        """Send a stored request (same key, same body) and settle the request from the answer."""
        req = self.requests.get(request_id)
        assert req is not None
        refused = self._authorise(req, actor, reporter)
        if refused is not None:
            return refused
        try:
            receipt = self.client.send(record)
        except ControlHostError as exc:
            return self._on_error(req, actor, exc, reporter)
        return self._on_accepted(req, actor, receipt)

    def _on_accepted(self, req: DecisionRequest, actor: str, receipt: Any) -> Reply:
        receipt_id = _attr(receipt, "id")
        result = {
            "receipt_id": receipt_id,
            "status": _attr(receipt, "status"),
            "revision": _attr(receipt, "session", "revision"),
            "resumable": _attr(receipt, "resumable"),
        }
        status = _attr(receipt, "http_status") or 200
        with self.store.write() as db:
            won = self.requests.transition(
                db,
                req.id,
                ("sending", "uncertain"),
                "executed",
                actor=actor,
                receipt_id=receipt_id,
                http_status=status,
                result=result,
            )
            if won:
                self.store.record_step(
                    req.session_id,
                    actor,
                    "decision_executed",
                    {"request_id": req.id},
                    str(result["status"] or "accepted"),
                    detail=result,
                    http_status=status,
                    idempotency_key=req.idem_key,
                    receipt_id=receipt_id,
                    db=db,
                )
        fresh = self.requests.get(req.id) or req
        by = f"approved by {ref(fresh.approved_by or '?')}" if fresh.policy == "two_person" else "confirmed"
        head = text.updated_request_message(fresh, f"executed ({by}); receipt {receipt_id}", "ok")
        if not won:
            return Reply.of(head)  # another process settled it and verified it
        verification = self._verify(req.session_id, actor, self._policy(req.decision), _flags(req), receipt)
        return Reply([head, *verification.messages])

    def _on_error(self, req: DecisionRequest, actor: str, exc: ControlHostError, reporter: Reporter) -> Reply:
        sid = req.session_id
        status = exc.status
        if is_uncertain(exc):
            # Uncertain: the stored key and body are re-sent in the background, never a new key (R0.3).
            return self._uncertain(req, actor, exc, reporter)
        policy = self._policy(req.decision)
        flags = _flags(req)
        if exc.code == WAITABLE:
            return self._to_waiting(req, actor, exc)
        try:
            facts, _ = self._diagnose(sid, req.turn_id)
        except RecoverError:
            facts = {}
        advice = policy.advice(exc.code, facts, flags, self.runbooks)
        lines = [exc.message]
        rules = list(advice.rules) if advice else list(policy.rules)
        if advice:
            lines.append(advice.text)
        if exc.code == "REQUEST_STALE":
            # Which state would make it valid: the runbook's acceptance checks, and the one failing now.
            now = self._verdict(policy, facts, flags) if facts else None
            lines.append("It is accepted when: " + ", ".join(policy.accepted_when()) + ".")
            if now is not None and not now.ok:
                lines.append(f"Now failing: {now.reason} ({now.code}).")
            elif now is not None:
                lines.append(
                    "The facts look valid again: the revision moved; decide anew for a fresh "
                    "expected_revision."
                )
        if exc.code == "CHECKPOINT_UNAVAILABLE":
            lines.append(
                f"No committed checkpoint covers turn {req.turn_id or 'unknown'}: consider `abandon` "
                "(after checking the turn's external effects, R3.10), or `close`."
            )
        with self.store.write() as db:
            if self.requests.transition(
                db,
                req.id,
                ("sending", "uncertain"),
                "failed",
                actor=actor,
                http_status=status,
                error_code=exc.code,
                note=exc.code,
            ):
                self.store.record_step(
                    sid,
                    actor,
                    "decision_refused_by_api",
                    {"request_id": req.id},
                    exc.code,
                    detail={"message": exc.message, "advice": lines[1:]},
                    http_status=status,
                    idempotency_key=req.idem_key,
                    db=db,
                )
        fresh = self.requests.get(req.id) or req
        return Reply(
            [
                text.updated_request_message(fresh, f"refused by the control host: {exc.code}", "error"),
                Message(
                    headline=f"The control host refused `{req.decision}` on `{sid}`: {status} {exc.code}",
                    level="error",
                    lines=lines,
                    rules=rules,
                    session_id=sid,
                ),
            ],
            ok=False,
        )

    def _to_waiting(self, req: DecisionRequest, actor: str, exc: ControlHostError) -> Reply:
        """R3.9: 409 RECOVERY_REQUIRED ends this logical request; the next is made after the next pass.

        Only a state change: whoever started the execution runs the (one, bounded) wait loop.
        """
        sid = req.session_id
        with self.store.write() as db:
            self.requests.transition(
                db,
                req.id,
                ("sending", "uncertain"),
                "waiting",
                actor=actor,
                http_status=exc.status,
                error_code=exc.code,
            )
            self.store.record_step(
                sid,
                actor,
                "decision_refused_by_api",
                {"request_id": req.id},
                exc.code,
                detail={"message": exc.message, "next": "wait for the next confirmed-gone observation"},
                http_status=exc.status,
                idempotency_key=req.idem_key,
                db=db,
            )
        return Reply.of(
            Message(
                headline=f"`{req.decision}` on `{sid}`: 409 RECOVERY_REQUIRED — the previous worker is not yet "
                "confirmed gone",
                level="progress",
                lines=[exc.message],
                rules=["R3.9"],
                session_id=sid,
            )
        )

    def _wait_bounds(self, req: DecisionRequest) -> tuple[float, float]:
        advice = self._policy(req.decision).advice(WAITABLE, {}, {}, self.runbooks)
        every = advice.every if advice and advice.every else self.limits.recovery_wait_poll
        up_to = advice.up_to if advice and advice.up_to else self.limits.recovery_wait_max
        return every, up_to

    def _gone_now(self, sid: str) -> str | None:
        """The confirmed-gone observation the session shows now (None: not gone, or unreadable)."""
        try:
            session = self.client.get_session(sid)
        except ControlHostError:
            return None
        if _attr(session, "execution", "state") != "gone":
            return None
        at = _attr(session, "execution", "confirmed_gone_at")
        return isoformat(at) if isinstance(at, datetime) else f"revision {_attr(session, 'revision')}"

    def _wait_for_gone(
        self, request_id: str, actor: str, reporter: Reporter, deadline: datetime | None = None
    ) -> Reply:
        """R3.9's wait; Ctrl-C during it withdraws the request (nothing uncertain was sent)."""
        with self._interruptible(request_id, actor):
            return self._wait_for_gone_now(request_id, actor, reporter, deadline)

    def _wait_for_gone_now(
        self, request_id: str, actor: str, reporter: Reporter, deadline: datetime | None = None
    ) -> Reply:
        """R3.9: wait for the scheduler's confirmation, then submit once per confirmed-gone observation.

        A bounded loop (the runbook's poll interval and limit), never a recursion: a second 409
        RECOVERY_REQUIRED after a pass is recorded and the loop waits for the NEXT observation (a new
        ``confirmed_gone_at``) before the next submission. It always ends with a message that says how.
        """
        req = self.requests.get(request_id)
        assert req is not None
        sid = req.session_id
        poll, up_to = self._wait_bounds(req)
        deadline = deadline or self._now() + timedelta(seconds=up_to)
        wait_id = self.requests.start_wait(
            sid,
            "recovery_required",
            actor,
            self._iso(deadline),
            request_id=req.id,
            detail=f"{req.id} `{req.decision}`: the scheduler must confirm the worker gone",
        )
        started = self._iso()
        reporter.post(
            Message(
                headline=f"`{req.decision}` on `{sid}` waits for the scheduler to confirm the previous worker gone",
                level="progress",
                lines=[
                    f"Polling the session every {text.duration(poll)} until {self._iso(deadline)}; on each new "
                    "confirmation the facts are re-checked and the decision is submitted once, as a new request "
                    "(new key, fresh expected_revision)."
                ],
                rules=["R3.9"],
                session_id=sid,
            )
        )
        replies: list[Message] = []
        submissions = 0
        while True:
            req = self.requests.get(request_id) or req
            if req.state != "waiting":
                self.requests.end_wait(wait_id, "ended")
                return self._wait_end(req, replies, f"the request is {req.state}")
            seen = self._gone_now(sid)
            if seen is not None and seen != req.gone_seen_at:
                submissions += 1
                try:
                    facts, turn_status = self._diagnose(sid, req.turn_id)
                except RecoverError as exc:
                    facts, turn_status = {"source.session": f"unreadable ({exc.message})"}, None
                with self.store.write() as db:
                    self.requests.mark(db, req.id, gone_seen_at=self._observation(facts) or seen)
                reporter.post(
                    Message(
                        headline=f"The scheduler confirmed the worker of `{sid}` gone ({seen}): re-checking the facts",
                        level="progress",
                        rules=["R3.9"],
                        session_id=sid,
                    )
                )
                reply = self._check_and_send(req, actor, facts, turn_status, reporter, from_state="waiting")
                replies.extend(reply.messages)
                after = self.requests.get(request_id) or req
                if after.state != "waiting":
                    self.requests.end_wait(wait_id, "done")
                    for message in reply.messages:
                        if message.kind == text.RECHECK_KIND:
                            reporter.post(message)  # asked in the case's thread (R3.10)
                    return self._wait_end(after, replies, f"after {submissions} confirmation(s)")
                reporter.post(
                    Message(
                        headline=f"`{req.decision}` on `{sid}`: still RECOVERY_REQUIRED after the confirmation "
                        f"{seen}; no resubmission until the next one",
                        level="progress",
                        rules=["R3.9"],
                        session_id=sid,
                    )
                )
            if self._now() >= deadline:
                break
            self.clock.sleep(min(poll, max(0.0, (deadline - self._now()).total_seconds())))
            reporter.progress(
                Message(
                    headline=f"Still waiting for the scheduler to confirm the worker of `{sid}` gone (since {started}, "
                    f"until {self._iso(deadline)})",
                    level="progress",
                    rules=["R3.9"],
                    session_id=sid,
                )
            )
        self.requests.end_wait(wait_id, "gave_up")
        with self.store.write() as db:
            if self.requests.transition(
                db,
                req.id,
                ("waiting",),
                "failed",
                actor=actor,
                error_code=WAITABLE,
                note="the worker was not confirmed gone in time",
            ):
                self.store.record_step(sid, actor, "decision_wait_gave_up", {"request_id": req.id}, WAITABLE, db=db)
        sends = (self.requests.get(request_id) or req).sends
        msg = text.refusal(
            f"`{req.decision}` on `{sid}` was not submitted again: no new confirmation that the worker is gone by "
            f"{self._iso(deadline)} ({sends} submission(s) of request {req.id} in all)",
            "Check the scheduler (a reconciler pass does not remove containers, R1.5), then decide again.",
            rules=["R3.9", "R1.5"],
            session_id=sid,
        )
        reporter.post(msg)
        return Reply([*replies, msg], ok=False)

    def _wait_end(self, req: DecisionRequest, replies: list[Message], how: str) -> Reply:
        """The visible end of a wait: what became of the request."""
        ok = req.state in ("executed", "recheck")
        end = Message(
            headline=f"`{req.decision}` on `{req.session_id}` after the wait ({how}): {req.state}",
            level="ok" if ok else "error",
            session_id=req.session_id,
            lines=[m.headline for m in replies],
            rules=["R3.9"],
        )
        return Reply([*replies, end], ok=ok)

    # == verification & resume ====================================================================

    def _verify(
        self, session_id: str, actor: str, policy: DecisionPolicy, flags: Mapping[str, Any], receipt: Any
    ) -> Reply:
        """R5.1/R3.12: re-read the session; report revision, status, admission, resumable and the next step."""
        try:
            facts, _ = self._diagnose(session_id, None)
        except RecoverError as exc:
            facts = {"source.session": f"unreadable ({exc.message})"}
        if facts.get("session.resumable") is None and _attr(receipt, "resumable") is not None:
            facts["session.resumable"] = _attr(receipt, "resumable")
        names = list(dict.fromkeys([*VERIFY_FACTS, *policy.report()]))
        step = policy.next_step(facts, flags)
        next_text = step.say if step else f"Check it: `/recover diagnose {session_id}`."
        detail: dict[str, Any] = {
            "decision": policy.name,
            "receipt_id": _attr(receipt, "id"),
            **{n: facts.get(n) for n in names},
            "next": next_text,
        }
        self._record(session_id, actor, "verification", {"decision": policy.name}, "checked", detail=detail)
        lines = [
            f"Receipt {_attr(receipt, 'id')}: {_attr(receipt, 'status') or 'unknown'}. "
            "Acceptance is not the same as the worker being gone, nor as a successful resume (R5.1).",
            f"Next: {next_text}",
        ]
        why = settled_reason(facts)
        case = self.store.get_open_case(session_id) if why else None
        if case is not None:
            self.store.close_case(case.id, actor, f"verification: {why}")
            lines.append(f"Case closed: {why}.")
        return Reply.of(
            Message(
                headline=f"Verified `{session_id}` after `{policy.name}`",
                level="ok",
                facts=[(n, text.show(facts.get(n))) for n in names],
                lines=lines,
                rules=list(step.rules if step and step.rules else policy.spec.verify.rules),
                session_id=session_id,
            )
        )

    def resume(self, actor: str, channel: str | None, session_id: str, reporter: Reporter) -> Reply:
        """Resume, riding through 503 BACKEND_UNAVAILABLE with backoff (R4.2), one key throughout."""
        inputs = {"session_id": session_id, "channel": channel}
        if not ID_RE.match(session_id):
            return self._refuse(actor, None, "resume", inputs, f"invalid session id {session_id!r}")
        policy = self._policy("resume")
        flags: dict[str, Any] = {"reason": f"resume requested by {actor} via recover-bot"}
        facts, _ = self._diagnose(session_id, None)
        verdict = self._verdict(policy, facts, flags)
        if not verdict.ok:
            advice = policy.advice(verdict.code or "", facts, flags, self.runbooks)
            return self._refuse(
                actor,
                session_id,
                "resume",
                inputs,
                f"resume of `{session_id}` will not be accepted: {verdict.reason}",
                f"The control host would answer {verdict.code}. Nothing was sent.",
                *([advice.text] if advice else []),
                rules=list(verdict.rules or policy.rules),
                code=verdict.code or "refused",
            )
        self._ensure_owner(session_id, actor, channel)
        method, path, body = policy.request(session_id, facts, flags)
        # The record (the client's key rule) and the step that vouches for it at a restart: one commit.
        with self.store.write() as db:
            record = self.client.begin(method, path, body, PURPOSE_RESUME, session_id=session_id, db=db)
            self.store.record_step(
                session_id, actor, "resume_requested", dict(inputs), "sending", idempotency_key=record.key, db=db
            )
        advice = policy.advice("BACKEND_UNAVAILABLE", facts, flags, self.runbooks)
        initial = advice.every if advice and advice.every else self.limits.resume_backoff_initial
        cap = advice.max_every if advice and advice.max_every else self.limits.resume_backoff_max
        total = advice.up_to if advice and advice.up_to else self.limits.resume_backoff_total
        start = self._now()
        try:
            return self._resume_loop(actor, session_id, record, policy, facts, flags, inputs, reporter,
                                     (initial, cap, total), start)
        except Interrupted:
            raise
        except KeyboardInterrupt:
            wait_id = next(
                (w.id for w in self.requests.active_waits(session_id) if w.kind == "reclamation"), None
            )
            raise Interrupted(self._resume_interrupted(actor, session_id, record, wait_id)) from None

    def _resume_loop(
        self,
        actor: str,
        session_id: str,
        record: Any,
        policy: DecisionPolicy,
        facts: Mapping[str, Any],
        flags: Mapping[str, Any],
        inputs: Mapping[str, Any],
        reporter: Reporter,
        backoff: tuple[float, float, float],
        start: datetime,
    ) -> Reply:
        """Send the stored resume until a definite answer; 503 BACKEND_UNAVAILABLE is waited out (R4.2)."""
        initial, cap, total = backoff
        delay = initial
        wait_id: int | None = None
        while True:
            try:
                receipt = self.client.send(record)
                break
            except ControlHostError as exc:
                if exc.code != "BACKEND_UNAVAILABLE":
                    if wait_id is not None:
                        self.requests.end_wait(wait_id, "done")
                    return self._resume_refused(actor, session_id, record, exc, policy, facts, flags)
                if wait_id is None:
                    wait_id = self.requests.start_wait(
                        session_id,
                        "reclamation",
                        actor,
                        self._iso(start + timedelta(seconds=total)),
                        detail="resume: waiting for the workspace reclamation to end (R4.2)",
                    )
                    reporter.post(
                        Message(
                            headline=f"Resume of `{session_id}`: 503 BACKEND_UNAVAILABLE — waiting for reclamation",
                            level="progress",
                            lines=[
                                f"A workspace-reclamation claim is held; the same request (same key) is retried "
                                f"with backoff: {text.duration(initial)} doubling to {text.duration(cap)}, for up "
                                f"to {text.duration(total)} (R4.2)."
                            ],
                            rules=["R4.2"],
                            session_id=session_id,
                        )
                    )
                elapsed = (self._now() - start).total_seconds()
                if elapsed >= total:
                    self.requests.end_wait(wait_id, "gave_up")
                    # R4.2: a 503 leaves no receipt and no record, so ending this logical request is safe.
                    self.store.finish_request(record.key, exc.status or 503, {"error": {"code": exc.code}})
                    self._record(
                        session_id,
                        actor,
                        "resume_gave_up",
                        inputs,
                        exc.code,
                        http_status=exc.status,
                        idempotency_key=record.key,
                    )
                    return Reply.of(
                        text.refusal(
                            f"Resume of `{session_id}` gave up: still BACKEND_UNAVAILABLE after "
                            f"{text.duration(elapsed)}",
                            "Reclamation is still running; try `/recover resume` later.",
                            rules=["R4.2"],
                            session_id=session_id,
                        ),
                        ok=False,
                    )
                self.clock.sleep(min(delay, max(0.0, total - elapsed)))
                reporter.progress(
                    Message(
                        headline=f"Still waiting for reclamation on `{session_id}` "
                        f"({text.age(self._iso(start), self._now())} so far)",
                        level="progress",
                        rules=["R4.2"],
                        session_id=session_id,
                    )
                )
                delay = min(delay * 2, cap)
        if wait_id is not None:
            self.requests.end_wait(wait_id, "done")
        receipt_id = _attr(receipt, "id")
        self._record(
            session_id,
            actor,
            "resume_accepted",
            inputs,
            str(_attr(receipt, "status") or "accepted"),
            http_status=_attr(receipt, "http_status") or 200,
            idempotency_key=record.key,
            receipt_id=receipt_id,
        )
        verification = self._verify(session_id, actor, policy, flags, receipt)
        reminder = Message(
            headline=f"Resumed `{session_id}` (receipt {receipt_id})",
            level="ok",
            lines=["Check separately that the new turn picked up the checkpoint's context (R5.2)."],
            rules=["R5.2", "R5.1"],
            session_id=session_id,
        )
        return Reply([reminder, *verification.messages])

    def _resume_refused(
        self,
        actor: str,
        session_id: str,
        record: Any,
        exc: ControlHostError,
        policy: DecisionPolicy,
        facts: Mapping[str, Any],
        flags: Mapping[str, Any],
    ) -> Reply:
        self._record(
            session_id,
            actor,
            "resume_refused",
            {"session_id": session_id},
            exc.code,
            http_status=exc.status,
            idempotency_key=record.key,
        )
        advice = policy.advice(exc.code, facts, flags, self.runbooks)
        lines = [exc.message, *([advice.text] if advice else [])]
        if exc.status is None or exc.status >= 500:
            lines.append("No definite answer: the request is kept and re-sent with the same key on restart.")
        return Reply.of(
            text.refusal(
                f"Resume of `{session_id}` refused: {exc.code}",
                *lines,
                rules=list(advice.rules) if advice else list(policy.rules),
                session_id=session_id,
            ),
            ok=False,
        )

    # == restart ==================================================================================

    def recover_after_restart(self, reporter: Reporter, *, actor: str | None = None) -> Reply:
        """Finish what a previous process left: in-flight requests re-sent, approved ones executed once.

        First names every unfinished request it found (session, decision, since when); each outcome
        is a message about its session, so the Slack app posts it in the case's thread.
        """
        who = actor or BOT
        messages: list[Message] = []
        ok = True
        found = self.unfinished()
        for item in found:
            log.info("unfinished request found: %s", item.line())
            reporter.post(
                Message(
                    headline=f"Unfinished request found: {item.line()}",
                    level="warn",
                    lines=[
                        "Finishing it now with its own Idempotency-Key."
                        if item.uncertain
                        else "Nothing uncertain was sent for it; it continues where it stopped."
                    ],
                    session_id=item.session_id,
                )
            )
        if found:
            self._record(
                None, who, "unfinished_found", {}, f"{len(found)} found", detail={"requests": [u.line() for u in found]}
            )
        # Stored requests whose answer never arrived are re-sent first, each with its own key and body,
        # when a step of the chain vouches for them (decisions: through their request, below).
        replayed, refused = self._replay_vouched()
        messages.extend(refused)
        ok = not refused
        if replayed:
            messages.append(
                Message(
                    headline=f"Re-sent {len(replayed)} unfinished request(s) with their original Idempotency-Keys"
                )
            )
        for result in replayed:
            if result.record.purpose == PURPOSE_RESUME:
                reply = self._settle_replayed_resume(result, who)
                messages.extend(reply.messages)
                ok = ok and reply.ok
        for req in self.requests.find(states=("sending", "uncertain")):
            reply = self._resend(req, reporter)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("approved",)):
            reply = self._execute(req.id, req.approved_by or BOT, reporter)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("waiting",)):
            waits = [w for w in self.requests.active_waits(req.session_id) if w.request_id == req.id]
            for w in waits:
                self.requests.end_wait(w.id, "interrupted")
            deadline = parse_time(waits[-1].deadline) if waits else None
            reply = self._wait_for_gone(req.id, BOT, reporter, deadline=deadline)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("recheck",)):
            # Still waiting for a person's effects re-check (R3.10): ask again, send nothing.
            expired = self._expire_if_due(req, BOT)
            messages.append(expired or text.recheck_message(req, None, irreversible=self.ctx.irreversible(req.decision)))
        for w in self.requests.active_waits():
            if w.kind == "reclamation":
                self.requests.end_wait(w.id, "interrupted")
        self._record(
            None,
            who,
            "recover_after_restart",
            {},
            "done",
            detail={"messages": [m.headline for m in messages]},
        )
        if not messages:
            messages.append(Message(headline="Nothing to recover: no approved or in-flight decisions."))
        return Reply(messages, ok=ok)

    def _settle_replayed_resume(self, result: Any, actor: str) -> Reply:
        """Record the outcome of a resume re-sent with its stored key, about its session (R4.2)."""
        record = result.record
        sid = record.session_id or "?"
        inputs = {"session_id": sid, "replayed": True}
        if result.receipt is not None:
            receipt = result.receipt
            self._record(sid, actor, "resume_accepted", inputs, str(_attr(receipt, "status") or "accepted"),
                         http_status=_attr(receipt, "http_status") or 200, idempotency_key=record.key,
                         receipt_id=_attr(receipt, "id"))
            policy = self._policy("resume")
            verification = self._verify(sid, actor, policy, {"reason": "replayed"}, receipt)
            head = Message(headline=f"Finished the resume of `{sid}` left by an earlier run: accepted "
                           f"(receipt {_attr(receipt, 'id')}, same Idempotency-Key)", level="ok", session_id=sid,
                           rules=["R4.2", "R5.1"])
            return Reply([head, *verification.messages])
        exc = result.error
        if result.still_pending:
            self._record(sid, actor, "resume_uncertain", inputs, exc.code if exc else "uncertain",
                         idempotency_key=record.key)
            return Reply.of(text.refusal(
                f"The resume of `{sid}` left by an earlier run is still without a definite answer ({exc.code if exc else '?'})",
                "It keeps its Idempotency-Key; it is re-sent with it on the next replay or start.",
                session_id=sid, rules=["R4.2"]), ok=False)
        self._record(sid, actor, "resume_refused", inputs, exc.code if exc else "refused",
                     http_status=exc.status if exc else None, idempotency_key=record.key)
        return Reply.of(text.refusal(
            f"The resume of `{sid}` left by an earlier run was refused: {exc.code if exc else '?'}",
            *([exc.message] if exc else []), f"Check it: `/recover diagnose {sid}`.", session_id=sid), ok=False)

    def _resend(self, req: DecisionRequest, reporter: Reporter) -> Reply:
        """A ``sending`` or ``uncertain`` request: settle it from its stored idempotency record, same key and body."""
        with self._interruptible(req.id, BOT):
            return self._resend_now(req, reporter)

    def _resend_now(self, req: DecisionRequest, reporter: Reporter) -> Reply:
        if not req.idem_key or not req.body:
            return Reply.of(
                text.refusal(f"request {req.id} is in flight without a stored key or body"), ok=False
            )
        record = self.store.get_request(req.idem_key)
        if record is None:
            # The record commits with the move to sending and before any send: without one, nothing was
            # ever sent for this request (a store written before that rule), so it is withdrawn, never sent.
            return self._withdraw(
                req,
                BOT,
                "withdrawn: in flight without an idempotency record, so nothing was sent",
                step_inputs={"request_id": req.id, "restart": True},
                from_states=IN_FLIGHT_STATES,
            )
        # send() returns the recorded receipt (or raises the recorded refusal) for an answered record,
        # and re-sends a pending one with its stored key and body: the API applies it at most once.
        return self._deliver(req.id, BOT, record, reporter)
