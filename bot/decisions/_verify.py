"""Verification after an accepted decision or resume (R5.1, R3.12).

Why its own room: an accepted receipt is not the worker being gone, nor a successful resume (R5.1).
After every acceptance — a send, a background re-send, a resume, a replay at start — the session is
read again and its revision, status, admission state and resumability are reported with the
runbook's next step, recorded as a ``verification`` step; a session that needs nobody any more
closes its case.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.controlhost import Receipt
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._policy import DecisionPolicy
from bot.decisions._rules import settled_reason
from bot.errors import RecoverError
from bot.messages import Message, Reply
from bot.vocab import Step

# R5.1: always reported after a decision, besides what the runbook's verify.report adds.
VERIFY_FACTS = ("session.revision", "session.status", "session.admission_state", "session.resumable")


class Verifier:
    """Re-reads a session after an acceptance and says what it shows now."""

    def __init__(self, ctx: DecisionContext) -> None:
        self.ctx = ctx

    def verify(
        self, session_id: str, actor: str, policy: DecisionPolicy, flags: Mapping[str, Any], receipt: Receipt
    ) -> Reply:
        """R5.1/R3.12: re-read the session; report revision, status, admission, resumable and the next step."""
        ctx = self.ctx
        try:
            facts, _ = ctx.diagnose(session_id, None)
        except RecoverError as exc:
            facts = {"source.session": f"unreadable ({exc.message})"}
        if facts.get("session.resumable") is None and receipt.resumable is not None:
            facts["session.resumable"] = receipt.resumable
        names = list(dict.fromkeys([*VERIFY_FACTS, *policy.report()]))
        step = policy.next_step(facts, flags)
        next_text = step.say if step else f"Check it: `/recover diagnose {session_id}`."
        detail: dict[str, Any] = {
            "decision": policy.name,
            "receipt_id": receipt.id,
            **{n: facts.get(n) for n in names},
            "next": next_text,
        }
        ctx.record(session_id, actor, Step.VERIFICATION, {"decision": policy.name}, "checked", detail=detail)
        lines = [
            f"Receipt {receipt.id}: {receipt.status or 'unknown'}. "
            "Acceptance is not the same as the worker being gone, nor as a successful resume (R5.1).",
            f"Next: {next_text}",
        ]
        why = settled_reason(facts)
        case = ctx.store.get_open_case(session_id) if why else None
        if case is not None:
            ctx.store.close_case(case.id, actor, f"verification: {why}")
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
