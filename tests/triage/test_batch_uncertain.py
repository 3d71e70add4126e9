"""A batch member whose send got no definite answer is finished after the run by the decisions' own
finishing of uncertain sends (R0.3): re-sent with its stored key until an answer is recorded, then
verified like every member (R5.1), the batch's one message edited in place and its final message
said once every member settles.

Real parts: the sandbox control host over HTTP with its injected faults (effects counted there), real
SQLite files, the router (the sweep is the router's own ``expire_due``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bot.batch.finishing import MemberSend
from bot.decisions._sendlease import send_job
from bot.errors import ControlHostError
from bot.messages import ListReporter, Message
from bot.sandbox import SandboxHandle
from bot.store.leases import LeaseLost
from tests.fixtures.triage import bulk_router, make_incident

CLIENT_ATTEMPTS = 4  # the client's own retries of one send (bot/controlhost/_retry.py)


def _said(messages: list[Message]) -> str:
    return "\n".join(m.plain_text() for m in messages)


@pytest.mark.parametrize("host", ["answer_dropped", "hangs"])
def test_an_uncertain_member_is_re_sent_with_its_key_until_answered_then_verified_and_told_as_one(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path, host: str
) -> None:
    sandbox = sandbox_factory(scenarios=None)
    made = make_incident(sandbox, {"restore_stopped_transient": 3})["restore_stopped_transient"]
    late = made[0]
    path = f"/v1/sessions/{late}/recovery-decisions"
    if host == "hangs":
        # The host hangs past the client's 10 s deadline on the first send and applies it meanwhile.
        sandbox.admin.fault("latency", path, method="POST", seconds=10.5)
    # Every answer of the run's send is lost after the host applied it, and of the first re-send (each send
    # is up to CLIENT_ATTEMPTS attempts).
    sandbox.admin.fault("drop_after_commit", path, method="POST", times=2 * CLIENT_ATTEMPTS)
    router = bulk_router(sandbox, tmp_path)
    reporter = ListReporter()
    done = router.handle_text(
        f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "store back" --yes',
        actor="alice",
        channel="C1",
        reporter=reporter,
    )
    batch_id = next(m.ref for m in done.messages if m.kind == "batch_progress")
    assert "2/3 accepted" in _said(done.messages) and "uncertain 1" in _said(done.messages), _said(done.messages)
    assert "Uncertain (1)" in _said(done.messages) and "re-sent with its own" in _said(done.messages)

    assert router.services.decisions.wait_background(60)
    batches = router.services.bulk.batches.batches  # type: ignore[union-attr]
    member = batches.member(batch_id, late)
    assert member is not None and member.state == "executed"
    # Applied once on the host, one key, re-sent until an answer was recorded.
    assert sandbox.admin.effect_counts() == {sid: 1 for sid in made}
    posts = [r for r in sandbox.admin.requests(late) if r["method"] == "POST"]
    assert len({r["idempotency_key"] for r in posts}) == 1
    if host == "answer_dropped":
        assert len(posts) == 2 * CLIENT_ATTEMPTS + 1
    else:  # the hang spends the first send's deadline: how many attempts fit in it depends on the timing
        assert CLIENT_ATTEMPTS + 1 < len(posts) <= 2 * CLIENT_ATTEMPTS + 1, len(posts)
    store = router.services.store
    steps = store.steps(session_id=late)
    assert [s.inputs.get("attempt") for s in steps if s.step == "batch_member_uncertain"] == [None, 1]
    # Verified like every member: its case shows verifying, and the batch's message (edited in place,
    # the same kind and ref) says so; nothing is posted for the member itself.
    assert [s.outcome for s in steps if s.step == "verification"][-1] == "verifying"
    edited = [m for m in reporter.posted if m.kind == "batch_progress" and m.ref == batch_id]
    assert edited and "verifying 3" in edited[-1].plain_text() and "uncertain 0" in edited[-1].plain_text()
    assert not [m for m in reporter.posted if m.session_id in made]

    for sid in made:
        sandbox.admin.worker_ready(sid)
    clock.advance(30)  # type: ignore[attr-defined]
    said = router.expire_due()
    final = [m for m in said if m.kind == "batch_verified" and m.ref == batch_id]
    assert len(final) == 1 and "3/3 recovered (observed)" in final[0].headline, _said(said)
    assert store.get_open_case(late) is None


@pytest.mark.parametrize("then", ["restart", "replay"])
def test_a_member_still_uncertain_past_the_limit_settles_as_uncertain_and_the_next_start_finishes_it(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path, then: str
) -> None:
    """Past the runbook's ``uncertain_retry_for`` the member stays uncertain, the batch says so and
    settles (its final message names it); the next start, or the console's ``/recover replay``,
    re-sends it with the same key."""
    sandbox = sandbox_factory(scenarios=None)
    made = make_incident(sandbox, {"restore_stopped_transient": 2})["restore_stopped_transient"]
    late = made[0]
    sandbox.admin.fault("server_error", f"/v1/sessions/{late}/recovery-decisions", method="POST", times=None)
    router = bulk_router(sandbox, tmp_path)
    reporter = ListReporter()
    done = router.handle_text(
        f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "store back" --yes',
        actor="alice",
        channel="C1",
        reporter=reporter,
    )
    batch_id = next(m.ref for m in done.messages if m.kind == "batch_progress")
    assert router.services.decisions.wait_background(60)
    sandbox.admin.worker_ready(made[1])
    clock.advance(30)  # type: ignore[attr-defined]
    said = [*reporter.posted, *router.expire_due()]
    final = [m for m in said if m.kind == "batch_verified" and m.ref == batch_id]
    assert len(final) == 1 and "1/2 recovered" in final[0].headline, _said(said)
    assert f"{late}: uncertain" in final[0].plain_text() and "at the next start" in final[0].plain_text()
    assert sandbox.admin.effect_counts() == {made[1]: 1}

    sandbox.admin.clear_faults()
    if then == "restart":
        restarted = bulk_router(sandbox, tmp_path)
    else:
        restarted = router
        replayed = router.handle_text("/recover replay", actor="alice", channel="C1", reporter=ListReporter())
        assert any(m.kind == "batch_progress" and m.ref == batch_id for m in replayed.messages), replayed
    assert restarted.services.decisions.wait_background(60)
    assert sandbox.admin.effect_counts() == {sid: 1 for sid in made}
    keys = {r["idempotency_key"] for r in sandbox.admin.requests(late) if r["method"] == "POST"}
    assert len(keys) == 1
    member = restarted.services.bulk.batches.batches.member(batch_id, late)  # type: ignore[union-attr]
    assert member is not None and member.state == "executed"


def test_a_deposed_finisher_of_a_member_records_no_attempt(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path
) -> None:
    """An uncertain member's attempt and give-up steps are fenced by its send lease, as a single
    request's are: a finisher whose lease another bot took over (it was paused past it) records neither."""
    sandbox = sandbox_factory(scenarios=None)
    made = make_incident(sandbox, {"restore_stopped_transient": 2})["restore_stopped_transient"]
    late = made[0]
    sandbox.admin.fault("server_error", f"/v1/sessions/{late}/recovery-decisions", method="POST", times=None)
    router = bulk_router(sandbox, tmp_path)
    done = router.handle_text(
        f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "store back" --yes',
        actor="alice",
        channel="C1",
        reporter=ListReporter(),
    )
    batch_id = next(m.ref for m in done.messages if m.kind == "batch_progress")
    assert router.services.decisions.wait_background(60)
    bulk = router.services.bulk
    assert bulk is not None
    send = MemberSend(bulk.batches, batch_id, late, ListReporter())
    store = router.services.store
    member = bulk.batches.batches.member(batch_id, late)
    assert member is not None and member.state == "uncertain" and member.idem_key  # given up: still uncertain
    assert store.leases.acquire(send_job(member.idem_key), "another-bot:1", 60) is not None
    before = len(store.steps(session_id=late))
    with pytest.raises(LeaseLost):
        send.unanswered(ControlHostError("no answer", code="UPSTREAM_TIMEOUT"), 7)
    with pytest.raises(LeaseLost):
        send.gave_up("15m", None)
    assert len(store.steps(session_id=late)) == before
