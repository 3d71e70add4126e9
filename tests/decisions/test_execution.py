"""Execution paths against the sandbox: 409 advice, the RECOVERY_REQUIRED wait, resume through 503s,
verification's next step, single-person confirmation, the repeated-decision flag and the dry run."""

from __future__ import annotations

import json
from collections.abc import Callable

from bot.clock import ManualClock
from bot.messages import ListReporter
from tests.fixtures.decisions import APPROVER, CHANNEL, OUTSIDER, REQUESTER


class HookClock(ManualClock):
    """A manual clock that runs ``hook(n, seconds)`` on every sleep: the world moves while the bot waits."""

    def __init__(self, hook: Callable[[int, float], None] | None = None) -> None:
        super().__init__()
        self.sleeps: list[float] = []
        self.hook = hook

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.sleeps.append(seconds)
        if self.hook is not None:
            self.hook(len(self.sleeps), seconds)


def _text(reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def test_recovery_required_then_scheduler_pass_asks_the_recheck_then_submits_exactly_once(make_decision_env):
    passes: list[dict] = []
    clock = HookClock()
    env = make_decision_env(clock)
    # R3.9: the worker ended but the scheduler has not confirmed it gone yet.
    env.outcome_unknown("ses_rr1", gone=False, covered=True, revision=11)

    def hook(n: int, seconds: float) -> None:
        if seconds >= 15 and not passes and sum(s for s in clock.sleeps if s >= 15) >= 45:
            passes.append(env.sandbox.admin.scheduler_pass())

    clock.hook = hook
    svc = env.service()
    reporter = ListReporter()
    req = svc.decide(
        REQUESTER,
        CHANNEL,
        "ses_rr1",
        "abandon",
        turn="turn_9",
        effects="none",
        reason="hung",
        reporter=reporter,
    )
    assert req.ok and "not been confirmed gone" in _text(req)
    rid = req.messages[0].ref
    reply = svc.approve(APPROVER, CHANNEL, rid, reporter)
    assert reply.ok, _text(reply)
    assert passes and passes[0]["confirmed_gone"] == ["ses_rr1"]
    # The runbook knew the answer (409 RECOVERY_REQUIRED): nothing was sent while waiting, and once the
    # worker is gone the effects account (written while it could still act) is re-checked first (R3.10).
    assert env.posts("ses_rr1") == []
    assert svc.requests.get(rid).state == "recheck"
    asked = [m for m in reporter.posted if m.kind == "recheck_request"]
    assert len(asked) == 1 and asked[0].buttons[0].action == "confirm"
    # The poll used the runbook's 15 s interval, through the injected clock.
    assert [s for s in clock.sleeps if s >= 1] == [15.0, 15.0, 15.0]
    sent = svc.confirm(REQUESTER, CHANNEL, rid, reporter)
    assert sent.ok, _text(sent)
    posts = env.posts("ses_rr1")
    assert [p["status"] for p in posts] == [201]
    body = json.loads(posts[0]["body"]) if isinstance(posts[0]["body"], str) else posts[0]["body"]
    assert body["expected_revision"] == 12  # fresh, read after the scheduler's pass
    assert len(env.effects("ses_rr1")) == 1
    said = [m.headline for m in reporter.posted]
    assert any("waits for the scheduler" in h for h in said)
    assert any("confirmed the worker" in h for h in said)
    assert svc.requests.get(rid).state == "executed"


def test_recovery_required_gives_up_after_the_runbook_bound(make_decision_env):
    clock = HookClock()
    env = make_decision_env(clock)
    env.outcome_unknown("ses_rr2", gone=False)
    svc = env.service()
    reporter = ListReporter()
    rid = (
        svc.decide(
            REQUESTER,
            CHANNEL,
            "ses_rr2",
            "abandon",
            turn="turn_9",
            effects="none",
            reason="hung",
            reporter=reporter,
        )
        .messages[0]
        .ref
    )
    reply = svc.approve(APPROVER, CHANNEL, rid, reporter)
    assert not reply.ok
    assert "no new confirmation that the worker is gone" in _text(reply)
    assert sum(clock.sleeps) <= 600 + 1 and sum(clock.sleeps) >= 600 - 1  # recovery_required_wait: 10m
    assert env.posts("ses_rr2") == []  # R3.9: never sent while the runbook says RECOVERY_REQUIRED
    assert env.effects("ses_rr2") == []
    assert svc.requests.get(rid).state == "failed"


def test_request_stale_from_the_api_gives_the_runbooks_advice(decision_env):
    env = decision_env
    env.restore_failed("ses_st1", reason="restore_unavailable")
    # The worker is draining: a scheduler pass will bump the revision without touching decisive facts.
    env.sandbox.admin.create_session(
        {
            "session": {
                "id": "ses_st2",
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 4,
                "attention": {
                    "code": "RESTORE_FAILED",
                    "reason": "restore_unavailable",
                    "failures": 3,
                    "retry_at": None,
                },
                "execution": {"state": "draining", "alive": False},
            }
        }
    )
    real_gather = env.diagnoser.gather
    calls: list[str] = []

    def racing_gather(session_id):  # execution's fresh read, then the host moves on before the POST
        diagnosis = real_gather(session_id)
        calls.append(session_id)
        if len(calls) == 2:  # 1: decide's check, 2: the check that reads expected_revision
            env.sandbox.admin.scheduler_pass()
        return diagnosis

    env.diagnoser.gather = racing_gather
    svc = env.service()
    reply = svc.decide(
        REQUESTER,
        CHANNEL,
        "ses_st2",
        "retry_restore",
        reason="proxy fixed",
        yes=True,
        reporter=ListReporter(),
    )
    assert not reply.ok
    text = _text(reply)
    assert "409 REQUEST_STALE" in text
    assert "Re-run diagnose; a later attempt is a new request with a fresh expected_revision" in text
    assert "It is accepted when:" in text and "restore_failed (REQUEST_STALE)" in text
    assert "revision moved" in text
    assert env.effects("ses_st2") == []


def test_checkpoint_unavailable_is_refused_with_the_advice_to_abandon(decision_env):
    env = decision_env
    env.outcome_unknown("ses_cu1", covered=False, reason="interrupt_checkpoint_unavailable")
    svc = env.service()
    reply = svc.decide(
        REQUESTER,
        CHANNEL,
        "ses_cu1",
        "confirm_completed",
        turn="turn_9",
        evidence="s3://proof",
        effects="wrote a file",
        reason="it finished",
        reporter=ListReporter(),
    )
    assert not reply.ok
    text = _text(reply)
    assert "CHECKPOINT_UNAVAILABLE" in text and "no committed checkpoint covers turn turn_9" in text
    assert "abandon or close instead" in text
    assert env.posts("ses_cu1") == []


def test_dryrun_shows_the_exact_request_and_sends_nothing(decision_env):
    env = decision_env
    env.outcome_unknown("ses_dr1", covered=True, revision=21)
    svc = env.service()
    reply = svc.dryrun_decide(
        REQUESTER,
        CHANNEL,
        "ses_dr1",
        "confirm_completed",
        turn="turn_9",
        evidence="s3://proof",
        effects="none",
        reason="done",
        reporter=ListReporter(),
    )
    text = _text(reply)
    assert "POST /v1/sessions/ses_dr1/recovery-decisions" in text
    assert "Idempotency-Key: ***" in text and "Authorization: Bearer ***" in text
    assert env.sandbox.api_key not in text
    body = json.loads(text[text.index("{") : text.index("}") + 1])
    assert body == {
        "decision": "confirm_completed",
        "expected_revision": 21,
        "reason": "done",
        "target_turn_id": "turn_9",
        "evidence_ref": "s3://proof",
    }
    assert "Expected back: 200" in text and "revision 22" in text
    assert "second person" in text
    assert env.posts("ses_dr1") == []
    assert env.service().requests.find() == []


def test_confirmation_of_single_person_decisions(decision_env):
    env = decision_env
    env.restore_failed("ses_sf1", reason="incompatible_checkpoint", failures=1)
    svc = env.service()
    reply = svc.decide(REQUESTER, CHANNEL, "ses_sf1", "start_fresh", reason="context may go", reporter=ListReporter())
    msg = reply.messages[0]
    assert msg.kind == "confirmation_request"
    # R2.11, R5.3: the confirmation names what is dropped.
    assert "This drops: the checkpoint's context (checkpoint ckpt_7)" in msg.plain_text()
    assert [(b.action, b.value) for b in msg.buttons] == [("confirm", msg.ref)]
    # Something beyond the standard question is shown: only the button or /recover confirm sends it.
    assert msg.buttons[0].command == f"/recover confirm {msg.ref}"
    assert env.posts("ses_sf1") == []
    assert not svc.confirm(OUTSIDER, CHANNEL, msg.ref, ListReporter()).ok
    assert not svc.approve(APPROVER, CHANNEL, msg.ref, ListReporter()).ok
    done = svc.confirm(REQUESTER, CHANNEL, msg.ref, ListReporter())
    assert done.ok, _text(done)
    assert [e["decision"] for e in env.effects("ses_sf1")] == ["start_fresh"]
    # R5.1: acceptance is not recovery: the case stays open, verifying, until the new worker is ready.
    assert "The case stays open (verifying)" in _text(done)
    assert env.store.get_open_case("ses_sf1") is not None
    assert svc.expire_due() == []  # the sweep re-reads it: still starting, nothing to say
    assert env.store.get_open_case("ses_sf1") is not None
    env.sandbox.admin.worker_ready("ses_sf1")
    env.clock.advance(30)
    closed = svc.expire_due()
    assert len(closed) == 1 and closed[0].headline.startswith(
        "Case of `ses_sf1` closed: recovery observed after `start_fresh` — the next worker (generation 2) "
        "reported ready after the send"
    )
    assert env.store.get_open_case("ses_sf1") is None


def test_verification_after_abandon_without_checkpoint_says_context_gap(decision_env):
    env = decision_env
    env.outcome_unknown("ses_cg1", covered=False)
    svc = env.service()
    rid = (
        svc.decide(
            REQUESTER,
            CHANNEL,
            "ses_cg1",
            "abandon",
            turn="turn_9",
            effects="none",
            reason="hung",
            reporter=ListReporter(),
        )
        .messages[0]
        .ref
    )
    reply = svc.approve(APPROVER, CHANNEL, rid, ListReporter())
    assert reply.ok
    verify = reply.messages[-1]
    facts = dict(verify.facts)
    assert facts["session.resumable"] == "false" and facts["attention.code"] == "CONTEXT_GAP"
    assert "CONTEXT_GAP" in verify.plain_text() and "start_fresh, or close" in verify.plain_text()
    assert env.store.get_open_case("ses_cg1") is not None  # still needs an operator


def test_close_is_verified_and_closes_the_case(decision_env):
    env = decision_env
    env.restore_failed("ses_cl1")
    svc = env.service()
    rid = (
        svc.decide(REQUESTER, CHANNEL, "ses_cl1", "close", reason="done with it", reporter=ListReporter())
        .messages[0]
        .ref
    )
    reply = svc.approve(APPROVER, CHANNEL, rid, ListReporter())
    assert reply.ok
    assert "The session is closed." in reply.messages[-1].plain_text()
    assert env.store.get_open_case("ses_cl1") is None


def test_resume_rides_through_503_with_backoff_and_one_key(make_decision_env):
    clock = HookClock()
    env = make_decision_env(clock)
    env.stopped_resumable("ses_rs1", claim=True)

    def hook(n: int, seconds: float) -> None:
        if sum(s for s in clock.sleeps if s >= 1) >= 15:  # 1 + 2 + 4 + 8
            env.sandbox.admin.reclamation("ses_rs1", False)

    clock.hook = hook
    svc = env.service()
    reporter = ListReporter()
    reply = svc.resume(REQUESTER, CHANNEL, "ses_rs1", reporter)
    assert reply.ok, _text(reply)
    assert [s for s in clock.sleeps if s >= 1] == [1.0, 2.0, 4.0, 8.0]
    posts = env.posts("ses_rs1")
    assert posts[-1]["status"] in (200, 201) and {p["status"] for p in posts[:-1]} == {503}
    assert len({p["idempotency_key"] for p in posts}) == 1
    assert len(env.effects("ses_rs1")) == 1
    assert any("waiting for reclamation" in m.headline and "R4.2" in m.rules for m in reporter.posted)
    assert "picked up the checkpoint's context (R5.2)" in _text(reply)
    # R5.2: running again is not yet recovery: the case is verified until the resumed worker shows
    # it restored the checkpoint the resume continues from.
    assert env.store.get_open_case("ses_rs1") is not None
    clock.advance(30)
    assert svc.expire_due() == [] and env.store.get_open_case("ses_rs1") is not None
    env.sandbox.admin.worker_ready("ses_rs1")
    clock.advance(30)
    closed = svc.expire_due()
    assert len(closed) == 1 and "the one the resume continues from (R5.2)" in closed[0].headline
    assert env.store.get_open_case("ses_rs1") is None


def test_resume_gives_up_after_the_runbook_bound(make_decision_env):
    clock = HookClock()
    env = make_decision_env(clock)
    env.stopped_resumable("ses_rs2", claim=True)
    svc = env.service()
    reply = svc.resume(REQUESTER, CHANNEL, "ses_rs2", ListReporter())
    assert not reply.ok and "gave up" in reply.messages[-1].headline
    waits = [s for s in clock.sleeps if s >= 1]
    assert waits[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0] and max(waits) == 30.0
    assert 599 <= sum(waits) <= 601
    assert env.effects("ses_rs2") == []
    # Ended deliberately: a restart does not resume it behind the operator's back.
    assert env.store.unfinished_requests() == []


def test_repeated_decision_is_flagged_before_the_send_and_yes_does_not_send_it(make_decision_env):
    """R5.4: the repeat check runs before the send; without --cause-fixed it needs an explicit confirmation."""
    env = make_decision_env()
    env.restore_failed("ses_rp1", reason="restore_unavailable")
    svc = env.service()
    first = svc.decide(
        REQUESTER, CHANNEL, "ses_rp1", "retry_restore", reason="try again", yes=True, reporter=ListReporter()
    )
    assert first.ok, _text(first)
    admin = env.sandbox.admin
    for _ in range(3):  # the cause was not fixed: three more restore failures stop it again (R2.1)
        admin.fail_restore("ses_rp1", "restore_unavailable")
        admin.advance(61)
        admin.scheduler_pass()
    sent = len(env.posts("ses_rp1"))
    again = svc.decide(
        REQUESTER, CHANNEL, "ses_rp1", "retry_restore", reason="try again", yes=True, reporter=ListReporter()
    )
    assert again.ok, _text(again)
    msg = again.messages[0]
    text = msg.plain_text()
    assert msg.kind == "confirmation_request"
    assert "already executed 1 time(s)" in text and "R5.4" in text
    assert "`--yes` did not send it" in text
    assert len(env.posts("ses_rp1")) == sent  # nothing sent before the warning was seen
    # The explicit confirmation, after the warning was shown, sends it once.
    done = svc.confirm(REQUESTER, CHANNEL, msg.ref, ListReporter())
    assert done.ok, _text(done)
    assert len(env.posts("ses_rp1")) == sent + 1


def test_a_repeat_with_cause_fixed_needs_no_second_confirmation(make_decision_env):
    env = make_decision_env()
    env.restore_failed("ses_rp2", reason="restore_unavailable")
    svc = env.service()
    assert svc.decide(REQUESTER, CHANNEL, "ses_rp2", "retry_restore", reason="r", yes=True, reporter=ListReporter()).ok
    admin = env.sandbox.admin
    for _ in range(3):
        admin.fail_restore("ses_rp2", "restore_unavailable")
        admin.advance(61)
        admin.scheduler_pass()
    again = svc.decide(
        REQUESTER,
        CHANNEL,
        "ses_rp2",
        "retry_restore",
        reason="r",
        yes=True,
        reporter=ListReporter(),
        cause_fixed="object-store endpoint corrected",
    )
    assert again.ok, _text(again)
    assert [e["decision"] for e in env.effects("ses_rp2")] == ["retry_restore", "retry_restore"]
