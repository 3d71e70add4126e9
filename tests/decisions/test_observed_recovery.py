"""Recovery is observed, never inferred from the answer (R5.1, R5.2, R4.1).

Through the console's router over HTTP against the sandbox, run with each host behaviour the seed
allows: a host that clears the attention in its answer to a decision, one that keeps it until the next
worker reports ready (the default), one whose workers never report ready. A case closes only on a
worker's ready report after the send, with the session's fields consistent with it; after a resume,
only when that worker restored the resumed checkpoint, or the case says it cannot be known.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.decisions._watch import FAILED_AGAIN, Watch, observe
from bot.sandbox import CLEAR_ATTENTION, KEEP_ATTENTION, NEVER_READY, READY_AT_ONCE, SandboxAdminError
from tests.fixtures.decisions import reply_text, say

SID = "ses_restore_transient"
RESUMABLE = "ses_stopped_resumable"


def _router(sandbox: Any, tmp_path: Path) -> Any:
    """The real router wired to ``sandbox`` over HTTP, as the ``console_router`` fixture builds it."""
    from bot.settings import Settings
    from tests.fixtures.composing import default_router

    return default_router(Settings(db_path=tmp_path / "console.db"), sandbox=sandbox, startup=False)


@pytest.fixture
def host(sandbox_factory: Callable[..., Any], tmp_path: Path) -> Callable[..., tuple[Any, Any]]:
    def make(**options: Any) -> tuple[Any, Any]:
        sandbox = sandbox_factory(scenarios="builtin", **options)
        return sandbox, _router(sandbox, tmp_path)

    return make


def _swept(router: Any, sid: str = SID) -> list[Any]:
    return [m for m in router.expire_due() if m.session_id == sid]


def _retry(router: Any) -> str:
    reply = say(router, f'decide {SID} retry_restore --reason "store answers again" --yes')
    assert reply.ok, reply_text(reply)
    return reply_text(reply)


@pytest.mark.parametrize("behaviour", [CLEAR_ATTENTION, KEEP_ATTENTION, NEVER_READY])
def test_a_case_closes_only_when_a_worker_reports_ready_whatever_the_answer_shows(host, clock, behaviour):
    sandbox, router = host(ready_behaviour=behaviour)
    store = router.services.store
    said = _retry(router)
    # The answer and the first re-read: running, admission open; with clear_attention no attention at all.
    session = sandbox.admin.session(SID)
    assert session["status"] == "running" and session["admission_state"] == "open"
    assert (session["attention"] is None) == (behaviour == CLEAR_ATTENTION)
    assert "The case stays open (verifying)" in said and "Case closed" not in said
    assert store.get_open_case(SID) is not None
    say(router, f"diagnose {SID}")  # a diagnosis judges the same way: no report, no close
    clock.advance(30)
    assert _swept(router) == []
    assert store.get_open_case(SID) is not None
    if behaviour == NEVER_READY:
        with pytest.raises(SandboxAdminError):
            sandbox.admin.worker_ready(SID)
        return
    sandbox.admin.worker_ready(SID)
    clock.advance(30)
    closed = _swept(router)
    assert len(closed) == 1 and "reported ready after the send" in closed[0].headline
    assert store.get_open_case(SID) is None
    step = [s for s in store.steps(session_id=SID) if s.step == "case_closed"][-1]
    assert step.inputs["evidence"]["events.ready_seq"] > step.inputs["evidence"]["events.after_seq"]


def test_a_host_whose_workers_never_report_ready_keeps_the_case_verifying_and_says_so(host, clock):
    sandbox, router = host(ready_behaviour=NEVER_READY)
    store = router.services.store
    _retry(router)
    everything: list[Any] = []
    for _ in range(130):  # an hour past the start-up window, a sweep every 30 s
        clock.advance(30)
        everything.extend(_swept(router))
    assert len(everything) == 1, [m.headline for m in everything]  # said once
    assert everything[0].headline.startswith(
        f"`{SID}` is not recovered yet after `retry_restore`: no worker has reported ready since the send"
    )
    assert "The case stays open (verifying)" in everything[0].plain_text()
    assert all("recover" not in m.headline.replace("not recovered", "") for m in everything)
    assert store.get_open_case(SID) is not None
    cases = reply_text(say(router, "cases"))
    assert "verifying after `retry_restore`" in cases and "no worker has reported ready" in cases
    diagnosis = reply_text(say(router, f"diagnose {SID}"))
    assert store.get_open_case(SID) is not None, diagnosis
    assert not any(s.step == "case_closed" for s in store.steps(session_id=SID))


def test_after_a_resume_the_case_closes_when_the_worker_restored_the_resumed_checkpoint(host, clock):
    sandbox, router = host()
    store = router.services.store
    reply = say(router, f"resume {RESUMABLE}")
    assert reply.ok, reply_text(reply)
    assert store.get_open_case(RESUMABLE) is not None
    sandbox.admin.start_turn(RESUMABLE, "turn_new")  # a new turn alone does not say the context came back
    clock.advance(30)
    assert _swept(router, RESUMABLE) == [] and store.get_open_case(RESUMABLE) is not None
    sandbox.admin.worker_ready(RESUMABLE)
    clock.advance(30)
    closed = _swept(router, RESUMABLE)
    assert len(closed) == 1, [m.headline for m in closed]
    assert "having restored checkpoint ckpt_sr_4, the one the resume continues from (R5.2)" in closed[0].headline
    evidence = [s for s in store.steps(session_id=RESUMABLE) if s.step == "case_closed"][-1].inputs["evidence"]
    assert evidence["events.ready_checkpoint_id"] == evidence["checkpoint.resumed_from"] == "ckpt_sr_4"


def test_after_a_resume_a_host_that_does_not_name_the_restored_checkpoint_leaves_the_case_open(host, clock):
    sandbox, router = host(ready_names_checkpoint=False)
    store = router.services.store
    assert say(router, f"resume {RESUMABLE}").ok
    sandbox.admin.worker_ready(RESUMABLE)
    clock.advance(30)
    said = _swept(router, RESUMABLE)
    assert len(said) == 1
    assert "its context cannot be confirmed from the control host" in said[0].headline
    assert "cannot be known from here (R5.2)" in said[0].plain_text()
    assert f"/recover done {RESUMABLE}" in said[0].plain_text()
    assert store.get_open_case(RESUMABLE) is not None
    assert "cannot be known from the control host" in reply_text(say(router, "cases"))
    clock.advance(60)
    assert _swept(router, RESUMABLE) == []  # said once; the case waits for a person
    # A diagnosis of the running session does not close it as "needs no operator" either (R5.2):
    # the case said a person checks the new turn, then `done`.
    diagnosis = reply_text(say(router, f"diagnose {RESUMABLE}"))
    assert store.get_open_case(RESUMABLE) is not None, diagnosis
    assert "Case of" not in diagnosis
    assert say(router, f"done {RESUMABLE}").ok and store.get_open_case(RESUMABLE) is None


def test_a_ready_report_without_the_resumed_checkpoint_is_not_recovery() -> None:
    """R5.2, the pure rule: a worker that restored another checkpoint (or none) did not pick it up."""
    watch = Watch.start(
        "resume",
        since="2026-01-01T00:00:00Z",
        every=30,
        window=3600,
        before={"events.last_seq": 4, "session.revision": 6, "checkpoint.id": "ckpt_a"},
        receipt_revision=7,
    )
    later = {
        "session.status": "running",
        "session.admission_state": "open",
        "session.revision": 8,
        "events.ready_seq": 6,
        "events.ready_generation": 2,
        "events.ready_names_checkpoint": True,
        "events.ready_checkpoint_id": None,
    }
    seen = observe(watch, later, datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    assert seen.state == FAILED_AGAIN and "restored no checkpoint, not ckpt_a (R5.2)" in seen.why


def _no_checkpoint_but_resumable(sandbox: Any, sid: str) -> None:
    sandbox.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "stopped",
                "admission_state": "open",
                "revision": 3,
                "resumable": True,
                "attention": None,
                "checkpoint": None,
                "execution": {"state": "gone", "alive": False},
            }
        }
    )


def test_resume_without_a_committed_checkpoint_is_refused_before_anything_is_sent(host):
    sandbox, router = host()
    sid = "ses_resumable_no_ckpt"
    _no_checkpoint_but_resumable(sandbox, sid)
    reply = say(router, f"resume {sid}")
    assert not reply.ok
    first = reply.messages[0]
    assert first.headline == (
        f"resume of `{sid}` will not be accepted: resume needs a committed checkpoint to continue from, "
        f"and session {sid} has none (R4.1)"
    )
    assert "Nothing was sent" in first.plain_text() and "start_fresh" in first.plain_text()
    assert [r for r in sandbox.admin.requests(sid) if r["method"] == "POST"] == []
    assert sandbox.admin.effects(sid) == []


def test_a_diagnosis_after_failing_again_closes_the_case_only_on_a_ready_report(host, clock):
    """R5.1: after "failing again" the watch has ended, but a diagnosis still judges by the one rule: the
    session relaunched after its backoff, running, is not recovery; its worker's ready report after the
    send is, and the case closes as recovery observed with that evidence recorded, not as "looks healthy"."""
    sandbox, router = host(ready_behaviour=CLEAR_ATTENTION)
    store = router.services.store
    _retry(router)
    sandbox.admin.fail_restore(SID, "checkpoint_unavailable")  # failures 1, in backoff
    clock.advance(30)
    assert "is failing again" in _swept(router)[0].headline
    clock.advance(31)
    sandbox.admin.scheduler_pass()  # the scheduler relaunches after the backoff
    shown = sandbox.admin.session(SID)
    assert shown["status"] == "running" and shown["admission_state"] == "open"
    say(router, f"diagnose {SID}")
    assert store.get_open_case(SID) is not None
    sandbox.admin.worker_ready(SID)
    said = reply_text(say(router, f"diagnose {SID}"))
    assert store.get_open_case(SID) is None, said
    assert "recovery observed after `retry_restore`" in said and "reported ready after the send" in said
    closing = [s for s in store.steps(session_id=SID) if s.step == "case_closed"][-1]
    assert closing.inputs["evidence"]["events.ready_seq"] > closing.inputs["evidence"]["events.after_seq"]


def test_a_worker_ready_before_the_first_re_read_closes_the_case_at_once(host, clock):
    """R5.1, a fast host (ready_at_once): the worker reported ready after the send and before the bot's
    first re-read; judged against the read made before the send, it is the evidence, and the case
    closes with the verification."""
    sandbox, router = host(ready_behaviour=READY_AT_ONCE)
    said = _retry(router)
    assert "Case closed: recovery observed" in said and "reported ready after the send" in said, said
    assert router.services.store.get_open_case(SID) is None
