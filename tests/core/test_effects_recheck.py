"""R3.9 then R3.10 through the router, against the sandbox over HTTP: a two-person decision requested
while the worker could still act is re-checked once the scheduler confirms the worker gone, and only then
sent, exactly once; the wait for "worker gone" is a bounded loop, one submission per confirmed-gone
observation, with a visible end.

The sandbox's clock is a manual clock whose sleeps run the scheduler's passes the test asks for, so the
bot's real wait loop (its poll interval and limit from the runbook) runs in simulated time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.app.router import Router
from bot.clock import ManualClock
from bot.messages import ListReporter, Mention, Message, Reply, pieces
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import load_settings
from tests.fixtures.composing import default_router

CHANNEL = "C1"
SID = "ses_recheck"
TURN = "turn_r2"


class PassClock(ManualClock):
    """Runs ``on_sleep(total_slept)`` after every sleep: the scheduler works while the bot waits."""

    def __init__(self) -> None:
        super().__init__()
        self.slept = 0.0
        self.on_sleep: Callable[[float], None] | None = None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.slept += seconds
        if self.on_sleep is not None:
            self.on_sleep(self.slept)


@pytest.fixture
def clock() -> PassClock:
    return PassClock()


@pytest.fixture
def sbx(clock: PassClock) -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios="builtin", clock=clock) as handle:
        yield handle


@pytest.fixture
def router(sbx: SandboxHandle, tmp_path: Path) -> Router:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db"})
    built = default_router(settings, sandbox=sbx)
    assert isinstance(built, Router)
    return built


def say(router: Router, line: str, actor: str, reporter: ListReporter | None = None) -> Reply:
    return router.handle_text(line, actor=actor, channel=CHANNEL, reporter=reporter or ListReporter())


def text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def posts(sbx: SandboxHandle, sid: str) -> list[dict[str, Any]]:
    return [r for r in sbx.admin.requests(sid) if r.get("method") == "POST"]


def body(post: dict[str, Any]) -> dict[str, Any]:
    raw = post["body"]
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def not_yet_gone(sbx: SandboxHandle, sid: str = SID) -> None:
    """R3.1/R3.9: an outcome_unknown turn; the worker ended but no scheduler pass has confirmed it."""
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 20,
                "resumable": False,
                "attention": {
                    "code": "OUTCOME_UNKNOWN",
                    "reason": "interrupt_unanswered",
                    "failures": None,
                    "retry_at": None,
                },
                "checkpoint": {"id": "ckpt_r1", "covers_turn_id": "turn_r1"},
                "execution": {"state": "running", "alive": False},
            },
            "turns": [
                {"id": "turn_r1", "status": "completed"},
                {
                    "id": TURN,
                    "status": "outcome_unknown",
                    "terminal_reason": "interrupt_unanswered",
                    "control_id": "ctl_r2",
                },
            ],
        }
    )


def request_abandon(router: Router, sid: str = SID, turn: str = TURN, actor: str = "alice") -> str:
    reply = say(
        router,
        f'/recover decide {sid} abandon --turn {turn} --effects "pushed nothing" --reason "engine hung"',
        actor,
    )
    assert reply.ok, text(reply)
    (asked,) = [m for m in reply.messages if m.kind == "approval_request"]
    assert asked.ref
    return asked.ref


def pass_after(sbx: SandboxHandle, clock: PassClock, seconds: float) -> list[dict[str, Any]]:
    """Run one scheduler pass once the bot has slept ``seconds`` in total."""
    done: list[dict[str, Any]] = []

    def hook(slept: float) -> None:
        if not done and slept >= seconds:
            done.append(sbx.admin.scheduler_pass())

    clock.on_sleep = hook
    return done


def recheck_messages(reporter: ListReporter, reply: Reply) -> list[Message]:
    seen = {id(m): m for m in [*reporter.posted, *reply.messages] if m.kind == "recheck_request"}
    return list(seen.values())


def test_the_recheck_is_asked_after_the_pass_and_the_decision_sent_exactly_once(sbx, router, clock) -> None:
    not_yet_gone(sbx)
    rid = request_abandon(router)
    passes = pass_after(sbx, clock, 30)
    thread = ListReporter()
    approved = say(router, f"/recover approve {rid}", "bob", thread)
    assert approved.ok, text(approved)
    assert passes and SID in passes[0]["confirmed_gone"]
    # R3.9: nothing sent before the pass (the runbook knows the 409), and nothing right after it
    # either: the effects account was written while the worker could still act (R3.10).
    assert posts(sbx, SID) == []
    (asked,) = recheck_messages(thread, approved)
    assert asked.ref == rid and asked.buttons[0].action == "confirm"
    assert f"/recover confirm {rid}" in asked.plain_text()
    assert {Mention("@", "alice"), Mention("@", "bob")} <= set(pieces(asked.marked_text()))  # live mentions in Slack

    # Someone else than the requester and the approver cannot answer it.
    outsider = say(router, f"/recover confirm {rid}", "carol")
    assert not outsider.ok and "requester" in text(outsider)
    assert posts(sbx, SID) == []

    sent = say(router, f"/recover confirm {rid}", "alice")
    assert sent.ok, text(sent)
    (post,) = posts(sbx, SID)
    assert post["status"] == 201 and body(post)["target_turn_id"] == TURN
    assert body(post)["expected_revision"] == sbx.admin.session(SID)["revision"] - 1  # fresh, after the pass
    # Exactly once: a second confirmation, and the button, send nothing more.
    again = say(router, f"/recover confirm {rid}", "alice")
    button = router.handle_action("confirm", rid, actor="bob", channel=CHANNEL, reporter=ListReporter())
    assert not again.ok and not button.ok
    assert len(posts(sbx, SID)) == 1 and sbx.admin.effect_count(SID) == 1


def test_the_approver_rechecks_with_the_button(sbx, router, clock) -> None:
    not_yet_gone(sbx)
    rid = request_abandon(router)
    pass_after(sbx, clock, 15)
    say(router, f"/recover approve {rid}", "bob")
    sent = router.handle_action("confirm", rid, actor="bob", channel=CHANNEL, reporter=ListReporter())
    assert sent.ok, text(sent)
    assert [p["status"] for p in posts(sbx, SID)] == [201]


def test_a_changed_effects_account_is_a_new_request_needing_a_new_approver(sbx, router, clock) -> None:
    not_yet_gone(sbx)
    rid = request_abandon(router)
    pass_after(sbx, clock, 15)
    say(router, f"/recover approve {rid}", "bob")
    edited = say(router, f'/recover confirm {rid} --effects "pushed branch fix-1 to origin"', "bob")
    assert edited.ok, text(edited)
    (new,) = [m for m in edited.messages if m.kind == "approval_request" and m.ref != rid]
    assert new.ref and new.ref != rid
    assert "pushed branch fix-1 to origin" in new.plain_text()
    assert posts(sbx, SID) == []
    old = say(router, f"/recover confirm {rid}", "alice")
    assert not old.ok and "void" in text(old)  # the old content can no longer be sent
    # Its editor (bob) cannot approve it; alice (the first requester) can.
    own = say(router, f"/recover approve {new.ref}", "bob")
    assert not own.ok and "own request" in text(own)
    approved = say(router, f"/recover approve {new.ref}", "alice")
    assert approved.ok, text(approved)
    # Made after the worker was confirmed gone: no second re-check, sent once.
    (post,) = posts(sbx, SID)
    assert post["status"] == 201 and sbx.admin.effect_count(SID) == 1


def test_an_unanswered_recheck_lapses_with_the_request(sbx, router, clock) -> None:
    not_yet_gone(sbx)
    rid = request_abandon(router)
    pass_after(sbx, clock, 15)
    say(router, f"/recover approve {rid}", "bob")
    sbx.clock.advance(31 * 60)  # past the request's 30-minute expiry (the runbook's approval_expiry)
    late = say(router, f"/recover confirm {rid}", "alice")
    assert not late.ok and "lapsed" in text(late)
    assert posts(sbx, SID) == [] and sbx.admin.effect_count(SID) == 0


def test_a_request_made_after_the_pass_is_sent_without_a_recheck(sbx, router, clock) -> None:
    # The same session once the worker is confirmed gone: the account is written afterwards (R3.10).
    not_yet_gone(sbx)
    sbx.admin.scheduler_pass()
    rid = request_abandon(router)
    sent = say(router, f"/recover approve {rid}", "bob")
    assert sent.ok, text(sent)
    assert [p["status"] for p in posts(sbx, SID)] == [201]
    assert not [m for m in sent.messages if m.kind == "recheck_request"]


def test_single_person_confirm_still_works_and_refuses_effects(sbx, router) -> None:
    sid = "ses_restore_damaged"  # builtin: restore stopped at the limit (R2.10)
    asked = say(  # permanent damage: the cause must be said fixed (R2.8)
        router, f'/recover decide {sid} retry_restore --cause-fixed "proxy replaced" --reason "proxy fixed"', "alice"
    )
    assert asked.ok, text(asked)
    (confirm,) = [m for m in asked.messages if m.kind == "confirmation_request"]
    assert confirm.ref
    with_effects = say(router, f'/recover confirm {confirm.ref} --effects "x"', "alice")
    assert not with_effects.ok and "--effects applies only to the effects re-check" in text(with_effects)
    other = say(router, f"/recover confirm {confirm.ref}", "bob")
    assert not other.ok
    done = say(router, f"/recover confirm {confirm.ref}", "alice")
    assert done.ok, text(done)
    assert [p["status"] for p in posts(sbx, sid)] == [201]


# -- R3.9: a second RECOVERY_REQUIRED after the pass neither loops nor recurses -------------------------


STRAY = "ses_unknown_stray"  # builtin: the first pass leaves a stray container of the session
STRAY_TURN = "turn_us3"


def test_a_second_recovery_required_waits_for_the_next_pass_then_sends_once(sbx, router, clock) -> None:
    rid = request_abandon(router, STRAY, STRAY_TURN)
    first = pass_after(sbx, clock, 15)
    say(router, f"/recover approve {rid}", "bob")
    assert first and STRAY in first[0]["confirmed_gone"]
    assert posts(sbx, STRAY) == []
    # The re-check is answered; the submission right after the first pass still gets 409 (the stray).
    # The bot records it and waits for the NEXT confirmation: the second pass runs 45 s later.
    second = pass_after(sbx, clock, clock.slept + 45)
    thread = ListReporter()
    reply = say(router, f"/recover confirm {rid}", "alice", thread)
    assert second, "the bot did not wait for the next pass"
    statuses = [p["status"] for p in posts(sbx, STRAY)]
    assert statuses == [409]  # one submission for the first observation, none while waiting
    # The next observation moved confirmed_gone_at after the re-check: the account is re-checked again.
    assert any(m.kind == "recheck_request" for m in [*thread.posted, *reply.messages])
    final = say(router, f"/recover confirm {rid}", "alice")
    assert final.ok, text(final)
    sent = posts(sbx, STRAY)
    assert [p["status"] for p in sent] == [409, 201]
    assert len({p["idempotency_key"] for p in sent}) == 2  # one key per logical request
    assert sbx.admin.effect_count(STRAY) == 1


def test_without_a_next_pass_the_wait_ends_visibly_after_one_submission(sbx, router, clock) -> None:
    rid = request_abandon(router, STRAY, STRAY_TURN)
    pass_after(sbx, clock, 15)
    say(router, f"/recover approve {rid}", "bob")
    clock.on_sleep = None  # no further scheduler pass: the stray stays
    before = clock.slept
    thread = ListReporter()
    reply = say(router, f"/recover confirm {rid}", "alice", thread)
    # Bounded: one POST (409) in the whole 10-minute wait, then a visible end; no recursion error.
    assert not reply.ok
    assert [p["status"] for p in posts(sbx, STRAY)] == [409]
    assert 600 - 1 <= clock.slept - before <= 600 + 1  # recovery_required_wait (runbook limit)
    said = text(reply)
    assert "was not submitted again" in said and f"1 submission(s) of request {rid} in all" in said
    assert sbx.admin.effect_count(STRAY) == 0
    assert router.services.decisions.requests.get(rid).state == "failed"


def test_a_wait_that_never_saw_the_worker_gone_says_nothing_was_submitted(sbx, router, clock) -> None:
    """Approved before any scheduler pass, and none comes: nothing was ever submitted, so the end says
    "was not submitted" — never "again"."""
    sid = "ses_unknown_unanswered"  # builtin: the worker is not confirmed gone
    rid = request_abandon(router, sid, "turn_uu5")
    clock.on_sleep = None
    reply = say(router, f"/recover approve {rid}", "bob")
    said = text(reply)
    assert not reply.ok
    assert "was not submitted: no new confirmation" in said and "not submitted again" not in said
    assert f"0 submission(s) of request {rid} in all" in said
    assert posts(sbx, sid) == []
