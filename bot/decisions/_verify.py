"""Verification after an accepted decision or resume (R5.1, R3.12).

Why its own room: an accepted receipt is not the worker being gone, nor a successful resume (R5.1).
After every acceptance — a send, a background re-send, a resume, a replay at start — the session is
read again and its revision, status, admission state and resumability are reported with the
runbook's next step, recorded as a ``verification`` step. After a decision that launches a worker the
case stays open, *verifying*: :meth:`Verifier.watch_due` re-reads it (the runbook's ``verify.watch``)
and closes it only on an observed recovery, or says in its thread that it is failing again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from bot.controlhost import Receipt
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._policy import DecisionPolicy
from bot.decisions._rules import settled_reason
from bot.decisions._watch import BEFORE, FAILED_AGAIN, GAVE_UP, RECOVERED, VERIFYING, Watch, before_send, observe
from bot.errors import RecoverError
from bot.messages import Message, Reply
from bot.runbook.usage import typed_line
from bot.vocab import Step

# R5.1: always reported after a decision, besides what the runbook's verify.report adds.
VERIFY_FACTS = ("session.revision", "session.status", "session.admission_state", "session.resumable")
#: The steps that keep (as their detail's BEFORE) the read before their send.
SENT_WITH_BEFORE = (Step.DECISION_SENDING, Step.RESUME_REQUESTED, Step.BATCH_MEMBER_SENDING)


#: The kind of a decision request's verification message (its ``ref`` is the request): a front says it
#: once per request, whichever process gets there first (bot/slack/delivery.py).
RESULT_KIND = "decision_result"


def result_message(session_id: str, decision: str, said: Mapping[str, Any], request_id: str | None) -> Message:
    """The one wording of a verification's result: built when it is verified, or again from its step."""
    return Message(
        headline=f"Verified `{session_id}` after `{decision}`",
        level="ok",
        facts=[(str(n), str(v)) for n, v in said.get("facts") or []],
        lines=[str(line) for line in said.get("lines") or []],
        rules=[str(r) for r in said.get("rules") or []],
        session_id=session_id,
        kind=RESULT_KIND if request_id else "text",
        ref=request_id,
        said_once=request_id is not None,
    )


def results_recorded(
    ctx: DecisionContext, after_seq: int, older_than: timedelta, within: timedelta
) -> list[tuple[int, Message]]:
    """Decision requests' verifications recorded after step ``after_seq``, in the last ``within`` and
    longer than ``older_than`` ago: (seq, the result as it was said), in log order, up to the first one
    newer than that (it is looked at again next time). What a front whose process died never said."""
    now = ctx.now()
    edge = ctx.iso(now - older_than)
    out: list[tuple[int, Message]] = []
    for s in ctx.store.steps_named(Step.VERIFICATION, after_seq=after_seq, since=ctx.iso(now - within)):
        if s.at > edge:
            break
        request_id = s.inputs.get("request_id")
        said = (s.detail or {}).get("said")
        if s.session_id and isinstance(request_id, str) and isinstance(said, Mapping):
            out.append((s.seq, result_message(s.session_id, str(s.inputs.get("decision")), said, request_id)))
    return out


