"""Cases follow the session, not the receipt (R5.1, R5.2), through the router over HTTP against the sandbox.

After an accepted retry_restore the case stays open as *verifying*; the periodic sweep re-reads the
session and closes the case only on an observed recovery, or says in the same case that the session
is failing again.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.decisions import reply_text, say

SID = "ses_restore_transient"


@pytest.fixture
def router(console_router: Any) -> Any:
    return console_router


def _retry(router: Any) -> Any:
    reply = say(router, f'decide {SID} retry_restore --reason "store answers again" --yes')
    assert reply.ok, reply_text(reply)
    return reply


def test_a_case_stays_open_after_an_accepted_retry_restore_and_reopens_when_the_session_fails_again(
    router, sandbox, clock
):
    store = router.services.store
    reply = _retry(router)
    text = reply_text(reply)
    assert "Acceptance is not the same as the worker being gone" in text
    assert "The case stays open (verifying)" in text and "Case closed" not in text
    case = store.get_open_case(SID)
    assert case is not None
    assert f"`{SID}`" in reply_text(say(router, "cases")) and "verifying after `retry_restore`" in reply_text(
        say(router, "cases")
    )
    assert "verifying after `retry_restore`" in reply_text(say(router, "handoff"))
    assert f"`{SID}` verifying after `retry_restore`" in reply_text(say(router, "pending"))
    # A diagnosis of the running session does not close it either: it only looks healthy.
    say(router, f"diagnose {SID}")
    assert store.get_open_case(SID) is not None

    # The restarted worker fails its restore again: the sweep says so in the same case.
    sandbox.admin.fail_restore(SID, "checkpoint_unavailable")
    clock.advance(30)
    said = router.expire_due()
    failing = [m for m in said if m.session_id == SID]
    assert len(failing) == 1, [m.headline for m in said]
    assert "is failing again after `retry_restore`" in failing[0].headline
    assert "RESTORE_FAILED again (checkpoint_unavailable), failures 1" in failing[0].headline
    assert "Do not repeat the decision" in failing[0].plain_text()
    again = store.get_open_case(SID)
    assert again is not None and again.id == case.id  # the same case, the same thread
    assert "failing again after `retry_restore`" in reply_text(say(router, "cases"))
    assert "failing again after `retry_restore`" in reply_text(say(router, "handoff"))
    assert "failing again after `retry_restore`" in reply_text(say(router, "pending"))
    clock.advance(60)
    assert [m for m in router.expire_due() if m.session_id == SID] == []  # said once, not every sweep


def test_the_case_closes_when_the_next_worker_reports_ready(router, sandbox, clock):
    store = router.services.store
    _retry(router)
    clock.advance(30)
    assert [m for m in router.expire_due() if m.session_id == SID] == []  # still starting
    assert store.get_open_case(SID) is not None
    sandbox.admin.worker_ready(SID)
    clock.advance(30)
    closed = [m for m in router.expire_due() if m.session_id == SID]
    assert len(closed) == 1, [m.headline for m in closed]
    assert closed[0].headline.startswith(
        f"Case of `{SID}` closed: recovery observed after `retry_restore` — the next worker (generation 2) "
        "reported ready after the send (event "
    )
    assert store.get_open_case(SID) is None
    closing = [s for s in store.steps(session_id=SID) if s.step == "case_closed"]
    assert "recovery observed" in closing[-1].inputs["reason"]
    # R5.1: the closing step records the evidence it used: the ready report after the send, and the
    # session's revision past the answer's.
    evidence = closing[-1].inputs["evidence"]
    assert evidence["events.ready_seq"] > evidence["events.after_seq"]
    assert evidence["session.revision"] > evidence["receipt.revision"]
    assert evidence["session.admission_state"] == "open"


def test_running_past_the_startup_window_is_not_recovery(router, sandbox, clock):
    """Time passing is not evidence: the case stays open, verifying, says so once, and still closes
    when the worker reports ready."""
    store = router.services.store
    _retry(router)
    clock.advance(1800)
    assert [m for m in router.expire_due() if m.session_id == SID] == []
    clock.advance(1801)
    said = [m for m in router.expire_due() if m.session_id == SID]
    assert len(said) == 1 and "recovery observed" not in said[0].headline
    assert said[0].headline.startswith(
        f"`{SID}` is not recovered yet after `retry_restore`: no worker has reported ready"
    )
    assert store.get_open_case(SID) is not None
    assert "no worker has reported ready within the start-up window" in reply_text(say(router, "cases"))
    clock.advance(60)
    assert [m for m in router.expire_due() if m.session_id == SID] == []  # said once
    sandbox.admin.worker_ready(SID)
    clock.advance(30)
    closed = [m for m in router.expire_due() if m.session_id == SID]
    assert len(closed) == 1 and "recovery observed" in closed[0].headline
    assert store.get_open_case(SID) is None


def test_the_sweep_rereads_at_the_runbooks_interval(router, sandbox, clock):
    _retry(router)
    before = len([r for r in sandbox.admin.requests(SID) if r["method"] == "GET"])
    router.expire_due()
    first = len([r for r in sandbox.admin.requests(SID) if r["method"] == "GET"])
    assert first > before
    clock.advance(10)
    router.expire_due()  # inside verify_every (30 s): no re-read
    assert len([r for r in sandbox.admin.requests(SID) if r["method"] == "GET"]) == first
