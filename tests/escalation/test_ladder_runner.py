"""The ladder on a simulated clock over the real core and a real SQLite file: each step once, in its
request's thread, as a chain step; never after a decision; the expiry announced."""

from __future__ import annotations

from typing import Any

import pytest

from bot.clock import ManualClock
from bot.escalation.runner import LadderRunner
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER, DecisionEnv, StaticDirectory
from tests.fixtures.escalation import BACKUP, TIER2, RecordingPoster

TIER2_MEMBER = "U0TIER2A"


@pytest.fixture
def env(decision_sandbox: Any, db_path: Any, short_runbooks: Any) -> Any:
    e = DecisionEnv(decision_sandbox, db_path, ManualClock(), short_runbooks)
    yield e
    e.close()


def _close(env: DecisionEnv, svc: Any, sid: str = "ses_l1") -> str:
    env.outcome_unknown(sid)
    reply = svc.decide(
        REQUESTER, CHANNEL, sid, "abandon", turn="turn_9", effects="none outside", reason="hung", reporter=env.reporter
    )
    msg = reply.messages[0]
    assert msg.kind == "approval_request", msg.plain_text()
    assert msg.ref is not None
    return msg.ref


def _svc(env: DecisionEnv) -> Any:
    return env.service(approvers=(APPROVER,), directory=StaticDirectory({TIER2: {TIER2_MEMBER}}))


def _ladder_steps(env: DecisionEnv, rid: str) -> list[tuple[str, int]]:
    return [
        (s.step, s.inputs.get("step"))
        for s in env.store.steps()
        if s.step.startswith("escalation_") and s.inputs.get("request_id") == rid
    ]


def test_the_two_person_expiry_is_the_ladders(env: DecisionEnv) -> None:
    svc = _svc(env)
    rid = _close(env, svc)
    req = svc.requests.get(rid)
    from bot.clock import parse_time

    assert (parse_time(req.expires_at) - parse_time(req.created_at)).total_seconds() == 10  # escalation: expiry


def test_remind_mention_widen_then_the_announced_expiry_each_once(env: DecisionEnv) -> None:
    svc = _svc(env)
    poster = RecordingPoster()
    runner = LadderRunner(svc.ctx, poster)
    rid = _close(env, svc)
    runner.run_due()
    assert poster.posts == []  # nothing due yet
    env.clock.advance(2)
    runner.run_due()
    runner.run_due()  # a second pass posts nothing twice
    assert len(poster.posts) == 1
    remind = poster.posts[0][1]
    assert remind.mentions == [] and "Reminder" in remind.headline and poster.posts[0][2] == "thread-ses_l1"
    env.clock.advance(2)
    runner.run_due()
    assert poster.posts[1][1].mentions == [APPROVER]  # named one by one
    env.clock.advance(2)
    runner.run_due()
    assert poster.posts[2][1].mentions == [TIER2, BACKUP]  # who became eligible
    env.clock.advance(4)
    runner.run_due()
    assert svc.requests.get(rid).state == "expired"
    assert "Expired" in poster.posts[3][1].headline
    runner.run_due()
    assert len(poster.posts) == 4
    assert _ladder_steps(env, rid) == [
        ("escalation_reminded", 0),
        ("escalation_mentioned", 1),
        ("escalation_widened", 2),
        ("escalation_expired", -1),
    ]


def test_no_step_after_an_approval_and_the_rest_are_cancelled(env: DecisionEnv) -> None:
    svc = _svc(env)
    poster = RecordingPoster()
    runner = LadderRunner(svc.ctx, poster)
    rid = _close(env, svc)
    env.clock.advance(2)
    runner.run_due()
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)
    assert svc.requests.get(rid).state != "requested", reply.messages[-1].plain_text()
    for _ in range(6):
        env.clock.advance(2)
        runner.run_due()
    assert [m.headline.split(":")[0] for _c, m, _t in poster.posts] == ["Reminder"]
    assert set(runner.rows.states(rid).values()) == {"posted", "cancelled"}


def test_a_widened_group_member_approves_only_after_the_widen_step(env: DecisionEnv) -> None:
    svc = _svc(env)
    runner = LadderRunner(svc.ctx, RecordingPoster())
    rid = _close(env, svc)
    env.clock.advance(4)
    runner.run_due()
    early = svc.approve(TIER2_MEMBER, CHANNEL, rid, env.reporter)
    assert not early.ok and "not an allowed approver" in early.messages[-1].plain_text()
    env.clock.advance(2)
    runner.run_due()
    reply = svc.approve(TIER2_MEMBER, CHANNEL, rid, env.reporter)
    assert reply.ok, reply.messages[-1].plain_text()
    approved = [s for s in env.store.steps() if s.step == "decision_approved"]
    assert approved[0].inputs["allowed_by"] == {"kind": "widened", "id": TIER2, "member": TIER2_MEMBER}
    assert svc.requests.get(rid).state == "executed"  # sent through the gate