class Verifier:
    """Re-reads a session after an acceptance and says what it shows now; watches it until recovery."""

    def __init__(self, ctx: DecisionContext) -> None:
        self.ctx = ctx
        self._looked: dict[str, datetime] = {}  # session → last periodic re-read (this process)

    def verify(
        self,
        session_id: str,
        actor: str,
        policy: DecisionPolicy,
        flags: Mapping[str, Any],
        receipt: Receipt,
        *,
        facts_before: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> Reply:
        """R5.1/R3.12: re-read the session; report revision, status, admission, resumable and the next step.

        A decision that launches a worker (the runbook's ``verify.watch``) leaves the case open,
        *verifying*, until a re-read observes recovery (R5.1, R5.2); only a closed session closes it now.
        A decision request's verification (``request_id``) keeps what it says in its step (``said``), so a
        front whose process died before saying it can say it from the store (:func:`result_message`).
        """
        ctx = self.ctx
        try:
            facts, _ = ctx.diagnose(session_id, None)
        except RecoverError as exc:
            facts = {"source.session": f"unreadable ({exc.message})"}
        if facts.get("session.resumable") is None and receipt.resumable is not None:
            facts["session.resumable"] = receipt.resumable
        names = list(dict.fromkeys([*VERIFY_FACTS, *policy.report()]))
        step = policy.next_step(facts, flags)
        next_text = step.say if step else f"Check it: `{typed_line('diagnose', session_id)}`."
        watch = self._watch_for(session_id, policy, receipt, facts, facts_before)
        detail: dict[str, Any] = {
            "decision": policy.name,
            "receipt_id": receipt.id,
            **{n: facts.get(n) for n in names},
            "next": next_text,
        }
        lines = [
            f"Receipt {receipt.id}: {receipt.status or 'unknown'}. "
            "Acceptance is not the same as the worker being gone, nor as a successful resume (R5.1).",
            f"Next: {next_text}",
        ]
        outcome = "checked"
        why = settled_reason(facts)
        evidence: dict[str, Any] = {}
        if watch is not None:
            seen = observe(watch, facts, ctx.now())
            outcome = seen.state
            why = f"recovery observed: {seen.why}" if seen.state == RECOVERED else None
            evidence = seen.evidence
            if seen.evidence:
                detail["evidence"] = seen.evidence
            detail["watch"] = watch.to_json()
            if seen.state == VERIFYING:
                lines.append(
                    f"The case stays open (verifying): the bot re-reads the session every "
                    f"{text.duration(watch.every)} and closes it only when it sees recovery — {seen.why}."
                )
            elif seen.state == FAILED_AGAIN:
                detail["why"] = seen.why
                lines.append(f"The session is failing again: {seen.why}. The case stays open (R5.4).")
            elif seen.state == GAVE_UP:
                detail["why"] = seen.why
                lines.append(f"The case stays open: {seen.why}. Check the new turn by hand, then `done`.")
        case = ctx.store.get_open_case(session_id) if why else None
        if case is not None:
            lines.append(f"Case closed: {why}.")
        said = {
            "facts": [[n, text.fact_value(n, facts)] for n in names],
            "lines": lines,
            "rules": list(step.rules if step and step.rules else policy.spec.verify.rules),
        }
        inputs = {"decision": policy.name, **({"request_id": request_id} if request_id else {})}
        if request_id:
            detail["said"] = said
        ctx.record(session_id, actor, Step.VERIFICATION, inputs, outcome, detail=detail)
        if case is not None and why is not None:
            ctx.store.close_case(case.id, actor, f"verification: {why}", evidence=evidence or None)
        return Reply.of(result_message(session_id, policy.name, said, request_id))

    def _watch_for(
        self,
        session_id: str,
        policy: DecisionPolicy,
        receipt: Receipt,
        facts: Mapping[str, Any],
        facts_before: Mapping[str, Any] | None = None,
    ) -> Watch | None:
        """The runbook's watch for this decision (None: it launches nothing to watch), judged against
        the read made before the send (recorded with its sending step, or given: a batch member's
        facts its send was bound to); without one, this read after the answer stands in: a ready
        report made before it is then not counted (never a false close)."""
        spec = policy.spec.verify.watch
        if spec is None:
            return None
        runbooks = self.ctx.runbooks
        given = before_send(facts_before) if facts_before and facts_before.get("events.last_seq") is not None else None
        before = dict(self._before(session_id, receipt.idempotency_key) or given or before_send(facts))
        if before.get("events.last_seq") is None:
            before["events.last_seq"] = facts.get("events.last_seq")  # the events were unread before the send
        return Watch.start(
            policy.name,
            since=self.ctx.iso(),
            every=runbooks.limit(spec.every),
            window=runbooks.limit(spec.window),
            before=before,
            receipt_revision=receipt.session.revision if receipt.session else None,
        )

    def _before(self, session_id: str, key: str | None) -> Mapping[str, Any] | None:
        """What the sending step of the request ``key`` kept of the read before the send (a batch
        member's: its ``batch_member_sending`` step, the stream position read before its first send)."""
        if key is None:
            return None
        for s in reversed(self.ctx.store.steps(session_id=session_id)):
            if s.idempotency_key == key and s.step in SENT_WITH_BEFORE:
                before = (s.detail or {}).get(BEFORE)
                return before if isinstance(before, Mapping) else None
        return None

    # -- the watch: re-reads until recovery is observed (R5.1, R5.2) --------------------------------

    def _last(self, session_id: str) -> tuple[str | None, Watch | None]:
        """The open case's last verification outcome (None: none) and the last watch it was judged by."""
        case = self.ctx.store.get_open_case(session_id)
        if case is None:
            return None, None
        outcome: str | None = None
        watch: Watch | None = None
        for s in self.ctx.store.steps(session_id=session_id):
            if s.step == Step.VERIFICATION and s.case_id == case.id:
                outcome = s.outcome
                watch = Watch.parse((s.detail or {}).get("watch")) or watch
        return outcome, watch

    def watching(self, session_id: str) -> Watch | None:
        """The open case's verification in progress, if any (the last verification step says so)."""
        outcome, watch = self._last(session_id)
        return watch if outcome == VERIFYING else None

    def on_diagnosis(self, session_id: str, actor: str, facts: Mapping[str, Any]) -> list[Message] | None:
        """A diagnosis of a session whose case a verification began: only the recovery rule closes it,
        never "it looks healthy" (R5.1). Verifying: one more look. Failing again: closed only if the
        read shows a ready report after the send (the rule's evidence). Unconfirmed after a resume:
        open until a person's ``done`` (R5.2), as the case said. None: no verification began here."""
        outcome, watch = self._last(session_id)
        if outcome not in (VERIFYING, FAILED_AGAIN, GAVE_UP) or watch is None:
            return None
        if outcome == VERIFYING:
            return self.look(session_id, actor, watch, facts=facts)
        if outcome == FAILED_AGAIN and observe(watch, facts, self.ctx.now()).state == RECOVERED:
            return self.look(session_id, actor, watch, facts=facts)
        return []

    def watch_due(self, actor: str = "recover-bot") -> list[Message]:
        """Re-read every verifying session whose interval has passed; say what changed in its thread."""
        now = self.ctx.now()
        out: list[Message] = []
        for case in self.ctx.store.list_open_cases():
            sid = case.session_id
            watch = self.watching(sid)
            if watch is None:
                continue
            looked = self._looked.get(sid)
            # A little slack: a sweep that runs every ``every`` seconds must not skip every other look.
            if looked is not None and (now - looked).total_seconds() < watch.every - min(1.0, watch.every / 10):
                continue
            self._looked[sid] = now
            out.extend(self.look(sid, actor, watch))
        return out

    def look(
        self,
        session_id: str,
        actor: str,
        watch: Watch | None = None,
        *,
        facts: Mapping[str, Any] | None = None,
    ) -> list[Message]:
        """One re-read of a verifying session (``facts``: a diagnosis just made): close on recovery,
        re-open on a new failure, else nothing."""
        ctx = self.ctx
        watch = watch or self.watching(session_id)
        if watch is None:
            return []
        if facts is None:
            try:
                facts, _ = ctx.diagnose(session_id, None)
            except RecoverError:
                return []  # unreadable now: the next sweep looks again
        seen = observe(watch, facts, ctx.now())
        if seen.state == VERIFYING and not (seen.overdue and not watch.overdue_said):
            return []
        names = (*VERIFY_FACTS, "attention.code", "attention.reason", "attention.failures")
        shown = {n: facts.get(n) for n in names}
        rows = [(n, text.fact_value(n, facts)) for n in names]
        detail: dict[str, Any] = {**shown, "why": seen.why, "since": watch.since}
        if seen.evidence:
            detail["evidence"] = seen.evidence
        # Past the start-up window with no ready report: said once; the watch goes on, and time
        # passing is never taken as recovery (R5.1). Kept with every outcome: what it was judged by.
        detail["watch"] = (watch.said_overdue() if seen.state == VERIFYING else watch).to_json()
        ctx.record(session_id, actor, Step.VERIFICATION, {"decision": watch.decision}, seen.state, detail=detail)
        rules = ["R5.1", "R5.2"] if watch.decision == "resume" else ["R5.1"]
        if seen.state == VERIFYING:
            return [
                Message(
                    headline=f"`{session_id}` is not recovered yet after `{watch.decision}`: {seen.why}",
                    level="warn",
                    facts=rows,
                    lines=[
                        "The case stays open (verifying): it closes only when a worker reports ready (R5.1).",
                        f"Look at the worker's start: `{typed_line('diagnose', session_id)}`.",
                    ],
                    rules=rules,
                    session_id=session_id,
                )
            ]
        if seen.state == GAVE_UP:
            return [
                Message(
                    headline=f"`{session_id}` runs again after `{watch.decision}`; its context cannot be "
                    "confirmed from the control host",
                    level="warn",
                    facts=rows,
                    lines=[
                        f"{seen.why}.",
                        "The case stays open: check by hand that the new turn picked up the checkpoint's "
                        f"context, then `/recover done {session_id}`.",
                    ],
                    rules=rules,
                    session_id=session_id,
                )
            ]
        if seen.state == RECOVERED:
            case = ctx.store.get_open_case(session_id)
            if case is not None:
                ctx.store.close_case(
                    case.id, actor, f"verification: recovery observed: {seen.why}", evidence=seen.evidence or None
                )
            return [
                Message(
                    headline=f"Case of `{session_id}` closed: recovery observed after `{watch.decision}` — {seen.why}",
                    level="ok",
                    facts=rows,
                    rules=rules,
                    session_id=session_id,
                )
            ]
        return [
            Message(
                headline=f"`{session_id}` is failing again after `{watch.decision}`: {seen.why}",
                level="error",
                facts=rows,
                lines=[
                    "The case is open again (it was being verified): acceptance was not recovery (R5.1).",
                    "Do not repeat the decision before the cause is fixed (R5.4); "
                    f"diagnose again: `{typed_line('diagnose', session_id)}`.",
                ],
                rules=["R5.1", "R5.4"],
                session_id=session_id,
            )
        ]
