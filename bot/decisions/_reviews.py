"""Break-glass reviews: every ``break_glass`` step opens one; a second person signs it with ``review``.

Why: acting alone is allowed only in the open and only once at a time. Until someone other than the
requester signs (``--ok`` or ``--concern "…"``, a ``break_glass_reviewed`` step), that person cannot
break glass again, on any request; the open review stays in ``cases``, ``pending`` and ``handoff``
with its age. Everything here is read from the step log, so it survives restarts and table edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.decisions._context import DecisionContext
from bot.decisions._glassrule import BREAK_GLASS, REVIEWED
from bot.decisions._guards import Refusal, in_recovery_channel, load, refusing
from bot.decisions._rules import person_of, same_person
from bot.format import age
from bot.messages import Message, Reply, ref
from bot.runbook.usage import typed_line
from bot.store import Step as StoredStep
from bot.vocab import Step

KIND = "break_glass_reviews"


@dataclass(frozen=True)
class OpenReview:
    """A break-glass use nobody has signed yet."""

    request_id: str
    session_id: str | None
    requester: str
    incident: str
    reason: str
    at: str

    def line(self, now: datetime) -> str:
        return (
            f"`{self.request_id}` break-glass on `{self.session_id}` by {ref(self.requester)} "
            f"(incident {self.incident}) · review open for {age(self.at, now)} · "
            f'`/recover review {self.request_id} --ok` or `--concern "…"` (anyone but {ref(self.requester)})'
        )


class ReviewRoom:
    """``review``, and the open reviews every digest lists."""

    def __init__(self, ctx: DecisionContext) -> None:
        self.ctx = ctx

    def _uses(self) -> tuple[list[StoredStep], set[str]]:
        steps = self.ctx.store.steps_named(BREAK_GLASS, REVIEWED)
        signed = {str(s.inputs.get("request_id")) for s in steps if s.step == REVIEWED}
        return [s for s in steps if s.step == BREAK_GLASS], signed

    def open_reviews(self) -> list[OpenReview]:
        """Every break-glass use without a signed review, oldest first."""
        uses, signed = self._uses()
        return [
            OpenReview(
                request_id=str(s.inputs.get("request_id")),
                session_id=s.session_id,
                requester=s.actor,
                incident=str(s.inputs.get("incident") or ""),
                reason=str(s.inputs.get("reason") or ""),
                at=s.at,
            )
            for s in uses
            if str(s.inputs.get("request_id")) not in signed
        ]

    def open_of(self, actor: str) -> OpenReview | None:
        """The oldest unsigned review of a break-glass use by ``actor`` (the one identity function)."""
        return next((r for r in self.open_reviews() if same_person(r.requester, actor, self.ctx.console_users)), None)

    def message(self, now: datetime) -> Message | None:
        """The open reviews, one line each (``cases``, ``pending`` and ``handoff`` show it)."""
        reviews = self.open_reviews()
        if not reviews:
            return None
        return Message(
            headline=f"{len(reviews)} break-glass review(s) open: each needs a second person's signature",
            level="warn",
            lines=[r.line(now) for r in reviews],
            kind=KIND,
        )

    def review(self, actor: str, channel: str | None, request_id: str, ok: bool, concern: str | None) -> Reply:
        """Anyone but the requester (compared by Slack id; an unmapped console login is nobody) signs."""
        inputs = {"request_id": request_id, "channel": channel, "ok": ok, "concern": concern}

        def attempt() -> Reply:
            req = load(self.ctx, request_id)
            sid = req.session_id
            in_recovery_channel(self.ctx, channel, "reviews are", sid)
            if ok == bool(concern):
                raise Refusal(
                    'a review is either --ok or --concern "…", exactly one of them',
                    f'Type `/recover review {req.id} --ok` or `/recover review {req.id} --concern "…"`.',
                    session_id=sid,
                )
            uses, signed = self._uses()
            use = next((s for s in uses if s.inputs.get("request_id") == req.id), None)
            if use is None:
                raise Refusal(
                    f"request {req.id} was not sent by break-glass: there is nothing to review",
                    "`/recover pending` lists the open reviews.",
                    session_id=sid,
                )
            if req.id in signed:
                raise Refusal(
                    f"the break-glass use of {req.id} is already reviewed",
                    f"`{typed_line('history', sid)}` shows who signed it.",
                    session_id=sid,
                )
            if person_of(actor, self.ctx.console_users) is None:
                raise Refusal(
                    f"console login {actor.removeprefix('console:')!r} is not mapped to a Slack user id "
                    "(RECOVER_CONSOLE_USERS): it cannot sign a review",
                    "Map it in RECOVER_CONSOLE_USERS or sign in Slack.",
                    session_id=sid,
                    code="not_reviewer",
                )
            if same_person(actor, use.actor, self.ctx.console_users):
                raise Refusal(
                    "you cannot review your own break-glass use: someone else signs it",
                    f"Ask another on-call engineer to run `/recover review {req.id} --ok` (or --concern).",
                    session_id=sid,
                    code="self_review",
                )
            verdict = "ok" if ok else "concern"
            self.ctx.record(
                sid,
                actor,
                REVIEWED,
                {
                    "request_id": req.id,
                    "channel": channel,
                    "verdict": verdict,
                    "concern": concern,
                    "glass_seq": use.seq,
                },
                verdict,
                opens_case=False,
            )
            said = "signed it off (ok)" if ok else f"raised a concern: {concern}"
            return Reply.of(
                Message(
                    headline=(
                        f"Break-glass review of {req.id} signed by {ref(actor)}: {ref(use.actor)} may break glass again"
                    ),
                    level="ok" if ok else "warn",
                    lines=[
                        f"{ref(actor)} {said}.",
                        f"Incident {use.inputs.get('incident')}; reason: {use.inputs.get('reason')}",
                    ],
                    session_id=sid,
                )
            )

        return refusing(self.ctx, actor, Step.REVIEW, inputs, attempt)
