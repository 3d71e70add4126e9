"""``/recover remind <request_id>``: the requester runs the next ladder step now, at most once per
``remind_interval``; refused with the time left otherwise, and for anyone but the requester.

Identity is the approvals' rule (``same_person``). A ``remind``/``mention`` step runs early, claimed
like any due step (lease, pending check and chain step in one commit) and is then not run again at its
time; a ``widen`` step keeps its time (the requester never advances who may approve their own request),
so its ``remind`` mentions the eligible approvers instead, as does one after the ladder's end.
"""

from __future__ import annotations

from bot.clock import parse_time
from bot.decisions._guards import Refusal, is_requester, load, refusing
from bot.escalation import text
from bot.escalation.ladder import PENDING_STATES, eligible_now, next_step, spec_of
from bot.escalation.runner import LadderRunner, Pass
from bot.escalation.store import Claim
from bot.format import duration
from bot.messages import Message, Reply, ref
from bot.runbook.usage import typed_line
from bot.vocab import Step


def remind(runner: LadderRunner, actor: str, request_id: str) -> Reply:
    ctx = runner.ctx
    inputs = {"request_id": request_id}

    def attempt() -> Reply:
        req = load(ctx, request_id)
        spec = spec_of(ctx, req)
        if spec is None:
            raise Refusal(
                f"request {req.id} has no escalation ladder (only two-person requests do, "
                "when the runbook has an `escalation:` section)",
                session_id=req.session_id,
            )
        if not is_requester(ctx, actor, req):
            raise Refusal(
                f"only {ref(req.requester)}, who asked for it, reminds about request {req.id}",
                f"Approve or reject it instead: `{typed_line('approve', req.id)}`.",
                session_id=req.session_id,
            )
        if req.state not in PENDING_STATES:
            raise Refusal(f"request {req.id} is {req.state}: nothing to remind anyone of", session_id=req.session_id)
        now = ctx.now()
        nxt = next_step(ctx, req)
        interval = spec.remind_interval_seconds
        if nxt is not None and nxt[1].kind != "widen":
            got = runner.rows.claim(
                req.id,
                nxt[0],
                owner=runner.owner,
                now=now,
                lease=runner.lease,
                inputs=runner.inputs_for(req, nxt[0], now),
                early_by=actor,
                remind_interval=interval,
            )
        else:
            index = nxt[0] if nxt is not None else len(spec.steps)
            recorded = runner.rows.record_instead(
                req.id,
                index,
                owner=runner.owner,
                by=actor,
                now=now,
                remind_interval=interval,
                inputs={"mentions": list(eligible_now(ctx, req, now).ids)},
            )
            got = (
                recorded
                if isinstance(recorded, str)
                else Claim(req.id, index, "mention", req.session_id, now, inputs=recorded)
            )
        if isinstance(got, str):
            if got.startswith("early:"):
                at = parse_time(got.removeprefix("early:"))
                left = duration(max(0.0, ((at or now) - now).total_seconds()))
                raise Refusal(
                    f"`remind` ran for request {req.id} less than {duration(interval)} ago: "
                    f"the next one is allowed in {left}",
                    session_id=req.session_id,
                    code="too_soon",
                )
            raise Refusal(f"request {req.id}'s next ladder step is being posted right now", session_id=req.session_id)
        said = Pass()
        message = runner.say_now(got, said)
        what = "mentioned the eligible approvers" if got.kind == "mention" else f"ran the ladder's `{got.kind}` step"
        lines = [f"The next `remind` is allowed in {duration(interval)}."]
        done = Message(
            headline=f"Reminded: {what} for request {req.id} now",
            lines=lines,
            session_id=req.session_id,
            kind=text.KIND,
        )
        return Reply([done] if message is None else [message, done])

    return refusing(ctx, actor, Step.REMIND, inputs, attempt)