def test_widening_never_makes_the_requester_eligible(
    env: DecisionEnv, decision_sandbox: Any, db_path: Any, tmp_path: Any
) -> None:
    from bot.runbook import load_runbooks
    from tests.fixtures.escalation import short_ladder_folder

    block = (
        "escalation:\n  steps:\n    - {kind: widen, after: {duration: 1s, help: w}, groups: [S0TIER2, "
        + REQUESTER
        + "]}\n  expiry: {duration: 10s, help: e}\n"
    )
    env.runbooks = load_runbooks(short_ladder_folder(tmp_path / "r", block))
    svc = env.service(approvers=(APPROVER,), directory=StaticDirectory({TIER2: {REQUESTER}}))
    runner = LadderRunner(svc.ctx, RecordingPoster())
    rid = _close(env, svc)
    env.clock.advance(2)
    runner.run_due()
    reply = svc.approve(REQUESTER, CHANNEL, rid, env.reporter)
    assert not reply.ok and "cannot approve your own request" in reply.messages[-1].plain_text()
    assert svc.requests.get(rid).state == "requested"


def test_the_live_line_is_edited_at_most_once_per_interval_and_a_429_delays_only_it(env: DecisionEnv) -> None:
    svc = _svc(env)
    poster = RecordingPoster()
    runner = LadderRunner(svc.ctx, poster)
    rid = _close(env, svc)
    runner.run_due()
    runner.run_due()
    assert len(poster.edits) == 1  # live_update: 2s
    line = poster.edits[0][1].lines[0]
    assert line.startswith("Live: expires in 10s") and f"may approve now: {APPROVER}" in line and "remind in 2s" in line
    assert f"/recover approve {rid}" in poster.edits[0][1].lines  # the message as first shown, kept whole
    env.clock.advance(2)
    poster.refuse_edits_for = 30.0  # Slack answers 429 with Retry-After: 30
    runner.run_due()
    poster.refuse_edits_for = None
    for _ in range(3):
        env.clock.advance(2)
        runner.run_due()
    assert len(poster.edits) == 1  # the next edit waits out the Retry-After
    assert len(poster.posts) == 3  # the ladder's steps were not slowed
    reply = svc.approve(APPROVER, CHANNEL, rid, env.reporter)  # nor the decision
    assert reply.ok and svc.requests.get(rid).state == "executed"


def test_due_steps_survive_a_restart(env: DecisionEnv) -> None:
    svc = _svc(env)
    rid = _close(env, svc)
    first = RecordingPoster()
    env.clock.advance(2)
    LadderRunner(svc.ctx, first).run_due()
    env.restart()  # a new process on the same file: the rows, the chain and the clock's time are all it has
    svc = _svc(env)
    again = RecordingPoster()
    runner = LadderRunner(svc.ctx, again)
    runner.run_due()
    assert again.posts == []  # the reminder was said before the restart: not again
    env.clock.advance(4)
    runner.run_due()
    heads = [m.headline for _c, m, _t in again.posts]
    assert len(heads) == 2 and heads[0].startswith("Approval still needed") and heads[1].startswith("Now also eligible")
    assert _ladder_steps(env, rid) == [
        ("escalation_reminded", 0),
        ("escalation_mentioned", 1),
        ("escalation_widened", 2),
    ]


class _NoThreadYet(RecordingPoster):
    """A front that has no thread of the request (yet): the ladder has nowhere to say its steps."""

    def __init__(self) -> None:
        super().__init__()
        self.has_thread = False

    def thread_of(self, request: Any) -> tuple[str, str | None] | None:
        return super().thread_of(request) if self.has_thread else None


def test_a_step_with_no_thread_is_not_marked_posted_and_is_said_once_the_thread_exists(env: DecisionEnv) -> None:
    from bot.escalation.ladder import ladder_ended, next_step

    svc = _svc(env)
    poster = _NoThreadYet()
    runner = LadderRunner(svc.ctx, poster)
    rid = _close(env, svc)
    env.clock.advance(7)  # every step's time, and the ladder's end, have come
    first = runner.run_due()
    assert sorted(first.unsaid) == [(rid, 0), (rid, 1), (rid, 2)] and first.posted == []
    assert runner.rows.states(rid) == {-1: "due", 0: "unsaid", 1: "unsaid", 2: "unsaid"}
    assert _ladder_steps(env, rid) == []  # not claimed: no chain step per retry
    req = svc.requests.get(rid)
    assert not ladder_ended(svc.ctx, req, env.clock.now()) and next_step(svc.ctx, req) is not None
    assert len(runner.run_due().unsaid) == 3  # tried again every pass

    poster.has_thread = True
    runner.run_due()
    assert [p[2] for p in poster.posts] == ["thread-ses_l1"] * 3
    assert runner.rows.states(rid) == {-1: "due", 0: "posted", 1: "posted", 2: "posted"}
    assert ladder_ended(svc.ctx, svc.requests.get(rid), env.clock.now())
