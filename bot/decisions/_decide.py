"""decide and its dry run: a decision checked against a fresh diagnosis, then requested.

Why a room of its own: ``decide`` is where a request is born. It runs the checks that need no
network (channel, ids, the decision's required flags), points a repeated decide at the open request
(a replay or a double submit makes no second request), asks the runbook whether the API would accept
it now (R2.10, R3.9, R3.11), and then asks for a second person's approval (R3.10), for the
requester's confirmation (R2.11, R5.3), or sends it at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.decisions import _ladder_rows as ladder_rows
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._duplicates import identical_open, pointer_message, repeats
from bot.decisions._guards import Refusal, cause_fixed_given, in_recovery_channel, refusing, valid_ids
from bot.decisions._lifecycle import Execution, grant, make_request, request_content
from bot.decisions._policy import WAITABLE, DecisionPolicy, flags_of
from bot.decisions._requests import DecisionRequest
from bot.decisions._rules import requester_refusal
from bot.errors import DecisionError
from bot.messages import Message, Reply, Reporter
from bot.runbook.evaluate import DecisionVerdict
from bot.runbook.usage import decide_line, typed_line
from bot.vocab import Policy, RequestState, Step

#: The input of a batch member's ``batch_member_executed`` step naming the attention it was sent over.
EXECUTED_OVER = "attention_code"

Facts = Mapping[str, object]
USAGE = (
    "Usage: /recover decide <session_id> <decision> [--turn <turn_id>] [--evidence <ref>] "
    '[--effects "<what the turn did outside>"] [--cause-fixed "<what changed>"] --reason "<text>" [--yes]'
)


class DecideRoom:
    """``/recover decide`` and ``/recover dryrun decide``."""

    def __init__(self, ctx: DecisionContext, execution: Execution) -> None:
        self.ctx = ctx
        self.execution = execution

    def decide(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None,
        evidence: str | None,
        effects: str | None,
        reason: str,
        yes: bool,
        reporter: Reporter,
        cause_fixed: str | None = None,
    ) -> Reply:
        """Check a decision against a fresh diagnosis; then ask for approval, confirmation, or send it."""
        flags = flags_of(turn=turn, evidence=evidence, effects=effects, reason=reason, yes=yes)
        # The session is named in the inputs: a refusal outside the channels opens no case for it.
        inputs = {"decision": decision, "session_id": session_id, **flags, "channel": channel}
        if cause_fixed:
            inputs["cause_fixed"] = cause_fixed  # recorded with the request's step (R5.3, R5.4)

        def attempt() -> Reply:
            policy = self.precheck(channel, session_id, decision, flags, Step.DECIDE)
            unmapped = requester_refusal(actor, policy.approval, self.ctx.console_users)
            if unmapped is not None:  # nobody could tell its approver from its requester
                raise Refusal(*unmapped, session_id=session_id, code="not_mapped")
            identity = {
                "session_id": session_id,
                "decision": decision,
                "requester": actor,
                "turn_id": turn,
                "evidence_ref": evidence,
                "effects": effects,
                "reason": reason,
            }
            same = repeats(identical_open(self.ctx.requests, identity), yes=yes)
            if same is not None:
                # a replay or a double submit: no second request
                return Reply.of(pointer_message(same, irreversible=self.ctx.irreversible(same.decision)))
            facts, turn_status = self.ctx.diagnose(session_id, turn)
            verdict = self.ctx.verdict(policy, facts, flags)
            if verdict.code == "NOT_FOUND":  # a mistyped id: the same line on the ids it may mean, recorded outside
                values = {
                    "turn": turn,
                    "evidence": evidence,
                    "effects": effects,
                    "cause-fixed": cause_fixed,
                    "reason": reason,
                }
                raise Refusal(
                    f"`{decision}` was not sent: {verdict.reason}",
                    *self.ctx.unknown_session_lines(
                        session_id, lambda near: decide_line(near, decision, values, yes=yes)
                    ),
                    code="NOT_FOUND",
                )
            if not verdict.ok and verdict.code != WAITABLE:
                # A local refusal: nothing changed, the state is simply not one the API accepts — the
                # REQUEST_STALE advice ("the session changed") is for an answer from the control host.
                advice = (
                    None
                    if verdict.code == "REQUEST_STALE"
                    else policy.advice(verdict.code or "", facts, flags, self.ctx.runbooks)
                )
                raise Refusal(
                    f"`{decision}` on `{session_id}` will not be accepted: {verdict.reason}",
                    f"The control host would answer {verdict.code}. Nothing was sent.",
                    *([advice.text] if advice else []),
                    f"See `{typed_line('diagnose', session_id)}` for the decisions valid now.",
                    session_id=session_id,
                    rules=verdict.rules or policy.rules,
                    code=verdict.code or "refused",
                )
            # R2.3, R2.8, R5.3: what a retry cannot cure needs --cause-fixed, as for a batch member.
            cause_fixed_given(decision, facts, cause_fixed, session_id)
            content = request_content(
                self.ctx,
                policy,
                session_id=session_id,
                turn_id=turn,
                evidence_ref=evidence,
                effects=effects,
                reason=reason,
                requester=actor,
                channel=channel,
                facts=facts,
                turn_status=turn_status,
                repeated=self.repeats_to_flag(policy, session_id, facts),
            )
            warned = bool(self.warnings(policy, facts, flags, content, cause_fixed))
            self._ensure_owner(session_id, actor, channel)
            with self.ctx.store.write() as db:
                # --yes confirms an earlier request only when it showed nothing but the standard question.
                same = repeats(identical_open(self.ctx.requests, content, db=db), yes=yes and not warned)
                if same is not None:
                    return Reply.of(pointer_message(same, irreversible=self.ctx.irreversible(same.decision)))
                req = make_request(self.ctx, db, content, inputs)
            return self._ask_or_send(req, policy, verdict, facts, flags, channel, yes, reporter, cause_fixed)

        return refusing(self.ctx, actor, Step.DECIDE, inputs, attempt)

    def _ask_or_send(
        self,
        req: DecisionRequest,
        policy: DecisionPolicy,
        verdict: DecisionVerdict,
        facts: Facts,
        flags: Mapping[str, object],
        channel: str | None,
        yes: bool,
        reporter: Reporter,
        cause_fixed: str | None = None,
    ) -> Reply:
        """A second person approves (R3.10), the requester confirms (R2.11), or it is sent now.

        Every consequence (the runbook's warning, what it drops, an R5.4 repeat) is shown and confirmed
        before the send: ``--yes`` confirms in the same reply only when nothing but the standard
        question would be shown; otherwise the reply shows them and waits for the button or
        ``/recover confirm``."""
        rules = list(verdict.rules or policy.rules)
        notes = [f"[!] {n}" for n in text.consequences(policy.name, warning=policy.warning(facts, flags))]
        if cause_fixed:
            notes.append(f"Cause fixed (the requester's words, R5.3): {cause_fixed}")
        if verdict.code == WAITABLE:
            notes.append(
                f"[!] {verdict.reason}: once executed, the bot waits for the scheduler's confirmation "
                "and then submits it once (R3.9)."
            )
        drops = policy.drops(facts, flags)
        if policy.approval == Policy.TWO_PERSON:
            first = ["`--yes` does not apply: a two-person decision is never executed by its requester."]
            asked = text.approval_request_message(
                req,
                self.ctx.mentions(),
                rules,
                first=first if yes else (),
                notes=[*notes, *(f"[!] {n}" for n in text.consequences(policy.name, drops=drops))],
                irreversible=self.ctx.irreversible(req.decision),
                first_showing=True,
            )
            ladder_rows.remember_message(self.ctx.store, req.id, asked)  # its live line edits exactly this
            return Reply.of(asked)
        consequences = self.warnings(policy, facts, flags, req.content(), cause_fixed)
        if policy.approval == Policy.CONFIRM and (not yes or consequences):
            # With consequences to read, only the button or `/recover confirm` sends it (not a typed --yes).
            command = typed_line("confirm", req.id) if consequences else decide_command(req, cause_fixed, yes=True)
            first = ["`--yes` did not send it: read what it does below, then confirm. Nothing was sent."] if yes else []
            return Reply.of(
                text.confirmation_message(
                    req,
                    drops,
                    rules,
                    command,
                    policy.confirm_text(facts, flags),
                    notes=[*first, *notes],
                    irreversible=self.ctx.irreversible(req.decision),
                )
            )
        # Confirmed from text (--yes), or a decision that needs no confirmation.
        if not grant(self.ctx, req, req.requester, Step.DECISION_CONFIRMED, {"yes": yes, "channel": channel}):
            return Reply.of(text.refusal(text.state_text(self.ctx.requests.get(req.id) or req)), ok=False)
        return self.execution.execute(req.id, req.requester, reporter)

    @staticmethod
    def warnings(
        policy: DecisionPolicy,
        facts: Facts,
        flags: Mapping[str, object],
        content: Mapping[str, object],
        cause_fixed: str | None,
    ) -> list[str]:
        """The consequences beyond the standard question: the runbook's warning (R2.4, R5.3), what it
        drops (R2.11), an R5.4 repeat without --cause-fixed. Any of them must be seen before a send;
        worded by ``text.consequences``, the one wording a batch's members are warned with too."""
        repeated = content.get("repeated")
        return text.consequences(
            policy.name,
            warning=policy.warning(facts, flags),
            drops=policy.drops(facts, flags),
            repeated=repeated if isinstance(repeated, int) and not (cause_fixed or "").strip() else 0,
        )

    def precheck(
        self, channel: str | None, session_id: str, decision: str, flags: Mapping[str, object], step: str
    ) -> DecisionPolicy:
        """Checks that need no network: channel, ids, the decision's required flags."""
        if step == Step.DECIDE:
            in_recovery_channel(self.ctx, channel, "`decide` is")
        turn = flags.get("turn")
        valid_ids(session_id, turn if isinstance(turn, str) else None)
        try:
            policy = self.ctx.policy(decision)
            if not policy.spec.decidable:
                raise DecisionError(
                    f"`{decision}` is not a decision for `decide`",
                    hint=f"Use `/recover {policy.spec.command} <session_id>`.",
                )
        except DecisionError as exc:
            raise Refusal(exc.message, *([exc.hint] if exc.hint else []), session_id=session_id) from None
        missing = [f"--{f}" for f in policy.required if not str(flags.get(f) or "").strip()]
        if missing:
            raise Refusal(f"`{decision}` needs {', '.join(missing)}", USAGE, session_id=session_id, rules=policy.rules)
        return policy

    def dryrun(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None,
        evidence: str | None,
        effects: str | None,
        reason: str,
        yes: bool,
        cause_fixed: str | None = None,
    ) -> Reply:
        """Show exactly what ``decide`` would send and what is expected back; send nothing."""
        flags = flags_of(turn=turn, evidence=evidence, effects=effects, reason=reason, yes=yes)
        inputs = {"decision": decision, **flags}
        if cause_fixed:
            inputs["cause_fixed"] = cause_fixed

        def attempt() -> Reply:
            policy = self.precheck(channel, session_id, decision, flags, Step.DRYRUN_DECIDE)
            facts, _ = self.ctx.diagnose(session_id, turn)
            verdict = self.ctx.verdict(policy, facts, flags)
            method, path, body = policy.request(session_id, facts, flags)
            self.ctx.record(
                session_id,
                actor,
                Step.DRYRUN_DECIDE,
                inputs,
                "shown",
                detail={"method": method, "path": path, "body": body},
            )
            return Reply.of(
                Message(
                    headline=f"Dry run: `{decision}` on `{session_id}` (nothing sent)",
                    lines=[
                        *text.wire_lines(method, path, body),
                        "",
                        *self._expected(policy, verdict, facts, flags),
                        *self._before_send(policy, session_id, facts, flags, cause_fixed),
                    ],
                    rules=list(verdict.rules or policy.rules),
                    session_id=session_id,
                )
            )

        return refusing(self.ctx, actor, Step.DRYRUN_DECIDE, inputs, attempt)

    def _expected(
        self, policy: DecisionPolicy, verdict: DecisionVerdict, facts: Facts, flags: Mapping[str, object]
    ) -> list[str]:
        """What the dry run expects back, and what must happen before it is sent."""
        lines: list[str] = []
        if verdict.ok:
            revision = facts.get("session.revision")
            after = revision + 1 if isinstance(revision, int) else "unknown"
            lines.append(
                f"Expected back: 200 with a decision receipt (status accepted, session revision {after}); "
                "then the bot verifies the session (R5.1)."
            )
        elif verdict.code is None:
            # Facts the check needs are unknown: no status can be foretold (never "409 None").
            lines.append(f"Expected back: cannot tell — {verdict.reason}.")
        else:
            advice = policy.advice(verdict.code or "", facts, flags, self.ctx.runbooks)
            lines.append(f"Expected back: {verdict.status or 409} {verdict.code} — {verdict.reason}.")
            if advice:
                lines.append(advice.text)
        if policy.approval == Policy.TWO_PERSON:
            lines.append("It needs approval by a second person before it is sent.")
        elif policy.approval == Policy.CONFIRM:
            lines.append("It needs an explicit confirmation (button or --yes) before it is sent.")
        lines.extend(f"[!] {n}" for n in text.consequences(policy.name, drops=policy.drops(facts, flags)))
        return lines

    def _before_send(
        self,
        policy: DecisionPolicy,
        session_id: str,
        facts: Facts,
        flags: Mapping[str, object],
        cause_fixed: str | None,
    ) -> list[str]:
        """What ``decide`` would ask for before sending: --cause-fixed (R2.3, R2.8), the consequences."""
        try:
            cause_fixed_given(policy.name, facts, cause_fixed, session_id)
        except Refusal as no:
            return [f"Before it is sent: {no.headline}."]
        over = self.repeats_to_flag(policy, session_id, facts)
        shown = self.warnings(policy, facts, flags, {"repeated": over}, cause_fixed)
        if shown and policy.approval == Policy.CONFIRM:
            return [
                f"Shown before it is sent and confirmed by button or /recover confirm (not --yes): {'; '.join(shown)}"
            ]
        return []

    def repeats_to_flag(self, policy: DecisionPolicy, session_id: str, facts: Facts) -> int:
        """R5.4: the earlier runs to flag (0 below the runbook's threshold)."""
        repeated = self.repeated(session_id, policy.name, facts)
        return repeated if repeated > 0 and repeated + 1 >= policy.repeat_threshold else 0

    def repeated(self, session_id: str, decision: str, facts: Facts) -> int:
        """R5.4: how often this decision already ran here without fixing the cause (same attention),
        alone or as a batch's member (its ``batch_member_executed`` step names the attention it was
        sent over): one count for both paths, so a repeat is warned whichever path made the first."""
        code = facts.get("attention.code")
        if code is None:
            return 0
        alone = sum(
            1
            for r in self.ctx.requests.find(states=(RequestState.EXECUTED,), session_id=session_id)
            if r.decision == decision and r.facts.get("attention.code") == code
        )
        in_batches = sum(
            1
            for s in self.ctx.store.steps(session_id=session_id)
            if s.step == Step.BATCH_MEMBER_EXECUTED
            and (s.inputs or {}).get("decision") == decision
            and (s.inputs or {}).get(EXECUTED_OVER) == code
        )
        return alone + in_batches

    def _ensure_owner(self, session_id: str, actor: str, channel: str | None) -> None:
        case = self.ctx.store.open_case(session_id, actor, channel)
        if case.owner is None:
            self.ctx.store.set_owner(case.id, actor)


def decide_command(req: DecisionRequest, cause_fixed: str | None = None, *, yes: bool = False) -> str:
    """The typed ``decide`` that makes ``req`` again (shown with ``--yes`` as its confirmation), with the
    ``--cause-fixed`` it was made with: without it a retry an incurable cause stands behind is refused
    (R2.3, R2.8, R5.3)."""
    values = {
        "turn": req.turn_id,
        "evidence": req.evidence_ref,
        "effects": req.effects,
        "cause-fixed": cause_fixed,
        "reason": req.reason,
    }
    return decide_line(req.session_id, req.decision, values, yes=yes)
