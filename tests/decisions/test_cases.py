"""Cases and hand-offs: the next shift can pick up every open case from the digest alone."""

from __future__ import annotations

from bot.messages import ListReporter, Mention, pieces, plain
from bot.store.binding import BOUND
from tests.decisions.test_execution import HookClock
from tests.fixtures.decisions import APPROVER, CHANNEL, OUTSIDER, REQUESTER


def test_take_note_history_and_cases_are_recorded(decision_env):
    env = decision_env
    env.outcome_unknown("ses_c1")
    svc = env.service()
    svc.decide(
        REQUESTER,
        CHANNEL,
        "ses_c1",
        "abandon",
        turn="turn_9",
        effects="none",
        reason="hung",
        reporter=ListReporter(),
    )
    assert env.store.get_open_case("ses_c1").owner == REQUESTER
    took = svc.take(APPROVER, "ses_c1")
    assert took.ok and f"(was @{REQUESTER})" in plain(took.messages[0].headline)
    assert env.store.get_open_case("ses_c1").owner == APPROVER
    assert svc.note(APPROVER, "ses_c1", "pinged the repo owner about the push").ok
    assert not svc.note(APPROVER, "ses_c1", "   ").ok
    steps = env.store.steps(session_id="ses_c1")
    assert [s.step for s in steps] == ["decision_requested", "take", "note"]
    history = svc.history("ses_c1", actor=OUTSIDER).messages[0]
    assert len(history.lines) == 3 and "take" in history.lines[1] and Mention("@", APPROVER) in pieces(history.lines[1])
    cases = svc.cases(actor=OUTSIDER).messages[0]
    assert cases.headline == "1 open case(s)" and "ses_c1" in cases.lines[0] and "note" in cases.lines[0]
    # The look-ups are on the record too, outside the session's case (reading does not change it).
    lookups = [(s.step, s.actor, s.inputs) for s in env.store.steps() if s.session_id is None and s.step != BOUND]
    assert lookups == [("history", OUTSIDER, {"session_id": "ses_c1"}), ("cases", OUTSIDER, {})]
    assert len(env.store.steps(session_id="ses_c1")) == 3


def test_handoff_digest_lists_everything_for_the_next_shift(make_decision_env):
    clock = HookClock()
    env = make_decision_env(clock)
    night = make_decision_env(clock)  # the next shift: its own objects on the same file
    digests: list = []
    # Case 1: a pending two-person approval, with a note.
    env.outcome_unknown("ses_h1")
    svc = env.service()
    rid = (
        svc.decide(
            REQUESTER,
            CHANNEL,
            "ses_h1",
            "abandon",
            turn="turn_9",
            effects="pushed tag v2",
            reason="engine hung",
            reporter=ListReporter(),
        )
        .messages[0]
        .ref
    )
    svc.note(REQUESTER, "ses_h1", "effects checked with the repo owner")
    clock.advance(600)
    # Case 2: decided; the verification's next step (CONTEXT_GAP → start_fresh or close).
    env.outcome_unknown("ses_h2", covered=False)
    rid2 = (
        svc.decide(
            REQUESTER,
            CHANNEL,
            "ses_h2",
            "abandon",
            turn="turn_9",
            effects="none",
            reason="hung",
            reporter=ListReporter(),
        )
        .messages[0]
        .ref
    )
    assert svc.approve(APPROVER, CHANNEL, rid2, ListReporter()).ok
    # Case 3: a wait in progress; the digest is taken while the bot waits for the scheduler.
    env.outcome_unknown("ses_h3", gone=False)

    def hook(n: int, seconds: float) -> None:
        if seconds >= 15 and not digests:
            digests.append(night.service().handoff(OUTSIDER))
            env.sandbox.admin.scheduler_pass()

    clock.hook = hook
    rid3 = (
        svc.decide(
            REQUESTER,
            CHANNEL,
            "ses_h3",
            "abandon",
            turn="turn_9",
            effects="none",
            reason="hung",
            reporter=ListReporter(),
        )
        .messages[0]
        .ref
    )
    assert svc.approve(OUTSIDER, CHANNEL, rid3, ListReporter()).ok
    digest = digests[0]
    by_session = {e.session_id: e for e in digest.entries}
    assert set(by_session) == {"ses_h1", "ses_h2", "ses_h3"}
    h1 = by_session["ses_h1"]
    assert h1.state == "waiting for approval/confirmation" and h1.group == "now"  # a second person must act
    assert [r.id for r in h1.requests] == [rid] and h1.owner == REQUESTER
    h2 = by_session["ses_h2"]
    assert "A turn ran after the last checkpoint (CONTEXT_GAP)" in h2.next_step and h2.group == "in_hand"
    h3 = by_session["ses_h3"]
    assert h3.state.startswith("waiting for the scheduler") and h3.group == "in_hand"  # the bot waits
    assert [r.id for r in h3.requests] == [rid3]
    # The audit head hash, as it was when the digest was posted (the hand-off step included).
    handoff_step = [s for s in env.store.steps() if s.step == "handoff"][0]
    assert digest.head == f"{handoff_step.seq}:{handoff_step.hash}"
    assert handoff_step.actor == OUTSIDER and handoff_step.session_id is None
