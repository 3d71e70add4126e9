"""``break-glass``: the requester of a pending two-person request sends it alone, in the open.

Why this shape: at 3 a.m. with one person on call the two-person rule has no way forward, and teams
in that position switch it off. Break-glass keeps it on: allowed only where the runbook's conditions
hold (bot/decisions/_glassrule.py), shown exactly as it will be sent, confirmed by a typed
``/recover confirm <request_id>``, announced loudly (the channel, and a DM to each eligible approver)
**before** anything is sent, then sent through the one gate, which accepts the recorded
``break_glass`` step in place of an approval only after its ``break_glass_announced`` step. It opens a
review (bot/decisions/_reviews.py) that blocks the next use until someone else signs it.
"""

from __future__ import annotations

from typing import Any, Protocol

from bot.clock import parse_time
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._glassrule import (
    ANNOUNCED,
    ASKED,
    BREAK_GLASS,
    glass_verdict,
    ladder_reach,
    others_reading,
)
from bot.decisions._guards import (
    Refusal,
    in_recovery_channel,
    in_state,
    is_requester,
    load,
    moved,
    not_expired,
    refusing,
    untampered,
)
from bot.decisions._ladder_rows import unsaid_steps
from bot.decisions._lifecycle import Execution, grant
from bot.decisions._policy import flags_of
from bot.decisions._requests import DecisionRequest
from bot.decisions._reviews import ReviewRoom
from bot.decisions._rules import CONSOLE_CHANNEL, requester_refusal, same_person
from bot.decisions._widening import widened_now
from bot.ids import is_request_id
from bot.messages import Message, Reply, Reporter, ref
from bot.runbook.usage import typed_line
from bot.vocab import Policy, RequestState, Step


class Notice(Protocol):
    """Where the loud notice goes: a channel id, or a user id (a DM). The Slack front gives one."""

    def post(self, where: str, message: Message) -> str | None:
        """Post ``message``; its ts, or None when it could not be posted (then nothing is sent)."""
        ...


