"""Cases and hand-offs: every session under recovery is a case with an owner, a thread and notes.

The hand-off digest is built from the step store alone, so the next shift gets it even while the
control host is down, and every command here is itself recorded as a step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.clock import parse_time
from bot.decisions import _text as text
from bot.decisions._context import DecisionContext
from bot.decisions._requests import OPEN_STATES, DecisionRequest
from bot.decisions._rules import ID_RE, settled_reason
from bot.errors import ControlHostError
from bot.messages import Message, Reply, ref
from bot.runbook.suggest import did_you_mean
from bot.runbook.usage import typed_line
from bot.store import Step
from bot.vocab import Policy, RequestState


def who(user: str | None) -> str:
    return f"{ref(user)}" if user else "nobody"


class CaseBook:
    """cases, history, take, note, done, handoff, and closing a settled case."""

    def __init__(self, ctx: DecisionContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.requests = ctx.requests

    def cases(self, actor: str | None = None) -> Reply:
        """The open cases, one line each. With ``actor`` (the typed command) the look-up is recorded;
        views that refresh by themselves (App Home) pass none and leave the audit log alone."""
        open_cases = self.store.list_open_cases()
        if actor is not None:
            self.ctx.record(None, actor, "cases", {}, f"{len(open_cases)} open")
        if not open_cases:
            return Reply.of(Message(headline="No open cases."))
        lines = []
        for case in open_cases:
            steps = self.store.steps(session_id=case.session_id)
            verifying = _verifying(steps, case.id)
            state = f" — {verifying}" if verifying else ""
            lines.append(f"`{case.session_id}` owner {who(case.owner)}{state} — last: {_last(steps)}")
        return Reply.of(Message(headline=f"{len(open_cases)} open case(s)", lines=lines))

    def verifying(self) -> list[tuple[str, str]]:
        """(session, what its verification says) for each open case still being verified or failing
        again after an accepted decision (R5.1): they wait on the bot's watch, or on an operator."""
        found = []
        for case in self.store.list_open_cases():
            state = _verifying(self.store.steps(session_id=case.session_id), case.id)
            if state:
                found.append((case.session_id, state))
        return found

    def history(self, session_id: str, actor: str | None = None) -> Reply:
        """Every recorded step of a session, in order (the look-up is recorded outside the session's case)."""
        steps = self.store.steps(session_id=session_id)
        self.ctx.record(None, actor or "recover-bot", "history", {"session_id": session_id}, f"{len(steps)} steps")
        if not steps:
            # A mistyped id is the likely reason: the known ids near it, as history lines to copy.
            near = [n for n in self.ctx.diagnoser.near_sessions(session_id) if n != session_id]
            lines = did_you_mean(*(typed_line("history", n) for n in near)) if near else []
            return Reply.of(
                Message(headline=f"No recorded steps for `{session_id}`.", lines=lines, session_id=session_id)
            )
        lines = [
            f"#{s.seq} {s.at} {who(s.actor)} {s.step} → {s.outcome}"
            + (f" (HTTP {s.http_status})" if s.http_status else "")
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
        unknown = self._unknown(actor, "take", session_id)
        if unknown is not None:
            return unknown
        case = self.store.open_case(session_id, actor)
        previous = case.owner
        self.store.set_owner(case.id, actor)
        self.ctx.record(session_id, actor, "take", {"previous_owner": previous}, "owner")
        was = f" (was {who(previous)})" if previous and previous != actor else ""
        return Reply.of(
            Message(
                headline=f"{ref(actor)} now owns the case of `{session_id}`{was}",
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
        unknown = self._unknown(actor, "note", session_id, note_text)
        if unknown is not None:
            return unknown
        self.ctx.record(session_id, actor, "note", {"text": note_text}, "noted")
        return Reply.of(
            Message(headline=f"Noted on `{session_id}`", lines=[note_text], level="ok", session_id=session_id)
        )

    def _unknown(self, actor: str, step: str, session_id: str, *rest: str) -> Reply | None:
        """A refusal when the control host has no such session (a mistyped id opens no case), else
        None. A session the store already has a case for, or a host that cannot answer, is not refused:
        hand-off notes must work while the control host is down."""
        if self.store.get_open_case(session_id) is not None:
            return None
        try:
            self.ctx.client.get_session(session_id)
        except ControlHostError as exc:
            if exc.code != "NOT_FOUND":
                return None
            return self.ctx.refuse(
                actor,
                None,
                step,
                {"session_id": session_id},
                f"the control host has no session `{session_id}`: no case was opened",
                *self.ctx.unknown_session_lines(session_id, lambda near: typed_line(step, near, *rest)),
                code="not_found",
            )
        return None

    def close_if_settled(
        self, session_id: str, actor: str, facts: Mapping[str, object], found_by: str
    ) -> list[Message]:
        """Close the session's open case when ``facts`` show it needs no operator (a recorded step)."""
        why = settled_reason(facts)
        case = self.store.get_open_case(session_id) if why else None
        if case is None or why is None:
            return []
        if any(r.state in OPEN_STATES for r in self.requests.find(session_id=session_id)):
            return []  # a request still in flight keeps its case open until it is finished
        self.store.close_case(case.id, actor, f"{found_by}: {why}")
        return [Message(headline=f"Case of `{session_id}` closed: {why}.", level="ok", session_id=session_id)]

    def done(self, actor: str, session_id: str, reason: str | None = None) -> Reply:
        """`/recover done`: close the bot's case by hand. Sends nothing to the control host (not `close`)."""
        if not ID_RE.match(session_id):
            return Reply.of(text.refusal(f"invalid session id {session_id!r}"), ok=False)
        case = self.store.get_open_case(session_id)
        if case is None:
            return Reply.of(
                text.refusal(
                    f"`{session_id}` has no open case: nothing to close",
                    "`/recover cases` lists the open ones.",
                    session_id=session_id,
                ),
                ok=False,
            )
        in_flight = [r for r in self.requests.find(session_id=session_id) if r.state in OPEN_STATES]
        if in_flight:
            r = in_flight[0]
            how = (
                "its send has no definite answer yet: finish it with `/recover replay`"
                if r.state in (RequestState.SENDING, RequestState.UNCERTAIN)
                else f"withdraw it first (`/recover withdraw {r.id}`) or let it be decided"
            )
            return Reply.of(
                text.refusal(
                    f"the case of `{session_id}` has request {r.id} (`{r.decision}`) still {r.state}",
                    f"The case stays open: {how}.",
                    session_id=session_id,
                ),
                ok=False,
            )
        why = (reason or "").strip() or "closed by hand"
        self.store.close_case(case.id, actor, f"done: {why}")
        return Reply.of(
            Message(
                headline=f"Case of `{session_id}` closed by {who(actor)}: {why}",
                lines=["Nothing was sent to the control host: the session itself is unchanged (this is not `close`)."],
                level="ok",
                session_id=session_id,
            )
        )

    def handoff(self, actor: str, *, before: datetime | None = None) -> HandoffDigest:
        """What the next shift needs, read from the step store alone (it works while the control host
        is down): each open case as one entry (state, owner, the one next command, its thread), the
        expired requests not yet handed off, and the count of cases that need no one. Recorded as a
        ``handoff`` step, whose time ends the listing of the requests that expired before it.

        ``before``: hand off the requests that expired since the last hand-off before that time (a
        watcher taking over a shift change's post hands off what its dead owner would have)."""
        now = self.ctx.now()
        expired = self.expired_since_handoff(now, before=before)
        entries: list[HandoffEntry] = []
        open_cases = self.store.list_open_cases()
        for case in open_cases:
            sid = case.session_id
            steps = self.store.steps(session_id=sid)
            open_reqs = tuple(r for r in self.requests.find(session_id=sid) if r.is_open)
            gone = tuple(r for r in expired if r.session_id == sid)
            failing = _verifying(steps, case.id)
            state = failing or _case_state(steps, open_reqs)
            entries.append(
                HandoffEntry(
                    session_id=sid,
                    group=_group(case.owner, steps, open_reqs, gone, failing),
                    state=state,
                    owner=case.owner,
                    opened_at=case.opened_at,
                    requests=open_reqs,
                    expired=gone,
                    next_step=_next_step(sid, steps, open_reqs),
                    thread=(case.channel, case.thread_ts) if case.channel and case.thread_ts else None,
                )
            )
        listed = {e.session_id for e in entries}
        before_head = self.store.head_ref()
        self.ctx.record(
            None,
            actor,
            "handoff",
            {"open_cases": len(open_cases)},
            "posted",
            detail={"sessions": sorted(listed), "head_before": before_head, "expired": [r.id for r in expired]},
        )
        return HandoffDigest(
            at=now,
            entries=entries,
            expired=[r for r in expired if r.session_id not in listed],
            head_before=before_head,
            head=self.store.head_ref(),
        )

    def expired_since_handoff(self, now: datetime, *, before: datetime | None = None) -> list[DecisionRequest]:
        """The requests that expired since the last hand-off (before ``before``, else up to now): the
        hand-off and ``pending --all`` list them until the next hand-off after their expiry."""
        last = self._last_handoff(before) if before is not None else self._last_handoff(now, inclusive=True)
        return [
            r
            for r in self.requests.find(states=(RequestState.EXPIRED,))
            if last is None or (parse_time(r.expires_at) or now) > last
        ]

    def _last_handoff(self, before: datetime, *, inclusive: bool = False) -> datetime | None:
        """When the last digest was handed off before ``before`` (up to it, ``inclusive``: a hand-off
        asked in the same instant counts). A shift change's claim, recorded ``posted_by_watch``, is not
        a digest: only the digest's own ``posted`` step counts."""
        times = [
            t
            for s in self.store.steps_named("handoff")
            if s.outcome == "posted"
            and (t := parse_time(s.at)) is not None
            and (t < before or inclusive and t == before)
        ]
        return max(times, default=None)


#: Where a hand-off entry is listed: someone must act now; someone (or the bot) has it in hand; no
#: one is needed (counted, not listed: e.g. a stop folded into a watch storm's triage message).
NOW, IN_HAND, NO_ONE = "now", "in_hand", "no_one"


@dataclass(frozen=True)
class HandoffEntry:
    """One open case as the hand-off lists it."""

    session_id: str
    group: str
    state: str
    owner: str | None
    opened_at: str
    requests: tuple[DecisionRequest, ...]
    expired: tuple[DecisionRequest, ...]
    next_step: str
    thread: tuple[str, str] | None  # (channel, ts) of the case's thread, when it has one


@dataclass
class HandoffDigest:
    """The hand-off as data; each front end's words are :mod:`bot.app.handoff`'s."""

    at: datetime
    entries: list[HandoffEntry]
    expired: list[DecisionRequest]  # expired requests whose case is no longer open
    head_before: str
    head: str

    @property
    def needing_no_one(self) -> int:
        return sum(e.group == NO_ONE for e in self.entries)


def _group(
    owner: str | None,
    steps: Sequence[Step],
    open_reqs: Sequence[DecisionRequest],
    expired: Sequence[DecisionRequest],
    failing: str | None,
) -> str:
    waiting_on_person = any(r.state in (RequestState.REQUESTED, RequestState.RECHECK) for r in open_reqs)
    if waiting_on_person or expired or (failing and "failing again" in failing):
        return NOW
    if owner or open_reqs or failing:
        return IN_HAND
    if steps and all(s.step == "watch_stop" for s in steps):
        return NO_ONE  # only ever counted by watch (a storm, a pause, quiet hours): nobody touched it
    return NOW  # a case nobody owns: someone takes it


def _verifying(steps: Sequence[Step], case_id: int) -> str | None:
    """The case's verification after an accepted decision, when it is still in progress or failed
    again (R5.1): acceptance is not recovery, so such a case is listed as what it is."""
    last = next((s for s in reversed(steps) if s.step == "verification" and s.case_id == case_id), None)
    if last is None or last.outcome not in ("verifying", "failed_again", "unconfirmed"):
        return None
    d = last.detail or {}
    decision = d.get("decision") or last.inputs.get("decision") or "a decision"
    if last.outcome == "failed_again":
        return f"failing again after `{decision}` ({d.get('why', 'see the thread')}): needs an operator (R5.4)"
    if last.outcome == "unconfirmed":
        return (
            f"running after `{decision}`; whether it picked up the checkpoint's context cannot be known from "
            "the control host: check the new turn by hand, then `done` (R5.2)"
        )
    watch = d.get("watch") or {}
    since = watch.get("since") or last.at
    late = ": no worker has reported ready within the start-up window" if watch.get("overdue_said") else ""
    return f"verifying after `{decision}` since {since}{late}: closes when recovery is observed (R5.1)"


def _last(steps: Sequence[Step]) -> str:
    if not steps:
        return "none"
    s = steps[-1]
    return f"{s.step} → {s.outcome} by {who(s.actor)} at {s.at}"


def _case_state(steps: Sequence[Step], open_reqs: Sequence[DecisionRequest]) -> str:
    states = {r.state for r in open_reqs}
    if RequestState.RECHECK in states:
        return "waiting for the effects re-check now that the worker is gone (R3.9, R3.10)"
    if RequestState.WAITING in states:
        return "waiting for the scheduler to confirm the worker gone (R3.9)"
    if states & {RequestState.APPROVED, RequestState.SENDING, RequestState.UNCERTAIN}:
        return "decision in flight"
    if RequestState.REQUESTED in states:
        return "waiting for approval/confirmation"
    verifs = [s for s in steps if s.step == "verification"]
    member = [s for s in steps if s.step.startswith("batch_member_")]
    if member and (not verifs or member[-1].seq > verifs[-1].seq):
        m = member[-1]  # a batch's outcome for this member is the latest news of the case
        return (
            f"batch {m.inputs.get('batch_id')}: `{m.inputs.get('decision')}` {m.outcome}; verify with diagnose (R5.1)"
        )
    if verifs:
        d = verifs[-1].detail or {}
        return (
            f"after {d.get('decision', 'a decision')}: status {text.show(d.get('session.status'))}, "
            f"admission {text.show(d.get('session.admission_state'))}, "
            f"resumable {text.show(d.get('session.resumable'))}"
        )
    return "under investigation"


def _next_step(session_id: str, steps: Sequence[Step], open_reqs: Sequence[DecisionRequest]) -> str:
    for r in open_reqs:
        if r.state == RequestState.REQUESTED:
            if r.policy == Policy.TWO_PERSON:
                return f"a second person approves or rejects {r.id} (`{typed_line('approve', r.id)}`)"
            return f"{who(r.requester)} confirms or drops {r.id}"
        if r.state == RequestState.RECHECK:
            return (
                f"{who(r.requester)} or {who(r.approved_by)} re-checks the turn's external effects and runs "
                f'`/recover confirm {r.id}` (a changed account: `--effects "…"`, a new request) before '
                f"{r.expires_at} (R3.10)"
            )
        if r.state == RequestState.UNCERTAIN:
            return f"{r.id} got no definite answer: the bot re-sends it in the background with the same key"
        if r.state == RequestState.WAITING:
            return f"wait for the scheduler's pass; {r.id} is then re-checked or submitted once (R3.9)"
        return f"{r.id} is being executed; after a restart the bot finishes it on start-up"
    verifs = [s for s in steps if s.step == "verification"]
    if verifs and (verifs[-1].detail or {}).get("next"):
        return str((verifs[-1].detail or {})["next"])
    return f"diagnose: `{typed_line('diagnose', session_id)}`"
