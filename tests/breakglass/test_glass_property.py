"""A stateful property of break-glass (hypothesis): whatever sequence of requests, clock moves, passes of
the escalation ladder's runner (whose widening names another person and the requester), approvals,
break-glass uses (asked and confirmed), reviews and steps written past the checks (without the notice,
before the ladder's end, by someone else, over another request's content) happens, every POST the sandbox
control host received for a two-person request is authorised by either an approval by another eligible
person or a verified break-glass step by its requester — and then the Slack stand-in received the loud
notice before the POST. No ladder step or break-glass makes an ineligible person (the requester above
all, under any name) able to approve.

The observer reads the sandbox's request log and the Slack stand-in's calls, and judges the chain with
its own few lines (not the gate's code): the people, the ladder's end and the expiry, the order of steps.
"""

from __future__ import annotations

import itertools
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from bot.clock import parse_time
from bot.decisions import person_of
from bot.escalation.runner import LadderRunner
from bot.messages import ListReporter
from bot.sandbox import start_sandbox
from bot.vocab import RequestState
from tests.breakglass.world import (
    APPROVER,
    CHANNEL,
    EXPIRY,
    LADDER_END,
    OTHER,
    REQUESTER,
    World,
    make_world,
    post_times,
    stopped,
)
from tests.fixtures.escalation import RecordingPoster, short_ladder_folder
from tests.fixtures.slack import SlackStandIn

CONSOLE_USERS = {"root": REQUESTER}
PEOPLE = (REQUESTER, APPROVER, OTHER, "console:root", "console:deploy")  # root is the requester; deploy nobody
ELIGIBLE = {APPROVER}  # RECOVER_APPROVERS: OTHER approves only once the ladder widened to them
# The shipped ladder's times; its widening names OTHER and the requester (who must never become able to approve).
LADDER = f"""
escalation:
  steps:
    - {{kind: remind, after: {{duration: 10m, help: r}}}}
    - {{kind: mention, after: {{duration: 15m, help: m}}}}
    - {{kind: widen, after: {{duration: 20m, help: w}}, groups: [{OTHER}, {REQUESTER}]}}
  expiry: {{duration: 30m, help: e}}
"""
MOVES = (0, 60, 11 * 60, LADDER_END + 5, LADDER_END + 5, EXPIRY)
DEFECTS = ("no_notice", "early", "not_requester", "other_content")
_SHARED: dict[str, Any] = {}
_IDS = itertools.count()
SEEN: dict[str, set[str]] = {
    "approved": set(),
    "glass": set(),
    "widened": set(),
}  # requests sent each way, over all runs


def _shared() -> tuple[Any, SlackStandIn, Path]:
    if not _SHARED:
        _SHARED["sbx"] = start_sandbox(scenarios=None)
        _SHARED["api"] = SlackStandIn()
        _SHARED["runbooks"] = short_ladder_folder(Path(tempfile.mkdtemp(prefix="glass-rb-")), LADDER)
    return _SHARED["sbx"], _SHARED["api"], _SHARED["runbooks"]


class GlassMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.requests: list[str] = []
        self.n = next(_IDS)
        self.sessions = itertools.count()

    @initialize(opening=st.sampled_from(("glass", "approval", "widened", "nothing", *DEFECTS)))
    def start(self, opening: str) -> None:
        """A request by the requester, then (so every kind is seen) a break-glass at the ladder's end, an
        approval, one by a person the ladder widened to, nothing, or steps written past one check; the
        rules go on from there."""
        sbx, api, runbooks = _shared()
        db = Path(tempfile.mkdtemp(prefix="glass-prop-")) / "p.db"
        self.world = make_world(
            sbx, api, db, console_users=dict(CONSOLE_USERS), channels=(CHANNEL, "console"), runbooks_dir=runbooks
        )
        self.new_request(REQUESTER)
        if opening == "glass":
            self.to_the_ladder_end(0)
            self.break_glass(0, REQUESTER, True)
        elif opening == "approval":
            self.approve(0, APPROVER)
        elif opening == "widened":  # the ladder widened to OTHER and the requester: only OTHER approves
            self.to_the_ladder_end(0)
            self.ladder_pass()
            self.approve(0, "console:root")
            self.approve(0, OTHER)
        elif opening in DEFECTS:
            self.new_request(REQUESTER)
            if opening != "early":
                self.to_the_ladder_end(1)
            self.past_the_checks(0, 1, opening)

    def w(self) -> World:
        assert self.world is not None
        return self.world

    def _channel(self, person: str) -> str:
        return "console" if person.startswith("console:") else CHANNEL

    def _pick(self, i: int) -> str:
        return self.requests[i % len(self.requests)]

    @rule(person=st.sampled_from((REQUESTER, *PEOPLE)))
    def new_request(self, person: str) -> None:
        sid = f"ses_gp{self.n}_{next(self.sessions)}"
        stopped(self.w().sbx, sid)
        self.w().run(f'/recover decide {sid} close --reason "stuck"', person, self._channel(person))
        found = self.w().router.services.decisions.requests.find(session_id=sid)
        if found:
            self.requests.append(found[-1].id)

    @rule(seconds=st.sampled_from(MOVES))
    def advance(self, seconds: int) -> None:
        self.w().clock.advance(seconds)

    @rule(i=st.integers(0, 9))
    def to_the_ladder_end(self, i: int) -> None:
        """The clock moves (forward only) to just past request i's ladder end."""
        req = self.w().router.services.decisions.requests.get(self._pick(i))
        created = parse_time(req.created_at) if req is not None else None
        if created is not None:
            left = (created + timedelta(seconds=LADDER_END + 5) - self.w().clock.now()).total_seconds()
            self.w().clock.advance(max(0.0, left))

    @rule()
    def ladder_pass(self) -> None:
        """The escalation ladder's runner: due reminders, mentions and the widening, as chain steps."""
        LadderRunner(self.w().router.services.decisions.ctx, RecordingPoster()).run_due()

    @rule(i=st.integers(0, 9), person=st.sampled_from((APPROVER, APPROVER, *PEOPLE)))
    def approve(self, i: int, person: str) -> None:
        self.w().run(f"/recover approve {self._pick(i)}", person, self._channel(person))

    @rule(
        i=st.integers(0, 9),
        person=st.sampled_from((REQUESTER, REQUESTER, *PEOPLE)),
        confirm=st.sampled_from((True, True, False)),
    )
    def break_glass(self, i: int, person: str, confirm: bool) -> None:
        rid, where = self._pick(i), self._channel(person)
        self.w().run(f'/recover break-glass {rid} --incident INC-{i} --reason "alone"', person, where)
        if confirm:
            self.w().run(f"/recover confirm {rid}", person, where)

    @rule(i=st.integers(0, 9), person=st.sampled_from(PEOPLE), ok=st.booleans())
    def review(self, i: int, person: str, ok: bool) -> None:
        flag = "--ok" if ok else '--concern "paged too late"'
        self.w().run(f"/recover review {self._pick(i)} {flag}", person, self._channel(person))

    @rule(i=st.integers(0, 9), j=st.integers(0, 9), defect=st.sampled_from(DEFECTS))
    def past_the_checks(self, i: int, j: int, defect: str) -> None:
        """Steps a path that skipped one check would write (through the store's API, hashes valid)."""
        d = self.w().router.services.decisions
        req, other = d.requests.get(self._pick(i)), d.requests.get(self._pick(j))
        assert req is not None and other is not None
        if req.state != RequestState.REQUESTED or req.policy != "two_person":
            return
        created = parse_time(req.created_at)
        assert created is not None
        if defect == "early" and self.w().clock.now() >= created + timedelta(seconds=LADDER_END):
            return
        actor = APPROVER if defect == "not_requester" else req.requester
        digest = other.content_hash if defect == "other_content" else req.content_hash
        if defect == "other_content" and other.id == req.id:
            return
        ctx = d.ctx
        common = {"request_id": req.id, "content_hash": digest, "channel": CHANNEL}
        if defect != "no_notice":
            ctx.record(req.session_id, actor, "break_glass_announced", {**common, "notified": []}, "posted")
        with ctx.store.write() as db:
            if not ctx.requests.transition(
                db, req.id, (RequestState.REQUESTED,), RequestState.APPROVED, approved_by=actor, approved_at=ctx.iso()
            ):
                return
            ctx.record(
                req.session_id,
                actor,
                "break_glass",
                {**common, "incident": "INC-x", "reason": "x", "reading": {"others": []}},
                "approved",
                db=db,
            )
        d.execution.execute(req.id, actor, ListReporter())

    # -- the observer -------------------------------------------------------------------------------

    @staticmethod
    def _widened(mine: list[Any], approval: Any, start: Any) -> set[str]:
        """Who the ladder widened to before ``approval``, once the widening is due (20 minutes in)."""
        if (parse_time(approval.at) or start) < start + timedelta(minutes=20):
            return set()
        return {
            str(g)
            for w in mine
            if w.step == "escalation_widened" and w.seq < approval.seq
            for g in w.inputs.get("groups") or []
        }

    @invariant()
    def every_two_person_post_has_its_authority_and_the_notice_first(self) -> None:
        if self.world is None:
            return
        w = self.world
        d = w.router.services.decisions
        for rid in self.requests:
            req = d.requests.get(rid)
            assert req is not None
            posts = w.posts(req.session_id)
            if not posts:
                continue
            steps = w.router.services.store.steps(session_id=req.session_id)
            mine = [s for s in steps if s.inputs.get("request_id") == rid or (s.detail or {}).get("request_id") == rid]
            made = next(s for s in mine if s.step == "decision_requested")
            requester = person_of(made.actor, CONSOLE_USERS)
            assert requester is not None, "an unmapped login's two-person request was sent"
            start, expires = parse_time(made.at), parse_time(req.expires_at)
            assert start is not None and expires is not None
            approved = [
                s
                for s in mine
                if s.step == "decision_approved"
                and person_of(s.actor, CONSOLE_USERS) in (ELIGIBLE | self._widened(mine, s, start)) - {requester}
            ]
            announced = [s.seq for s in mine if s.step == "break_glass_announced" and s.actor == made.actor]
            glass = [
                s
                for s in mine
                if s.step == "break_glass"
                and s.actor == made.actor
                and s.inputs.get("content_hash") == req.content_hash
                and start + timedelta(seconds=LADDER_END) <= (parse_time(s.at) or start) <= expires
                and any(a < s.seq for a in announced)
            ]
            assert approved or glass, (rid, [(s.step, s.actor) for s in mine])
            SEEN["approved" if approved else "glass"].add(rid)
            if any(person_of(s.actor, CONSOLE_USERS) == OTHER for s in approved):
                SEEN["widened"].add(rid)  # sent on the approval of someone only the ladder made eligible
            if not approved:
                notices = w.notices(rid)
                assert notices, f"{rid} was sent by break-glass with no notice in Slack"
                assert max(at for _, at in notices) < min(post_times(posts)), (notices, posts)


# ~20 s on the 2-core machine: each step is real HTTP and SQLite; a failure is reported unshrunk.
GlassMachine.TestCase.settings = settings(
    max_examples=14, stateful_step_count=10, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate]
)
TestGlassProperty = GlassMachine.TestCase


def test_the_runs_sent_by_break_glass_and_by_approval() -> None:
    """The property's observer sees each kind of send, so it can fail: each opening the machine starts
    from is run once here, deterministically (the generated runs above may not draw all of them)."""
    for opening in ("glass", "approval", "widened"):
        machine = GlassMachine()
        machine.start(opening)
        machine.every_two_person_post_has_its_authority_and_the_notice_first()
    assert SEEN["glass"] and SEEN["approved"] and SEEN["widened"], SEEN