class BreakGlassRoom:
    """``break-glass`` (shown, asked) and its typed ``confirm`` (announced, recorded, sent)."""

    def __init__(
        self, ctx: DecisionContext, execution: Execution, reviews: ReviewRoom, notice: Notice | None = None
    ) -> None:
        self.ctx = ctx
        self.execution = execution
        self.reviews = reviews
        # Given at composition by a front that can post (bot/slack/notice.py); None: break-glass is
        # refused before anything is sent, since nobody would be told.
        self.notice = notice

    # -- the checks, at "now" (the gate repeats them from the chain's times) -------------------------

    def _check(self, req: DecisionRequest, actor: str, channel: str | None) -> tuple[dict[str, Any], str]:
        """Every condition of a break-glass by ``actor`` now; (the approvers' reading, why allowed)."""
        ctx, sid = self.ctx, req.session_id
        in_recovery_channel(ctx, channel, "break-glass is", sid)
        if req.policy != Policy.TWO_PERSON:
            raise Refusal(
                f"request {req.id} is a single-person `{req.decision}`: there is no glass to break",
                f"Its requester confirms it: `/recover confirm {req.id}`.",
                session_id=sid,
            )
        in_state(req, RequestState.REQUESTED)
        unmapped = requester_refusal(actor, Policy.TWO_PERSON, ctx.console_users)
        if unmapped is not None:
            raise Refusal(unmapped[0], unmapped[1], session_id=sid, code="not_mapped")
        if not is_requester(ctx, actor, req):
            raise Refusal(
                f"only {ref(req.requester)}, who asked for it, may break glass on {req.id}",
                f"As a second person, approve it instead: `{typed_line('approve', req.id)}`.",
                session_id=sid,
            )
        open_review = self.reviews.open_of(actor)
        if open_review is not None:
            raise Refusal(
                f"break-glass refused: your earlier break-glass use ({open_review.request_id}) is not reviewed yet",
                f"Someone other than you signs it first: `/recover review {open_review.request_id} --ok` "
                '(or --concern "…"). Until then ask a second person to approve.',
                session_id=sid,
                code="review_open",
            )
        untampered(ctx, req, actor)
        not_expired(ctx, req, actor, "Make a new request with `/recover decide …` if it is still needed.")
        spec, now = ctx.runbooks.escalation, ctx.now()
        requested_at = parse_time(req.created_at)
        assert requested_at is not None
        # Who else may approve, now or once the ladder has widened: RECOVER_APPROVERS (groups read through
        # the directory) and the ladder's widening, by the one approver rule (recorded with the step).
        widened = widened_now(spec, ctx.store.steps(session_id=sid), req.id, now)
        reading, no_other = others_reading(
            req.requester, ctx.approvers, ladder_reach(spec, widened), ctx.directory, ctx.console_users
        )
        verdict = glass_verdict(spec, req.decision, requested_at, now, parse_time(req.expires_at), no_other)
        if verdict.problem is not None:
            raise Refusal(
                f"break-glass refused: {verdict.problem}",
                "Break-glass is allowed, until the expiry and for the decisions the runbook names, once "
                "the escalation ladder has run to its end or when nobody but you may approve; until "
                f"then a second person approves (`/recover remind {req.id}` nudges them).",
                session_id=sid,
                code="not_allowed",
            )
        # ``no_other`` is why someone else may approve (None: nobody else may): then the ladder's end is the
        # reason break-glass is allowed, and that end counts only for steps the approvers were shown.
        unsaid = unsaid_steps(ctx.store, req.id) if no_other is not None else []
        if unsaid and spec is not None:
            # Allowed by the ladder's end, by the clock; a ladder whose steps were not posted was seen by no
            # approver, so it has not run to its end: break-glass comes only after the approvers were asked.
            steps = ", ".join(f"{i + 1} ({spec.steps[i].kind})" if i < len(spec.steps) else str(i + 1) for i in unsaid)
            raise Refusal(
                f"break-glass refused: the escalation ladder's step(s) {steps} were not posted in Slack, "
                "so no approver was asked",
                "The ladder tries them again every few seconds (check that the request's thread exists "
                f"and Slack answers); then break glass again, or ask a second person: "
                f"`{typed_line('approve', req.id)}`.",
                session_id=sid,
                code="not_allowed",
            )
        return reading, verdict.why

    def _wire(self, req: DecisionRequest) -> list[str]:
        """What will be sent, as the dry run shows it (a fresh diagnosis sets expected_revision)."""
        facts, _ = self.ctx.diagnose(req.session_id, req.turn_id)
        method, path, body = self.ctx.policy(req.decision).request(req.session_id, facts, flags_of(req))
        return text.wire_lines(method, path, body)

    # -- break-glass <request_id> --incident <ref> --reason "…" ---------------------------------------

    def ask(self, actor: str, channel: str | None, request_id: str, incident: str, reason: str) -> Reply:
        """Show exactly what will be sent and ask for the typed confirmation; sends nothing."""
        inputs = {"request_id": request_id, "channel": channel, "incident": incident, "reason": reason}

        def attempt() -> Reply:
            req = load(self.ctx, request_id)
            if not incident.strip() or not reason.strip():
                raise Refusal(
                    'break-glass needs --incident <ref> and --reason "…"',
                    f'Type `/recover break-glass {request_id} --incident INC-… --reason "…"`.',
                )
            # Said at once, before any other check and the preview: one that could never be confirmed
            # here is no offer, whatever the ladder says.
            self._notice_place(req, channel)
            _, why = self._check(req, actor, channel)
            wire = self._wire(req)
            self.ctx.record(
                req.session_id, actor, ASKED, {**inputs, "content_hash": req.content_hash}, "asked", opens_case=False
            )
            where = self._where(req, channel)
            return Reply.of(
                Message(
                    headline=f"Break-glass: `{req.decision}` on `{req.session_id}` without a second person? "
                    f"Type `/recover confirm {req.id}` to send it (request {req.id})",
                    level="warn",
                    lines=[
                        f"Allowed because {why}. Incident: {incident}. Reason: {reason}.",
                        "This will be sent:",
                        *wire,
                        "",
                        f"On confirmation a loud notice goes first to {ref(where, '#') if where else 'the channel'} "
                        "and to each eligible approver by DM; if it cannot be posted, nothing is sent.",
                        "A review opens: until someone else signs it you cannot break glass again.",
                        f"/recover confirm {req.id}",
                    ],
                    rules=["R3.10"],
                    session_id=req.session_id,
                    ref=req.id,
                )
            )

        return refusing(self.ctx, actor, ASKED, inputs, attempt)

    def asked(self, actor: str, request_id: str) -> dict[str, Any] | None:
        """The requester's latest ``break-glass`` of this still-pending request, awaiting its confirm."""
        req = self.ctx.requests.get(request_id) if is_request_id(request_id) else None
        if req is None or req.state != RequestState.REQUESTED or not is_requester(self.ctx, actor, req):
            return None
        mine = [
            s
            for s in self.ctx.store.steps(session_id=req.session_id)
            if s.inputs.get("request_id") == req.id and s.step in (ASKED, BREAK_GLASS)
        ]
        last = mine[-1] if mine else None
        if (
            last is None
            or last.step != ASKED
            or last.outcome != "asked"
            or not same_person(last.actor, actor, self.ctx.console_users)
        ):
            return None
        return dict(last.inputs)

    @staticmethod
    def _where(req: DecisionRequest, channel: str | None) -> str | None:
        """The channel the loud notice goes to: the request's own, else the one typed in (never the console)."""
        for where in (req.channel, channel):
            if where and where != CONSOLE_CHANNEL:
                return where
        return None

    def _notice_place(self, req: DecisionRequest, channel: str | None) -> tuple[str, Notice]:
        """Where the loud notice goes and who posts it; refused (one wording, at ``break-glass`` and at
        ``confirm``) where nobody would be told: the console posts no notice."""
        where = self._where(req, channel)
        if self.notice is None or where is None:
            raise Refusal(
                "break-glass refused: the loud notice cannot be posted from here; nothing was sent",
                "Break glass in Slack, where the notice reaches the channel and each approver.",
                session_id=req.session_id,
                code="no_notice",
            )
        return where, self.notice

    # -- confirm <request_id> -------------------------------------------------------------------------

    def confirm(self, actor: str, channel: str | None, request_id: str, reporter: Reporter) -> Reply:
        """Checked again, announced (channel, then each approver's DM), recorded, then sent via the gate."""
        inputs = {"request_id": request_id, "channel": channel, "break_glass": True}

        def attempt() -> Reply:
            req = load(self.ctx, request_id)
            asked = self.asked(actor, request_id)
            if asked is None:
                raise Refusal(
                    f"no break-glass of {request_id} waits for your confirmation",
                    f'Start with `/recover break-glass {request_id} --incident … --reason "…"`.',
                )
            reading, why = self._check(req, actor, channel)
            incident, reason = str(asked.get("incident")), str(asked.get("reason"))
            where, poster = self._notice_place(req, channel)
            notice = self._notice(req, incident, reason, why)
            if poster.post(where, notice) is None:
                raise Refusal(
                    f"break-glass refused: the loud notice could not be posted in {ref(where, '#')}; nothing was sent",
                    "Try again once Slack answers.",
                    session_id=req.session_id,
                    code="no_notice",
                )
            others = [str(u) for u in reading.get("others") or []]
            failed = [u for u in others if poster.post(u, notice) is None]
            if failed:
                raise Refusal(
                    "break-glass refused: the notice could not reach "
                    + ", ".join(ref(u) for u in failed)
                    + " by DM; nothing was sent",
                    "Try again, or ask them to approve.",
                    session_id=req.session_id,
                    code="no_notice",
                )
            common = {"request_id": req.id, "content_hash": req.content_hash, "channel": channel}
            self.ctx.record(req.session_id, actor, ANNOUNCED, {**common, "where": where, "notified": others}, "posted")
            glass = {"channel": channel, "incident": incident, "reason": reason, "reading": reading, "why": why}
            if not grant(self.ctx, req, actor, BREAK_GLASS, glass):
                moved(self.ctx, req)
            sent = self.execution.execute(req.id, actor, reporter)
            opened = Message(
                headline=f"A break-glass review of {req.id} is open: someone other than {ref(actor)} signs it",
                level="warn",
                lines=[f'/recover review {req.id} --ok    or    /recover review {req.id} --concern "…"'],
                session_id=req.session_id,
            )
            return Reply([*sent.messages, opened], ok=sent.ok)

        return refusing(self.ctx, actor, Step.CONFIRM, inputs, attempt)

    def _notice(self, req: DecisionRequest, incident: str, reason: str, why: str) -> Message:
        return Message(
            headline=f"BREAK-GLASS: {ref(req.requester)} is sending `{req.decision}` on `{req.session_id}` "
            f"without a second person (request {req.id})",
            level="error",
            lines=[
                f"Incident: {incident}. Reason: {reason}.",
                f"Allowed because {why}. Nothing is sent before this notice.",
                f'Review it (anyone but {ref(req.requester)}): `/recover review {req.id} --ok` or `--concern "…"`.',
            ],
            session_id=req.session_id,
            kind="break_glass_notice",
            ref=req.id,
        )
