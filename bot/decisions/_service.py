"""DecisionService: decide, the two-person rule, execution exactly once, verification, resume, cases.

Plain Python, no Slack: the Slack app and the console both reach it through the router, so no front
end can skip a rule. Every method returns a :class:`bot.messages.Reply`; slow work (waits, resume)
reports through a :class:`bot.messages.Reporter`. Time comes from the injected clock only.

Exactly once, whatever happens to the network or the process:
- approval is a compare-and-set ``pending → approved`` in the database (one winner across processes);
- execution is a second compare-and-set ``approved → executing`` that stores the Idempotency-Key and
  the exact body *before* the idempotency record is written and anything is sent;
- after a crash :meth:`recover_after_restart` finishes ``approved`` requests (fresh facts check) and
  re-sends ``executing`` ones with their stored key and body, so the API sees one logical request.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from bot.clock import Clock, isoformat, parse_time
from bot.decisions import _text as text
from bot.decisions._policy import DecisionPolicy, Limits, decision_policy, runbook_limits
from bot.decisions._requests import DecisionRequest, RequestStore, new_request_id
from bot.decisions._rules import (
    ID_RE,
    ApproverDirectory,
    approver_allowed,
    changed_facts,
    channel_allowed,
    decisive_facts,
)
from bot.errors import ControlHostError, DecisionError, RecoverError
from bot.messages import Message, Reply, Reporter
from bot.store import Store

DECISIONS_PATH = "/v1/sessions/{session_id}/recovery-decisions"
RESUME_PATH = "/v1/sessions/{session_id}/resume"

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
)

ADVICE_RULES = {
    "REQUEST_STALE": ["R2.10"],
    "CHECKPOINT_UNAVAILABLE": ["R3.11"],
    "RECOVERY_REQUIRED": ["R3.9"],
    "BACKEND_UNAVAILABLE": ["R4.2"],
}


def _attr(obj: Any, *path: str) -> Any:
    """Tolerant field access on client models or dicts (missing → None, shown as unknown)."""
    for name in path:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return obj


class DecisionService:
    """The decisions core. Cheap to construct: all state lives in the store's SQLite file."""

    def __init__(
        self,
        *,
        store: Store,
        client: Any,
        runbooks: Any,
        diagnoser: Any,
        clock: Clock,
        approvers: tuple[str, ...] = (),
        channels: tuple[str, ...] = (),
        directory: ApproverDirectory | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.runbooks = runbooks
        self.diagnoser = diagnoser
        self.clock = clock
        self.approvers = tuple(approvers)
        self.channels = tuple(channels)
        self.directory = directory
        self.requests = RequestStore(store)
        self.limits: Limits = runbook_limits(runbooks)

    # == helpers ==================================================================================

    def _now(self) -> datetime:
        return self.clock.now()

    def _iso(self, when: datetime | None = None) -> str:
        return isoformat(when or self._now()) or ""

    def _policy(self, decision: str) -> DecisionPolicy:
        return decision_policy(self.runbooks, decision, self.limits)

    def _record(
        self,
        session_id: str | None,
        actor: str,
        step: str,
        inputs: Mapping[str, Any],
        outcome: str,
        **kw: Any,
    ) -> None:
        self.store.record_step(session_id, actor, step, dict(inputs), outcome, **kw)

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
        """Record a refusal as a step (the audit shows attempts too) and say why, actionably."""
        self._record(session_id, actor, step, inputs, code, detail={"why": headline, "lines": list(lines)})
        return Reply(
            [*extra, text.refusal(headline, *lines, rules=list(rules), session_id=session_id)], ok=False
        )

    def _diagnose(self, session_id: str, turn_id: str | None) -> tuple[dict[str, Any], str | None]:
        """A fresh diagnosis: its facts, and the target turn's status when a turn is named."""
        diagnosis = self.diagnoser.gather(session_id)
        facts = dict(_attr(diagnosis, "facts") or {})
        turn_status: str | None = None
        if turn_id:
            if facts.get("unknown_turn.id") == turn_id and facts.get("unknown_turn.present"):
                turn_status = "outcome_unknown"
            else:
                try:
                    turn_status = _attr(self.client.get_turn(session_id, turn_id), "status")
                except ControlHostError:
                    turn_status = None
        return facts, turn_status

    def _verdict(self, decision: str, facts: Mapping[str, Any], flags: Mapping[str, Any]) -> Any:
        from bot.runbook import check_decision

        return check_decision(self.runbooks, decision, dict(facts), dict(flags))

    @staticmethod
    def _flags(
        turn: str | None, evidence: str | None, effects: str | None, reason: str | None, yes: bool
    ) -> dict[str, Any]:
        return {"turn": turn, "evidence": evidence, "effects": effects, "reason": reason, "yes": yes}

    def _body(self, req_or_args: Mapping[str, Any], revision: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "decision": req_or_args["decision"],
            "expected_revision": revision,
            "reason": req_or_args["reason"],
        }
        if req_or_args.get("turn_id"):
            body["target_turn_id"] = req_or_args["turn_id"]
        if req_or_args.get("evidence_ref"):
            body["evidence_ref"] = req_or_args["evidence_ref"]
        return body

    def _mentions(self) -> list[str]:
        return list(self.approvers)

    def _ensure_owner(self, session_id: str, actor: str, channel: str | None) -> None:
        case = self.store.open_case(session_id, actor, channel)
        if case.owner is None:
            self.store.set_owner(case.id, actor)

    def _repeated(self, session_id: str, decision: str, facts: Mapping[str, Any]) -> int:
        """R5.4: how often this decision already ran here without fixing the cause (same attention)."""
        count = 0
        for r in self.requests.find(states=("executed",), session_id=session_id):
            if (
                r.decision == decision
                and r.facts.get("attention.code") == facts.get("attention.code")
                and facts.get("attention.code") is not None
            ):
                count += 1
        return count

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
        inputs = {
            "decision": decision,
            "turn": turn,
            "evidence": evidence,
            "effects": effects,
            "reason": reason,
            "yes": yes,
            "channel": channel,
        }
        pre = self._precheck(
            actor, channel, session_id, decision, turn, evidence, effects, reason, "decide", inputs
        )
        if isinstance(pre, Reply):
            return pre
        policy = pre
        facts, turn_status = self._diagnose(session_id, turn)
        verdict = self._verdict(decision, facts, self._flags(turn, evidence, effects, reason, yes))
        if not _attr(verdict, "ok"):
            return self._refuse(
                actor,
                session_id,
                "decide",
                inputs,
                f"`{decision}` on `{session_id}` will not be accepted: {_attr(verdict, 'reason')}",
                f"Code: {_attr(verdict, 'code') or 'unknown'}",
                "Nothing was sent. Run `/recover diagnose " + session_id + "` for the valid decisions.",
                rules=list(_attr(verdict, "rules") or policy.rules),
            )
        now = self._now()
        repeated = self._repeated(session_id, decision, facts)
        flagged = repeated + 1 >= self.limits.repeated_threshold and repeated > 0
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
            req = self.requests.insert(db, content)
            self.store.record_step(
                session_id,
                actor,
                "decision_requested",
                inputs,
                req.state,
                detail={
                    "request_id": req.id,
                    "policy": req.policy,
                    "content_hash": req.content_hash,
                    "facts": req.facts,
                    "repeated": req.repeated,
                },
                db=db,
            )
        rules = list(_attr(verdict, "rules") or policy.rules)
        if policy.approval == "two_person":
            msg = text.approval_request_message(req, self._mentions(), rules)
            if yes:
                msg.lines.insert(
                    0, "`--yes` does not apply: a two-person decision is never executed by its requester."
                )
            return Reply.of(msg)
        if policy.approval == "confirm" and not yes:
            command = self._decide_command(req) + " --yes"
            return Reply.of(text.confirmation_message(req, policy.drops, rules, command))
        # Confirmed from text (--yes), or a decision that needs no confirmation.
        with self.store.write() as db:
            if not self.requests.transition(
                db, req.id, ("pending",), "approved", approved_by=actor, approved_at=self._iso()
            ):
                return Reply.of(text.refusal(f"request {req.id} was already handled"), ok=False)
            self.store.record_step(
                session_id, actor, "decision_confirmed", {"request_id": req.id, "yes": yes}, "approved", db=db
            )
        return self._execute(req.id, actor, reporter)

    def _decide_command(self, req: DecisionRequest) -> str:
        parts = [f"/recover decide {req.session_id} {req.decision}"]
        if req.turn_id:
            parts.append(f"--turn {req.turn_id}")
        if req.evidence_ref:
            parts.append(f"--evidence {req.evidence_ref}")
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
        turn: str | None,
        evidence: str | None,
        effects: str | None,
        reason: str | None,
        step: str,
        inputs: Mapping[str, Any],
    ) -> DecisionPolicy | Reply:
        """Checks that need no network: channel, ids, the decision's required flags."""
        if not channel_allowed(channel, self.channels):
            return self._refuse(
                actor,
                None,
                step,
                {**inputs, "session_id": session_id},
                f"`{step}` is refused outside the recovery channels",
                "Run it in one of: " + ", ".join(f"<#{c}>" for c in self.channels) + ".",
            )
        for label, value in (("session", session_id), ("turn", turn)):
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
        except DecisionError as exc:
            return self._refuse(
                actor, session_id, step, inputs, exc.message, *([exc.hint] if exc.hint else [])
            )
        given = {"turn": turn, "evidence": evidence, "effects": effects, "reason": reason}
        missing = [
            f"--{flag}" for flag in (*policy.required, "reason") if not (given.get(flag) or "").strip()
        ]
        if missing:
            return self._refuse(
                actor,
                session_id,
                step,
                inputs,
                f"`{decision}` needs {', '.join(dict.fromkeys(missing))}",
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
        inputs = {
            "decision": decision,
            "turn": turn,
            "evidence": evidence,
            "effects": effects,
            "reason": reason,
        }
        pre = self._precheck(
            actor, channel, session_id, decision, turn, evidence, effects, reason, "dryrun_decide", inputs
        )
        if isinstance(pre, Reply):
            return pre
        policy = pre
        facts, _ = self._diagnose(session_id, turn)
        verdict = self._verdict(decision, facts, self._flags(turn, evidence, effects, reason, yes))
        revision = facts.get("session.revision")
        body = self._body(
            {"decision": decision, "reason": reason, "turn_id": turn, "evidence_ref": evidence},
            revision if isinstance(revision, int) else -1,
        )
        lines = [
            f"POST {DECISIONS_PATH.format(session_id=session_id)}",
            "Authorization: Bearer ***",
            "Idempotency-Key: *** (a new uuid4, stored before the first send and reused on retry)",
            "Content-Type: application/json",
            "",
            json.dumps(body, indent=2, sort_keys=True),
            "",
        ]
        if not isinstance(revision, int):
            lines.append("[!] The session's revision is unknown: the real request would be refused.")
        if _attr(verdict, "ok"):
            lines.append(
                f"Expected back: 200 with a decision receipt (status accepted, revision "
                f"{revision + 1 if isinstance(revision, int) else 'unknown'}); then verification (R5.1)."
            )
        else:
            lines.append(
                f"Expected back: refused before sending — {_attr(verdict, 'reason')} "
                f"({_attr(verdict, 'code') or 'unknown'})."
            )
        if policy.approval == "two_person":
            lines.append("Needs approval by a second person before it is sent.")
        elif policy.approval == "confirm":
            lines.append("Needs an explicit confirmation (button or --yes) before it is sent.")
        if policy.drops:
            lines.append(f"Drops: {policy.drops}")
        self._record(session_id, actor, "dryrun_decide", inputs, "shown", detail={"body": body})
        return Reply.of(
            Message(
                headline=f"Dry run: `{decision}` on `{session_id}` (nothing sent)",
                lines=lines,
                rules=list(_attr(verdict, "rules") or policy.rules),
                session_id=session_id,
            )
        )

    # == approval, confirmation, rejection ========================================================

    def _load(self, request_id: str) -> DecisionRequest | None:
        if not isinstance(request_id, str) or not request_id.startswith("req_"):
            return None
        return self.requests.get(request_id)

    def _tampered(self, req: DecisionRequest) -> bool:
        """The stored content must hash to the value written in the hash-chained step log."""
        from bot.decisions._requests import content_hash

        if content_hash(req.content()) != req.content_hash:
            return True
        for step in self.store.steps(session_id=req.session_id):
            if step.step == "decision_requested" and (step.detail or {}).get("request_id") == req.id:
                return (step.detail or {}).get("content_hash") != req.content_hash
        return True

    def _expire_if_due(self, req: DecisionRequest, actor: str) -> Message | None:
        expires = parse_time(req.expires_at)
        if req.state != "pending" or expires is None or self._now() < expires:
            return None
        with self.store.write() as db:
            if self.requests.transition(
                db, req.id, ("pending",), "expired", decided_by=actor, decided_at=self._iso(), note="expired"
            ):
                self.store.record_step(
                    req.session_id, actor, "decision_expired", {"request_id": req.id}, "expired", db=db
                )
        fresh = self.requests.get(req.id) or req
        return text.updated_request_message(fresh, f"expired at {req.expires_at}; nothing was sent", "warn")

    def approve(self, actor: str, channel: str | None, request_id: str, reporter: Reporter) -> Reply:
        """A second, allowed person approves; then the request executes (at most once)."""
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
                "approvals are refused outside the recovery channels",
                "Approve in one of: " + ", ".join(f"<#{c}>" for c in self.channels) + ".",
            )
        if req.policy != "two_person":
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                f"request {req.id} is a single-person `{req.decision}`: it is confirmed, not approved",
                "Its requester confirms it with the Confirm button or `--yes`.",
            )
        if actor == req.requester:
            # The two-person rule: by button or by text, the requester never approves their own request.
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                "you cannot approve your own request: a second person must approve it",
                f"Ask another on-call engineer to run `/recover approve {req.id}`.",
                rules=["R3.10"],
            )
        allowed, problem = approver_allowed(actor, self.approvers, self.directory)
        if not allowed:
            return self._refuse(
                actor,
                sid,
                "approve",
                inputs,
                f"<@{actor}> is not an allowed approver (RECOVER_APPROVERS)",
                *([problem] if problem else []),
                "Allowed: " + ", ".join(self.approvers) + ".",
            )
        if req.state == "approved":
            # Approved but not executed (a crash, an unreadable API): an allowed person retries execution.
            return self._execute(req.id, actor, reporter)
        if req.state != "pending":
            return self._refuse(actor, sid, "approve", inputs, self._state_text(req))
        if self._tampered(req):
            with self.store.write() as db:
                self.requests.transition(
                    db,
                    req.id,
                    ("pending",),
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
                "Make a new request and check the step store (`recover-bot audit verify`).",
                extra=[text.updated_request_message(fresh, "void: content tampered", "error")],
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
                db, req.id, ("pending",), "approved", approved_by=actor, approved_at=self._iso()
            )
            if won:
                self.store.record_step(
                    sid,
                    actor,
                    "decision_approved",
                    {"request_id": req.id, "content_hash": req.content_hash},
                    "approved",
                    db=db,
                )
        if not won:
            latest = self.requests.get(req.id) or req
            return self._refuse(actor, sid, "approve", inputs, self._state_text(latest))
        return self._execute(req.id, actor, reporter)

    def confirm(self, actor: str, channel: str | None, request_id: str, reporter: Reporter) -> Reply:
        """The explicit confirmation of a single-person decision (retry_restore, start_fresh)."""
        inputs = {"request_id": request_id, "channel": channel}
        req = self._load(request_id)
        if req is None:
            return self._refuse(actor, None, "confirm", inputs, f"no decision request {request_id!r}")
        sid = req.session_id
        if not channel_allowed(channel, self.channels):
            return self._refuse(
                actor, sid, "confirm", inputs, "decisions are refused outside the recovery channels"
            )
        if req.policy == "two_person":
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"request {req.id} needs approval by a second person, not a confirmation",
                f"Another person runs `/recover approve {req.id}`.",
            )
        if actor != req.requester:
            return self._refuse(
                actor,
                sid,
                "confirm",
                inputs,
                f"only <@{req.requester}>, who asked for it, confirms request {req.id}",
                "Make your own request with `/recover decide …` if you want it.",
            )
        if req.state == "approved":
            return self._execute(req.id, actor, reporter)
        if req.state != "pending":
            return self._refuse(actor, sid, "confirm", inputs, self._state_text(req))
        if self._tampered(req):
            return self._refuse(
                actor, sid, "confirm", inputs, f"request {req.id} was changed after it was made"
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
                db, req.id, ("pending",), "approved", approved_by=actor, approved_at=self._iso()
            )
            if won:
                self.store.record_step(
                    sid, actor, "decision_confirmed", {"request_id": req.id}, "approved", db=db
                )
        if not won:
            return self._refuse(
                actor, sid, "confirm", inputs, self._state_text(self.requests.get(req.id) or req)
            )
        return self._execute(req.id, actor, reporter)

    def reject(self, actor: str, channel: str | None, request_id: str, reason: str | None = None) -> Reply:
        """Anyone allowed to approve may reject; the requester may withdraw their own request."""
        inputs = {"request_id": request_id, "channel": channel, "reason": reason}
        req = self._load(request_id)
        if req is None:
            return self._refuse(actor, None, "reject", inputs, f"no decision request {request_id!r}")
        sid = req.session_id
        if not channel_allowed(channel, self.channels):
            return self._refuse(
                actor, sid, "reject", inputs, "rejections are refused outside the recovery channels"
            )
        if actor != req.requester:
            allowed, problem = approver_allowed(actor, self.approvers, self.directory)
            if not allowed:
                return self._refuse(
                    actor,
                    sid,
                    "reject",
                    inputs,
                    f"<@{actor}> is not an allowed approver (RECOVER_APPROVERS)",
                    *([problem] if problem else []),
                )
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, ("pending",), "rejected", decided_by=actor, decided_at=self._iso(), note=reason
            )
            if won:
                self.store.record_step(sid, actor, "decision_rejected", inputs, "rejected", db=db)
        if not won:
            return self._refuse(
                actor, sid, "reject", inputs, self._state_text(self.requests.get(req.id) or req)
            )
        fresh = self.requests.get(req.id) or req
        who = "withdrawn by its requester" if actor == req.requester else f"rejected by <@{actor}>"
        return Reply.of(
            text.updated_request_message(
                fresh, f"{who}{': ' + reason if reason else ''}; nothing was sent", "warn"
            )
        )

    def expire_due(self) -> list[Message]:
        """Expire every pending request past its expiry; the updated messages to show."""
        out: list[Message] = []
        for req in self.requests.find(states=("pending",)):
            msg = self._expire_if_due(req, "recover-bot")
            if msg is not None and (self.requests.get(req.id) or req).state == "expired":
                out.append(msg)
        return out

    @staticmethod
    def _state_text(req: DecisionRequest) -> str:
        by = req.decided_by or req.approved_by
        who = f" by <@{by}>" if by else ""
        when = req.decided_at or req.approved_at or req.updated_at
        note = f" ({req.note})" if req.note else ""
        return f"request {req.id} is already {req.state}{who} at {when}{note}: nothing more to do"

    # == execution ================================================================================

    def _execute(self, request_id: str, actor: str, reporter: Reporter) -> Reply:
        """approved → executing (facts re-checked, expected_revision read in the same check) → send."""
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
                    f"Nothing was sent. Approve again (`/recover approve {req.id}`) to retry, "
                    "or the bot retries it after a restart.",
                    session_id=sid,
                ),
                ok=False,
            )
        now_facts = decisive_facts(facts, turn_status)
        changes = changed_facts(req.facts, now_facts)
        revision = facts.get("session.revision")
        verdict = self._verdict(
            req.decision, facts, self._flags(req.turn_id, req.evidence_ref, req.effects, req.reason, True)
        )
        void_why: list[str] = []
        if changes:
            void_why = [
                "The session's decisive facts changed since the request:",
                *(f"  {c}" for c in changes),
            ]
        elif not _attr(verdict, "ok"):
            void_why = [f"The runbook no longer accepts it: {_attr(verdict, 'reason')}"]
        elif not isinstance(revision, int):
            void_why = [
                "The session's revision is unknown (source.session="
                f"{facts.get('source.session', 'unknown')}): cannot set expected_revision."
            ]
        if void_why:
            with self.store.write() as db:
                if self.requests.transition(
                    db,
                    req.id,
                    ("approved",),
                    "void",
                    decided_by=actor,
                    decided_at=self._iso(),
                    note="; ".join(void_why),
                ):
                    self.store.record_step(
                        sid,
                        actor,
                        "decision_void",
                        {"request_id": req.id},
                        "void",
                        detail={"changes": changes, "why": void_why},
                        db=db,
                    )
            fresh = self.requests.get(req.id) or req
            return Reply(
                [
                    text.updated_request_message(fresh, "void: " + void_why[0], "error"),
                    text.refusal(
                        f"approval of {req.id} is void: nothing was sent",
                        *void_why,
                        "Look again (`/recover diagnose " + sid + "`) and make a new request.",
                        session_id=sid,
                    ),
                ],
                ok=False,
            )
        assert isinstance(revision, int)
        body = self._body(
            {
                "decision": req.decision,
                "reason": req.reason,
                "turn_id": req.turn_id,
                "evidence_ref": req.evidence_ref,
            },
            revision,
        )
        return self._send(req, actor, body, reporter, from_states=("approved",))

    def _send(
        self,
        req: DecisionRequest,
        actor: str,
        body: dict[str, Any],
        reporter: Reporter,
        *,
        from_states: Sequence[str],
    ) -> Reply:
        """CAS to executing with a new key and the exact body, commit the idempotency record, send."""
        key = str(uuid.uuid4())
        body_text = json.dumps(body, separators=(",", ":"))
        with self.store.write() as db:
            won = self.requests.transition(db, req.id, from_states, "executing", idem_key=key, body=body_text)
            if won:
                self.requests.count_sends(db, req.id)
                self.store.record_step(
                    req.session_id,
                    actor,
                    "decision_sending",
                    {"request_id": req.id, "body": body},
                    "executing",
                    idempotency_key=key,
                    db=db,
                )
        if not won:
            latest = self.requests.get(req.id) or req
            return Reply.of(text.refusal(self._state_text(latest)), ok=False)
        record = self.store.begin_request(
            "POST",
            DECISIONS_PATH.format(session_id=req.session_id),
            body_text,
            f"decision {req.id}",
            key=key,
            session_id=req.session_id,
        )
        return self._deliver(req.id, actor, record, reporter)

    def _deliver(self, request_id: str, actor: str, record: Any, reporter: Reporter) -> Reply:
        """Send a stored request (same key, same body) and settle the request from the answer."""
        req = self.requests.get(request_id)
        assert req is not None
        try:
            receipt = self.client.send(record)
        except ControlHostError as exc:
            return self._on_error(req, actor, exc, reporter)
        return self._on_accepted(req, actor, receipt, reporter)

    def _on_accepted(self, req: DecisionRequest, actor: str, receipt: Any, reporter: Reporter) -> Reply:
        receipt_id = _attr(receipt, "id")
        result = {
            "receipt_id": receipt_id,
            "status": _attr(receipt, "status"),
            "revision": _attr(receipt, "session", "revision"),
            "resumable": _attr(receipt, "result", "resumable"),
        }
        with self.store.write() as db:
            won = self.requests.transition(
                db, req.id, ("executing",), "executed", receipt_id=receipt_id, http_status=200, result=result
            )
            if won:
                self.store.record_step(
                    req.session_id,
                    actor,
                    "decision_executed",
                    {"request_id": req.id},
                    str(_attr(receipt, "status") or "accepted"),
                    detail=result,
                    http_status=200,
                    idempotency_key=req.idem_key,
                    receipt_id=receipt_id,
                    db=db,
                )
        fresh = self.requests.get(req.id) or req
        head = text.updated_request_message(
            fresh, f"executed (approved by <@{fresh.approved_by}>); receipt {receipt_id}", "ok"
        )
        verification = self._verify(req.session_id, actor, req.decision, receipt)
        return Reply([head, *verification.messages], ok=True)

    def _on_error(self, req: DecisionRequest, actor: str, exc: ControlHostError, reporter: Reporter) -> Reply:
        code = exc.code
        status = exc.status
        definite = status is not None and 400 <= status < 500
        if not definite:
            # Uncertain: no answer / 5xx. The stored key + body are re-sent later; never a new key (R0.3).
            self._record(
                req.session_id,
                actor,
                "decision_uncertain",
                {"request_id": req.id},
                code,
                http_status=status,
                idempotency_key=req.idem_key,
            )
            return Reply.of(
                text.refusal(
                    f"`{req.decision}` on `{req.session_id}`: no definite answer ({code})",
                    f"Request {req.id} stays in flight with its Idempotency-Key; it is re-sent with the same key "
                    "and body after a restart, or approve again to retry now.",
                    session_id=req.session_id,
                ),
                ok=False,
            )
        if code == "RECOVERY_REQUIRED":
            return self._wait_confirmed_gone(req, actor, exc, reporter)
        advice, rules = self._advice(req, code, exc)
        with self.store.write() as db:
            if self.requests.transition(
                db,
                req.id,
                ("executing",),
                "failed",
                http_status=status,
                error_code=code,
                note=advice[0] if advice else exc.message,
            ):
                self.store.record_step(
                    req.session_id,
                    actor,
                    "decision_refused_by_api",
                    {"request_id": req.id},
                    code,
                    detail={"message": exc.message, "advice": advice},
                    http_status=status,
                    idempotency_key=req.idem_key,
                    db=db,
                )
        fresh = self.requests.get(req.id) or req
        return Reply(
            [
                text.updated_request_message(fresh, f"refused by the control host: {code}", "error"),
                Message(
                    headline=f"The control host refused `{req.decision}` on `{req.session_id}`: {status} {code}",
                    level="error",
                    lines=[exc.message, *advice],
                    rules=rules,
                    session_id=req.session_id,
                ),
            ],
            ok=False,
        )

    def _advice(self, req: DecisionRequest, code: str, exc: ControlHostError) -> tuple[list[str], list[str]]:
        """The runbook's advice for an API refusal."""
        policy = self._policy(req.decision)
        rules = ADVICE_RULES.get(code, list(policy.rules))
        if code == "REQUEST_STALE":
            valid = policy.accepted_when or "see `/recover diagnose` for the decisions valid now"
            return [
                f"REQUEST_STALE: `{req.decision}` is not valid in the session's current state (or its "
                f"revision moved). It is accepted when: {valid}.",
                f"Re-read the session with `/recover diagnose {req.session_id}` and decide again.",
            ], rules
        if code == "CHECKPOINT_UNAVAILABLE":
            return [
                f"CHECKPOINT_UNAVAILABLE: no committed checkpoint covers turn {req.turn_id or 'unknown'}, so "
                "`confirm_completed` cannot be accepted (R3.11).",
                "Consider `abandon` (the turn is closed as cancelled and not re-run) after checking its "
                "external effects (R3.10).",
            ], ["R3.11", "R3.10"]
        if exc.status in (401, 403):
            return ["The API key is wrong or lacks the sessions:recover scope (R0.1)."], ["R0.1"]
        return [f"{code}: {exc.message}"], rules

    def _wait_confirmed_gone(
        self, req: DecisionRequest, actor: str, exc: ControlHostError, reporter: Reporter
    ) -> Reply:
        """R3.9: RECOVERY_REQUIRED → wait for the scheduler's confirmation, then submit ONCE, anew."""
        sid = req.session_id
        with self.store.write() as db:
            self.requests.transition(
                db, req.id, ("executing",), "waiting", http_status=exc.status, error_code=exc.code
            )
            self.store.record_step(
                sid,
                actor,
                "decision_refused_by_api",
                {"request_id": req.id},
                exc.code,
                detail={"message": exc.message, "next": "wait for the scheduler"},
                http_status=exc.status,
                idempotency_key=req.idem_key,
                db=db,
            )
        deadline = self._now() + timedelta(seconds=self.limits.recovery_wait_max)
        wait_id = self.requests.start_wait(
            sid,
            "recovery_required",
            actor,
            self._iso(deadline),
            request_id=req.id,
            detail=f"{req.decision}: waiting for the scheduler to confirm the worker gone",
        )
        return self._continue_wait(req.id, actor, wait_id, deadline, reporter)

    def _continue_wait(
        self, request_id: str, actor: str, wait_id: int, deadline: datetime, reporter: Reporter
    ) -> Reply:
        req = self.requests.get(request_id)
        assert req is not None
        sid = req.session_id
        poll = self.limits.recovery_wait_poll
        reporter.post(
            Message(
                headline=f"`{req.decision}` on `{sid}`: RECOVERY_REQUIRED — the previous worker is not yet confirmed gone",
                level="progress",
                lines=[
                    f"Waiting for the scheduler's confirmation: polling every {text.duration(poll)} until "
                    f"{self._iso(deadline)}; then the facts are re-checked and the decision is submitted once, "
                    "as a new request."
                ],
                rules=["R3.9"],
                session_id=sid,
            )
        )
        gone = False
        while True:
            try:
                session = self.client.get_session(sid)
                gone = _attr(session, "execution", "state") == "gone"
            except ControlHostError:
                gone = False
            if gone or self._now() >= deadline:
                break
            self.clock.sleep(min(poll, max(0.0, (deadline - self._now()).total_seconds())))
            reporter.progress(
                Message(
                    headline=f"Still waiting for the scheduler to confirm the worker of `{sid}` gone "
                    f"(since {req.updated_at}, until {self._iso(deadline)})",
                    level="progress",
                    rules=["R3.9"],
                    session_id=sid,
                )
            )
        if not gone:
            self.requests.end_wait(wait_id, "gave_up")
            with self.store.write() as db:
                self.requests.transition(
                    db,
                    req.id,
                    ("waiting",),
                    "failed",
                    error_code="RECOVERY_REQUIRED",
                    note="the worker was not confirmed gone in time",
                )
                self.store.record_step(
                    sid, actor, "decision_wait_gave_up", {"request_id": req.id}, "RECOVERY_REQUIRED", db=db
                )
            msg = text.refusal(
                f"`{req.decision}` on `{sid}` was not sent again: the worker was not confirmed gone within "
                f"{text.duration(self.limits.recovery_wait_max)}",
                "Check the scheduler (R1.5: a reconciler pass does not remove containers), then decide again.",
                rules=["R3.9", "R1.5"],
                session_id=sid,
            )
            reporter.post(msg)
            return Reply.of(msg, ok=False)
        self.requests.end_wait(wait_id, "done")
        reporter.post(
            Message(
                headline=f"The scheduler confirmed the worker of `{sid}` gone: re-checking the facts",
                level="progress",
                rules=["R3.9"],
                session_id=sid,
            )
        )
        facts, turn_status = self._diagnose(sid, req.turn_id)
        changes = changed_facts(req.facts, decisive_facts(facts, turn_status))
        verdict = self._verdict(
            req.decision, facts, self._flags(req.turn_id, req.evidence_ref, req.effects, req.reason, True)
        )
        revision = facts.get("session.revision")
        if changes or not _attr(verdict, "ok") or not isinstance(revision, int):
            why = [f"changed: {c}" for c in changes] or [str(_attr(verdict, "reason") or "revision unknown")]
            with self.store.write() as db:
                self.requests.transition(db, req.id, ("waiting",), "void", note="; ".join(why))
                self.store.record_step(
                    sid, actor, "decision_void", {"request_id": req.id}, "void", detail={"why": why}, db=db
                )
            msg = text.refusal(
                f"`{req.decision}` on `{sid}` was not submitted after the wait", *why, session_id=sid
            )
            reporter.post(msg)
            return Reply.of(msg, ok=False)
        body = self._body(
            {
                "decision": req.decision,
                "reason": req.reason,
                "turn_id": req.turn_id,
                "evidence_ref": req.evidence_ref,
            },
            revision,
        )
        reply = self._send(req, actor, body, reporter, from_states=("waiting",))
        final = self.requests.get(req.id) or req
        if final.state == "waiting":
            # A second RECOVERY_REQUIRED after the confirmation: one new submission only, then stop.
            with self.store.write() as db:
                self.requests.transition(db, req.id, ("waiting",), "failed", error_code="RECOVERY_REQUIRED")
        reporter.post(
            Message(
                headline=f"`{req.decision}` on `{sid}` after the wait: {final.state}",
                level="ok" if final.state == "executed" else "error",
                session_id=sid,
                lines=[m.headline for m in reply.messages],
            )
        )
        return reply

    # == verification & resume ====================================================================

    def _verify(self, session_id: str, actor: str, decision: str, receipt: Any) -> Reply:
        """R5.1/R3.12: re-read the session; say revision, status, admission, resumable and the next step."""
        try:
            session = self.client.get_session(session_id)
        except ControlHostError as exc:
            msg = Message(
                headline=f"Accepted, but the session could not be re-read: {exc.code}",
                level="warn",
                lines=[
                    "Acceptance is not the same as the worker being gone (R5.1): check with "
                    f"`/recover diagnose {session_id}`."
                ],
                rules=["R5.1"],
                session_id=session_id,
            )
            self._record(session_id, actor, "verification", {"decision": decision}, "unreadable")
            return Reply.of(msg)
        status = _attr(session, "status")
        admission = _attr(session, "admission_state")
        resumable = _attr(session, "resumable")
        if resumable is None:
            resumable = _attr(receipt, "result", "resumable")
        attention = _attr(session, "attention", "code")
        revision = _attr(session, "revision")
        if status == "closed" or admission == "closed":
            next_step, rules, close = (
                "The session is closed: nothing more to do; the case is closed.",
                ["R3.11"],
                True,
            )
        elif resumable:
            next_step, rules, close = f"Resume it: `/recover resume {session_id}`.", ["R3.12"], False
        elif attention == "CONTEXT_GAP":
            next_step, rules, close = (
                f"No context to continue from (CONTEXT_GAP): `/recover decide {session_id} start_fresh` "
                f"(drops the context) or `close`.",
                ["R3.12", "R5.3"],
                False,
            )
        elif admission == "recovery_required" or attention:
            next_step, rules, close = (
                f"It still needs an operator: `/recover diagnose {session_id}`.",
                ["R5.1"],
                False,
            )
        elif status in ("running", "idle") and admission == "open":
            next_step, rules, close = (
                "The session runs again and needs no operator: the case is closed.",
                ["R5.1"],
                True,
            )
        else:
            next_step, rules, close = (f"Check it: `/recover diagnose {session_id}`.", ["R5.1"], False)
        detail = {
            "revision": revision,
            "status": status,
            "admission_state": admission,
            "resumable": resumable,
            "attention": attention,
            "next": next_step,
        }
        self._record(session_id, actor, "verification", {"decision": decision}, "checked", detail=detail)
        if close:
            case = self.store.get_open_case(session_id)
            if case is not None:
                self.store.close_case(case.id, actor, next_step)
        return Reply.of(
            Message(
                headline=f"Verified `{session_id}` after `{decision}`",
                level="ok",
                facts=[
                    ("revision", text.show(revision)),
                    ("status", text.show(status)),
                    ("admission_state", text.show(admission)),
                    ("resumable", text.show(resumable)),
                ],
                lines=[f"Next: {next_step}"],
                rules=rules,
                session_id=session_id,
            )
        )

    def resume(self, actor: str, channel: str | None, session_id: str, reporter: Reporter) -> Reply:
        """Resume, riding through 503 BACKEND_UNAVAILABLE with backoff (R4.2), with one key throughout."""
        inputs = {"session_id": session_id, "channel": channel}
        if not ID_RE.match(session_id):
            return self._refuse(actor, None, "resume", inputs, f"invalid session id {session_id!r}")
        self._ensure_owner(session_id, actor, channel)
        body = {"reason": f"resume requested by {actor} via recover-bot"}
        record = self.store.begin_request(
            "POST", RESUME_PATH.format(session_id=session_id), body, "resume", session_id=session_id
        )
        self._record(session_id, actor, "resume_requested", inputs, "sending", idempotency_key=record.key)
        start = self._now()
        total = timedelta(seconds=self.limits.resume_backoff_total)
        delay = self.limits.resume_backoff_initial
        wait_id: int | None = None
        while True:
            try:
                receipt = self.client.send(record)
                break
            except ControlHostError as exc:
                if exc.code != "BACKEND_UNAVAILABLE" and not (exc.retryable and (exc.status or 0) >= 500):
                    if wait_id is not None:
                        self.requests.end_wait(wait_id, "done")
                    return self._resume_refused(actor, session_id, record, exc)
                if wait_id is None:
                    wait_id = self.requests.start_wait(
                        session_id,
                        "reclamation",
                        actor,
                        self._iso(start + total),
                        detail="resume: waiting for workspace reclamation to end",
                    )
                    reporter.post(
                        Message(
                            headline=f"Resume of `{session_id}`: 503 BACKEND_UNAVAILABLE — waiting for reclamation",
                            level="progress",
                            lines=[
                                "A workspace-reclamation claim is held; the same request is retried with backoff "
                                f"({text.duration(self.limits.resume_backoff_initial)} doubling to "
                                f"{text.duration(self.limits.resume_backoff_max)}, for up to "
                                f"{text.duration(self.limits.resume_backoff_total)})."
                            ],
                            rules=["R4.2"],
                            session_id=session_id,
                        )
                    )
                if self._now() - start >= total:
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
                            f"{text.duration(total.total_seconds())}",
                            "Reclamation is still running; try `/recover resume` again later.",
                            rules=["R4.2"],
                            session_id=session_id,
                        ),
                        ok=False,
                    )
                self.clock.sleep(delay)
                reporter.progress(
                    Message(
                        headline=f"Still waiting for reclamation on `{session_id}` "
                        f"({text.age(self._iso(start), self._now())} so far; next try in "
                        f"{text.duration(min(delay * 2, self.limits.resume_backoff_max))})",
                        level="progress",
                        rules=["R4.2"],
                        session_id=session_id,
                    )
                )
                delay = min(delay * 2, self.limits.resume_backoff_max)
        if wait_id is not None:
            self.requests.end_wait(wait_id, "done")
        receipt_id = _attr(receipt, "id")
        self._record(
            session_id,
            actor,
            "resume_accepted",
            inputs,
            str(_attr(receipt, "status") or "accepted"),
            http_status=200,
            idempotency_key=record.key,
            receipt_id=receipt_id,
        )
        verification = self._verify(session_id, actor, "resume", receipt)
        reminder = Message(
            headline=f"Resumed `{session_id}` (receipt {receipt_id})",
            level="ok",
            lines=[
                "Check separately that the new turn picked up the checkpoint's context (R5.2): "
                "acceptance is not a successful resume (R5.1)."
            ],
            rules=["R5.2", "R5.1"],
            session_id=session_id,
        )
        return Reply([reminder, *verification.messages])

    def _resume_refused(self, actor: str, session_id: str, record: Any, exc: ControlHostError) -> Reply:
        self._record(
            session_id,
            actor,
            "resume_refused",
            {"session_id": session_id},
            exc.code,
            http_status=exc.status,
            idempotency_key=record.key,
        )
        lines = [exc.message]
        rules = ["R3.12"]
        if exc.code == "REQUEST_STALE":
            lines.append(
                "REQUEST_STALE: resume is accepted only when the session is stopped and resumable "
                f"(R3.12). Check with `/recover diagnose {session_id}`."
            )
        elif exc.status in (401, 403):
            lines.append("The API key is wrong or lacks the sessions:recover scope (R0.1).")
            rules = ["R0.1"]
        return Reply.of(
            text.refusal(
                f"Resume of `{session_id}` refused: {exc.code}", *lines, rules=rules, session_id=session_id
            ),
            ok=False,
        )

    # == restart ==================================================================================

    def recover_after_restart(self, reporter: Reporter) -> Reply:
        """Finish what a previous process left: approved requests execute once; in-flight ones are re-sent."""
        messages: list[Message] = []
        ok = True
        for req in self.requests.find(states=("executing",)):
            record = self.store.get_request(req.idem_key) if req.idem_key else None
            if record is None and req.idem_key and req.body:
                # Crashed after the CAS, before the idempotency record: nothing was sent yet.
                record = self.store.begin_request(
                    "POST",
                    DECISIONS_PATH.format(session_id=req.session_id),
                    req.body,
                    f"decision {req.id}",
                    key=req.idem_key,
                    session_id=req.session_id,
                )
            if record is None:
                continue
            if not record.pending:
                reply = self._settle_from_record(req, record, reporter)
            else:
                reply = self._deliver(req.id, "recover-bot", record, reporter)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("approved",)):
            reply = self._execute(req.id, req.approved_by or "recover-bot", reporter)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for req in self.requests.find(states=("waiting",)):
            waits = [w for w in self.requests.active_waits(req.session_id) if w.request_id == req.id]
            for w in waits:
                self.requests.end_wait(w.id, "interrupted")
            deadline = parse_time(waits[-1].deadline) if waits else None
            deadline = deadline or (self._now() + timedelta(seconds=self.limits.recovery_wait_max))
            wait_id = self.requests.start_wait(
                req.session_id,
                "recovery_required",
                "recover-bot",
                self._iso(deadline),
                request_id=req.id,
                detail=f"{req.decision}: wait resumed after a restart",
            )
            reply = self._continue_wait(req.id, "recover-bot", wait_id, deadline, reporter)
            messages.extend(reply.messages)
            ok = ok and reply.ok
        for w in self.requests.active_waits():
            if w.kind == "reclamation":
                self.requests.end_wait(w.id, "interrupted")
        # Other stored requests (e.g. a resume in flight) are replayed with their own key.
        replayed = self.client.replay_unfinished()
        if replayed:
            messages.append(
                Message(
                    headline=f"Replayed {len(replayed)} unfinished request(s) with their "
                    "original Idempotency-Keys",
                    level="info",
                )
            )
        self._record(
            None,
            "recover-bot",
            "recover_after_restart",
            {},
            "done",
            detail={"messages": [m.headline for m in messages]},
        )
        if not messages:
            messages.append(Message(headline="Nothing to recover: no approved or in-flight decisions."))
        return Reply(messages, ok=ok)

    def _settle_from_record(self, req: DecisionRequest, record: Any, reporter: Reporter) -> Reply:
        """The answer was recorded but the request was not settled (crash right after the answer)."""
        status = int(record.http_status or 0)
        if 200 <= status < 300:
            return self._on_accepted(req, "recover-bot", record.response, reporter)
        err = _attr(record.response, "error") or {}
        exc = ControlHostError(
            str(_attr(err, "message") or "refused"), code=str(_attr(err, "code") or status), status=status
        )
        return self._on_error(req, "recover-bot", exc, reporter)

    # == cases & hand-offs ========================================================================

    def cases(self) -> Reply:
        """The open cases, one line each."""
        open_cases = self.store.list_open_cases()
        if not open_cases:
            return Reply.of(Message(headline="No open cases."))
        lines = []
        for case in open_cases:
            last = self._last_step(case.session_id)
            lines.append(f"`{case.session_id}` owner {self._who(case.owner)} — last: {last}")
        return Reply.of(Message(headline=f"{len(open_cases)} open case(s)", lines=lines))

    def history(self, session_id: str) -> Reply:
        """Every recorded step of a session, in order."""
        steps = self.store.steps(session_id=session_id)
        if not steps:
            return Reply.of(Message(headline=f"No recorded steps for `{session_id}`.", session_id=session_id))
        lines = [
            f"#{s.seq} {s.at} {self._who(s.actor)} {s.step} → {s.outcome}"
            + (f" (receipt {s.receipt_id})" if s.receipt_id else "")
            for s in steps
        ]
        return Reply.of(
            Message(
                headline=f"History of `{session_id}`: {len(steps)} step(s)",
                lines=lines,
                session_id=session_id,
            )
        )

    def take(self, actor: str, session_id: str) -> Reply:
        """Become the case owner (recorded)."""
        if not ID_RE.match(session_id):
            return Reply.of(text.refusal(f"invalid session id {session_id!r}"), ok=False)
        case = self.store.open_case(session_id, actor)
        previous = case.owner
        self.store.set_owner(case.id, actor)
        self._record(session_id, actor, "take", {"previous_owner": previous}, "owner")
        return Reply.of(
            Message(
                headline=f"<@{actor}> now owns the case of `{session_id}`"
                + (f" (was <@{previous}>)" if previous and previous != actor else ""),
                level="ok",
                session_id=session_id,
            )
        )

    def note(self, actor: str, session_id: str, note_text: str) -> Reply:
        """A hand-off note on the case (recorded as a step)."""
        if not ID_RE.match(session_id):
            return Reply.of(text.refusal(f"invalid session id {session_id!r}"), ok=False)
        if not note_text.strip():
            return Reply.of(text.refusal("a note needs text: /recover note <session_id> <text>"), ok=False)
        self._record(session_id, actor, "note", {"text": note_text}, "noted")
        return Reply.of(
            Message(headline=f"Noted on `{session_id}`", lines=[note_text], level="ok", session_id=session_id)
        )

    def handoff(self, actor: str) -> Reply:
        """A digest of every open case for the next shift, from the store alone (works with the API down)."""
        now = self._now()
        open_cases = self.store.list_open_cases()
        messages: list[Message] = []
        for case in open_cases:
            sid = case.session_id
            steps = self.store.steps(session_id=sid)
            last = steps[-1] if steps else None
            lines: list[str] = []
            lines.append(
                f"Owner: {self._who(case.owner)}; opened {case.opened_at} by {self._who(case.opened_by)}"
                + (f"; thread {case.channel}/{case.thread_ts}" if case.thread_ts else "")
            )
            if last is not None:
                lines.append(
                    f"Last step: {last.step} → {last.outcome} by {self._who(last.actor)} at {last.at}"
                )
            reqs = self.requests.find(session_id=sid)
            open_reqs = [r for r in reqs if r.is_open]
            state = self._case_state(steps, open_reqs)
            lines.insert(0, f"State: {state}")
            for r in open_reqs:
                if r.state == "pending":
                    kind = "approval" if r.policy == "two_person" else "confirmation"
                    lines.append(
                        f"Pending {kind}: {r.id} `{r.decision}` by {self._who(r.requester)}, age "
                        f"{text.age(r.created_at, now)}, expires {r.expires_at} "
                        f"(in {text.duration(max(0.0, ((parse_time(r.expires_at) or now) - now).total_seconds()))})"
                        f" — `/recover approve {r.id}`"
                    )
                else:
                    lines.append(
                        f"Request {r.id} `{r.decision}`: {r.state} (approved by {self._who(r.approved_by)})"
                    )
            for w in self.requests.active_waits(sid):
                lines.append(f"Waiting ({w.kind}): {w.detail or ''} since {w.started_at}, until {w.deadline}")
            lines.append(f"Next step: {self._next_step(sid, steps, open_reqs)}")
            notes = [s for s in steps if s.step == "note"]
            for n in notes:
                lines.append(f"Note by {self._who(n.actor)} at {n.at}: {n.inputs.get('text')}")
            messages.append(Message(headline=f"Case `{sid}`", lines=lines, session_id=sid))
        head = self.store.head()
        self._record(
            None,
            actor,
            "handoff",
            {"open_cases": len(open_cases)},
            "posted",
            detail={"sessions": [c.session_id for c in open_cases], "head_before": head},
        )
        summary = Message(
            headline=f"Hand-off: {len(open_cases)} open case(s) at {self._iso(now)}",
            lines=[
                f"Audit head hash (before this hand-off's own step): {head}",
                f"Audit head hash (including it): {self.store.head()}",
            ],
            level="info",
        )
        return Reply([summary, *messages])

    @staticmethod
    def _who(user: str | None) -> str:
        return f"<@{user}>" if user else "nobody"

    def _last_step(self, session_id: str) -> str:
        steps = self.store.steps(session_id=session_id)
        if not steps:
            return "none"
        s = steps[-1]
        return f"{s.step} → {s.outcome} by {self._who(s.actor)} at {s.at}"

    @staticmethod
    def _case_state(steps: Sequence[Any], open_reqs: Sequence[DecisionRequest]) -> str:
        if any(r.state in ("waiting",) for r in open_reqs):
            return "waiting for the scheduler's confirmation (R3.9)"
        if any(r.state in ("approved", "executing") for r in open_reqs):
            return "decision in flight"
        if any(r.state == "pending" for r in open_reqs):
            return "waiting for approval/confirmation"
        verifs = [s for s in steps if s.step == "verification"]
        if verifs:
            d = verifs[-1].detail or {}
            return (
                f"after a decision: status {text.show(d.get('status'))}, admission "
                f"{text.show(d.get('admission_state'))}, resumable {text.show(d.get('resumable'))}"
            )
        return "under investigation"

    @staticmethod
    def _next_step(session_id: str, steps: Sequence[Any], open_reqs: Sequence[DecisionRequest]) -> str:
        for r in open_reqs:
            if r.state == "pending":
                return (
                    f"a second person approves or rejects {r.id}"
                    if r.policy == "two_person"
                    else f"<@{r.requester}> confirms or drops {r.id}"
                )
            if r.state == "waiting":
                return "wait for the scheduler's pass; the decision is then submitted once (R3.9)"
            if r.state in ("approved", "executing"):
                return f"{r.id} is being executed; if the bot restarted it finishes it on start-up"
        verifs = [s for s in steps if s.step == "verification"]
        if verifs and (verifs[-1].detail or {}).get("next"):
            return str((verifs[-1].detail or {})["next"])
        return f"diagnose: `/recover diagnose {session_id}`"
