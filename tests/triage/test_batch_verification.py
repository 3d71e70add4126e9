"""Batch members get the verification single decisions get (R5.1): each case shows *verifying*, closes
on observed recovery, says "failing again" in the same case; the batch is told as one thing.

Real parts: the sandbox control host over HTTP, real SQLite files, the router (the sweep is the
router's own ``expire_due``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.messages import ListReporter, Reply
from bot.sandbox import CLEAR_ATTENTION, KEEP_ATTENTION, NEVER_READY, READY_AT_ONCE, SandboxHandle
from tests.fixtures.triage import bulk_router, make_incident

N = 6


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def _run(router: object, line: str, actor: str = "alice") -> Reply:
    reply: Reply = router.handle_text(line, actor=actor, channel="C1", reporter=ListReporter())  # type: ignore[attr-defined]
    return reply


def _last_verification(router: object, sid: str) -> str | None:
    steps = [s for s in router.services.store.steps(session_id=sid) if s.step == "verification"]  # type: ignore[attr-defined]
    return steps[-1].outcome if steps else None


def _batch(sandbox: SandboxHandle, tmp_path: Path) -> tuple[object, list[str], str, Reply]:
    made = make_incident(sandbox, {"restore_stopped_transient": N})["restore_stopped_transient"]
    router = bulk_router(sandbox, tmp_path)
    done = _run(router, f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "store back" --yes')
    assert f"{N}/{N} accepted" in _text(done), _text(done)
    batch_id = next(m.ref for m in done.messages if m.kind == "batch_progress")
    assert batch_id is not None
    return router, made, batch_id, done


def test_every_member_verifies_then_closes_on_observed_recovery_with_no_post_per_member(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    router, made, batch_id, done = _batch(incident_sandbox, tmp_path)
    store = router.services.store  # type: ignore[attr-defined]
    # Accepted is not recovered: each member's case is open, verifying, like a single decision's.
    assert all(_last_verification(router, sid) == "verifying" for sid in made)
    assert all(store.get_open_case(sid) is not None for sid in made)
    assert f"verifying {N}" in _text(done) and "verifying" in done.messages[0].headline
    assert not [m for m in done.messages if m.session_id in made]  # no message per member
    for sid in made:
        incident_sandbox.admin.worker_ready(sid)
    said = router.expire_due()  # type: ignore[attr-defined]
    assert [m for m in said if m.session_id in made] == [], [m.headline for m in said]
    assert all(store.get_open_case(sid) is None for sid in made)
    for sid in made:
        closing = [s for s in store.steps(session_id=sid) if s.step == "case_closed"]
        assert "verification: recovery observed" in closing[-1].inputs["reason"]
    edited = [m for m in said if m.kind == "batch_progress" and m.ref == batch_id]
    final = [m for m in said if m.kind == "batch_verified" and m.ref == batch_id]
    assert len(edited) == 1 and f"recovered {N}" in edited[0].plain_text()
    assert len(final) == 1 and f"{N}/{N} recovered" in final[0].headline
    assert router.expire_due() == []  # type: ignore[attr-defined]  # said once
    details = _text(_run(router, f"/recover details {batch_id}"))
    assert all(f"{sid}: recovered" in details for sid in made)


def test_a_member_failing_again_is_told_in_its_case_and_in_the_batch_message(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    router, made, batch_id, _ = _batch(incident_sandbox, tmp_path)
    bad, good = made[0], made[1:]
    incident_sandbox.admin.fail_restore(bad, "checkpoint_unavailable")
    for sid in good:
        incident_sandbox.admin.worker_ready(sid)
    said = router.expire_due()  # type: ignore[attr-defined]
    assert [m for m in said if m.session_id in made] == []
    assert _last_verification(router, bad) == "failed_again"
    assert router.services.store.get_open_case(bad) is not None  # type: ignore[attr-defined]
    assert "failing again after `retry_restore`" in _text(_run(router, "/recover cases"))
    edited = next(m for m in said if m.kind == "batch_progress" and m.ref == batch_id)
    assert "failing again 1" in edited.plain_text() and bad in edited.plain_text()
    final = next(m for m in said if m.kind == "batch_verified")
    assert f"{N - 1}/{N} recovered" in final.headline
    assert bad in final.plain_text() and not any(sid in final.plain_text() for sid in good)


def _posts(sandbox: SandboxHandle) -> list[dict]:
    return [e for e in sandbox.admin.effects() if e.get("decision")]


def test_a_start_fresh_yes_batch_shows_what_it_drops_once_and_does_not_send(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"incompatible": 3})["incompatible"]
    router = bulk_router(incident_sandbox, tmp_path)
    dry = _text(
        _run(router, f'/recover dryrun batch decide --sessions {",".join(made)} start_fresh --reason "drop it"')
    )
    assert "[!] This drops: the checkpoint's context" in dry and "3 member(s)" in dry  # R2.11, R5.3
    asked = _run(router, f'/recover batch decide --sessions {",".join(made)} start_fresh --reason "drop it" --yes')
    said = _text(asked)
    assert said.count("[!] This drops: the checkpoint's context") == 1 and "3 member(s)" in said, said  # once per kind
    assert "`--yes` did not send it" in said and _posts(incident_sandbox) == []
    batch_id = asked.messages[0].ref
    sent = _run(router, f"/recover confirm {batch_id}")
    assert "3/3 accepted" in _text(sent), _text(sent)
    assert len(_posts(incident_sandbox)) == 3


def test_an_incompatible_retry_with_cause_fixed_yes_batch_is_warned_before_any_send(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"incompatible": 2})["incompatible"]
    router = bulk_router(incident_sandbox, tmp_path)
    asked = _run(
        router,
        f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "retry" '
        '--cause-fixed "profile rolled back" --yes',
    )
    said = _text(asked)
    assert said.count("never succeeds on the same runtime/profile") == 1 and "2 member(s)" in said, said
    assert _posts(incident_sandbox) == []


def _sweep(router: object, clock: object, seconds: float, times: int = 1) -> list:
    said: list = []
    for _ in range(times):
        clock.advance(seconds)  # type: ignore[attr-defined]
        said.extend(router.expire_due())  # type: ignore[attr-defined]
    return said


@pytest.mark.parametrize("behaviour", [CLEAR_ATTENTION, KEEP_ATTENTION, NEVER_READY])
def test_batch_members_close_only_on_a_ready_report_whatever_the_host_answers(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path, behaviour: str
) -> None:
    """R5.1 on the batch path, against a host that clears the attention in its answer, one that keeps
    it (the seed's reading, the default) and one whose workers never report ready: the members' cases
    are judged by the single decisions' one rule, so no answer and no passing time closes them."""
    sandbox = sandbox_factory(scenarios=None, ready_behaviour=behaviour)
    made = make_incident(sandbox, {"restore_stopped_transient": 3})["restore_stopped_transient"]
    router = bulk_router(sandbox, tmp_path)
    store = router.services.store  # type: ignore[attr-defined]
    done = _run(router, f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "back" --yes')
    assert "3/3 accepted" in _text(done) and "verifying 3" in _text(done), _text(done)
    batch_id = next(m.ref for m in done.messages if m.kind == "batch_progress")
    for sid in made:  # the answer: running, admission open; with clear_attention no attention at all
        shown = sandbox.admin.session(sid)
        assert shown["status"] == "running" and shown["admission_state"] == "open"
        assert (shown["attention"] is None) == (behaviour == CLEAR_ATTENTION)
    assert all(_last_verification(router, sid) == "verifying" for sid in made)
    said = _sweep(router, clock, 30)
    assert not [m for m in said if m.kind == "batch_verified"] and all(store.get_open_case(s) for s in made)
    if behaviour == NEVER_READY:
        said = _sweep(router, clock, 30, times=130)  # an hour past the start-up window
        assert not [m for m in said if m.kind == "batch_verified" or m.session_id in made], [m.headline for m in said]
        assert all(store.get_open_case(sid) is not None for sid in made)
        assert not any(s.step == "case_closed" for sid in made for s in store.steps(session_id=sid))
        edited = [m for m in said if m.kind == "batch_progress" and m.ref == batch_id]
        assert len(edited) == 1, [m.plain_text() for m in edited]  # the window's end, said once, in the batch's
        assert "verifying 3" in edited[0].plain_text() and "recovered 0" in edited[0].plain_text()
        assert "no worker has reported ready within the start-up window (3)" in edited[0].plain_text()
        return
    for sid in made:
        sandbox.admin.worker_ready(sid)
    said = _sweep(router, clock, 30)
    final = [m for m in said if m.kind == "batch_verified" and m.ref == batch_id]
    assert len(final) == 1 and "3/3 recovered (observed)" in final[0].headline
    for sid in made:
        evidence = [s for s in store.steps(session_id=sid) if s.step == "case_closed"][-1].inputs["evidence"]
        assert evidence["events.ready_seq"] > evidence["events.after_seq"]


def _stop_at_the_limit_again(sandbox: SandboxHandle, clock: object, sid: str) -> None:
    """The relaunched worker dies at start-up three times: STARTUP_FAILED, stopped (R2.12)."""
    for _ in range(3):
        sandbox.admin.fail_startup(sid)
        clock.advance(61)  # type: ignore[attr-defined]
        sandbox.admin.scheduler_pass()
    assert sandbox.admin.session(sid)["attention"]["retry_at"] is None


def test_a_repeated_failure_is_warned_before_any_send_whichever_path_sent_the_first(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path
) -> None:
    """R5.4 (a repeat without fixing the cause) is one count for both paths: a start_fresh a batch sent
    that failed again holds a later `decide … --yes` and a later `batch decide … --yes` alike, each
    saying the repeat before any send; the failing again is told in the batch's message first."""
    sandbox = sandbox_factory(scenarios=None)
    made = make_incident(sandbox, {"startup_stopped": 3})["startup_stopped"]
    router = bulk_router(sandbox, tmp_path)
    first = _run(router, f'/recover batch decide --sessions {",".join(made)} start_fresh --reason "repo" --yes')
    assert "3/3 accepted" in _text(first), _text(first)  # nothing to drop, no repeat: --yes sends (R2.14)
    for sid in made:
        _stop_at_the_limit_again(sandbox, clock, sid)
    clock.advance(30)  # type: ignore[attr-defined]
    said = router.expire_due()  # type: ignore[attr-defined]
    edited = [m for m in said if m.kind == "batch_progress"]
    assert len(edited) == 1 and "failing again 3" in edited[0].plain_text(), [m.headline for m in said]
    sent = len(_posts(sandbox))
    single = _text(_run(router, f'/recover decide {made[0]} start_fresh --reason "repo" --yes'))
    repeat = (
        "[!] `start_fresh` was already executed 1 time(s) on this session without fixing the cause (R5.4): "
        "fix the cause before repeating it."
    )
    assert repeat in single, single  # the one sentence, on both paths
    assert len(_posts(sandbox)) == sent  # --yes did not send it
    again = _run(router, f'/recover batch decide --sessions {",".join(made)} start_fresh --reason "repo" --yes')
    said_again = _text(again)
    assert said_again.count(repeat) == 1, said_again
    assert "3 member(s)" in said_again and "`--yes` did not send it" in said_again
    assert len(_posts(sandbox)) == sent


def test_a_batch_never_resumes_the_one_resume_path_checks_r4_1_and_verifies_r5_2(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    """R4.1, R5.2 on the batch path: there is no batch resume, so no resume skips the committed-checkpoint
    check before the send (R4.1) or the context check after it (R5.2); nothing is sent."""
    made = make_incident(incident_sandbox, {"stopped_resumable": 2, "stopped_no_checkpoint": 1})
    ids = [*made["stopped_resumable"], *made["stopped_no_checkpoint"]]
    router = bulk_router(incident_sandbox, tmp_path)
    for line in (f"batch decide --sessions {','.join(ids)} resume", f"dryrun batch decide --sessions {ids[0]} resume"):
        reply = _run(router, f'/recover {line} --reason "go on" --yes')
        said = _text(reply)
        assert not reply.ok and "`resume` is never made in a batch" in said, said
        assert "(R4.1)" in said and "(R5.2)" in said and "/recover resume <session_id>" in said
    assert [r for r in incident_sandbox.admin.requests() if r["method"] == "POST"] == []
    assert router.services.bulk.batches.batches.find(("requested",)) == []  # type: ignore[attr-defined]


def test_batch_members_whose_workers_report_ready_before_the_first_re_read_close_as_recovered(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path
) -> None:
    """R5.1, a fast host: each member's worker reports ready before the batch's verification re-reads
    it. That report came after the member's send, so it is the evidence: judged against where the
    member's event stream stood before its own send (as a single decision is), not against a later
    read, which would leave every case verifying for ever."""
    sandbox = sandbox_factory(scenarios=None, ready_behaviour=READY_AT_ONCE)
    made = make_incident(sandbox, {"restore_stopped_transient": 3})["restore_stopped_transient"]
    router = bulk_router(sandbox, tmp_path)
    store = router.services.store  # type: ignore[attr-defined]
    done = _run(router, f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "back" --yes')
    said = [*done.messages, *_sweep(router, clock, 30)]
    final = [m for m in said if m.kind == "batch_verified"]
    assert len(final) == 1 and "3/3 recovered (observed)" in final[0].headline, [m.headline for m in said]
    for sid in made:
        assert store.get_open_case(sid) is None
        evidence = [s for s in store.steps(session_id=sid) if s.step == "case_closed"][-1].inputs["evidence"]
        assert evidence["events.ready_seq"] > evidence["events.after_seq"]


def test_a_member_answered_only_on_its_re_send_is_judged_against_the_stream_before_its_first_send(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path
) -> None:
    """R5.1, R0.3, a host that answers twice: the first send commits but its answer is a 500, the
    re-send with the same key gets the stored answer. The worker that send launched reported ready in
    between; judged against the position kept with the member's sending step (before the first
    send), that report is the evidence and the case closes, the decision applied once."""
    sandbox = sandbox_factory(scenarios=None, ready_behaviour=READY_AT_ONCE)
    made = make_incident(sandbox, {"restore_stopped_transient": 2})["restore_stopped_transient"]
    late = made[0]
    sandbox.admin.fault("error_after_commit", f"/v1/sessions/{late}/recovery-decisions", method="POST")
    router = bulk_router(sandbox, tmp_path)
    done = _run(router, f'/recover batch decide --sessions {",".join(made)} retry_restore --reason "back" --yes')
    said = [*done.messages, *_sweep(router, clock, 30)]
    assert [f["hits"] for f in sandbox.admin.faults()] == [1]
    assert sandbox.admin.effect_counts() == {sid: 1 for sid in made}
    keys = {r["idempotency_key"] for r in sandbox.admin.requests(late) if r["method"] == "POST"}
    assert len(keys) == 1 and len([r for r in sandbox.admin.requests(late) if r["method"] == "POST"]) == 2
    final = [m for m in said if m.kind == "batch_verified"]
    assert len(final) == 1 and "2/2 recovered (observed)" in final[0].headline, [m.plain_text() for m in said]
    assert router.services.store.get_open_case(late) is None  # type: ignore[attr-defined]


def _warned(reply: Reply) -> set[str]:
    """The ``[!]`` lines of a reply's messages, a batch's "— n member(s), e.g. …" tail and ids left out."""
    lines = [line.strip() for m in reply.messages for line in m.lines if line.strip().startswith("[!]")]
    return {re.sub(r"\b(ckpt|ses|turn)_\w+", "…", line.split(" — ")[0]) for line in lines}


@pytest.mark.parametrize(
    ("decision", "flags"),
    [("start_fresh", ""), ("retry_restore", ' --cause-fixed "profile rolled back"')],
)
def test_decide_and_batch_decide_warn_in_the_same_sentences(
    incident_sandbox: SandboxHandle, tmp_path: Path, decision: str, flags: str
) -> None:
    """Each warning a person reads before a send (what start_fresh drops, an incompatible checkpoint)
    is one sentence, whichever path asks: `decide` on one member and `batch decide` on the others say
    the same ones (the batch once per kind of member); the repeat's sentence is checked above."""
    made = make_incident(incident_sandbox, {"incompatible": 3})["incompatible"]
    router = bulk_router(incident_sandbox, tmp_path)
    single = _warned(_run(router, f'/recover decide {made[0]} {decision} --reason "go"{flags} --yes'))
    batch = _warned(
        _run(router, f'/recover batch decide --sessions {",".join(made[1:])} {decision} --reason "go"{flags} --yes')
    )
    assert single and single == batch, (single, batch)
    assert _posts(incident_sandbox) == []


def test_a_retry_decided_alone_that_failed_again_is_left_out_of_a_later_batch_by_the_same_count(
    sandbox_factory: Callable[..., SandboxHandle], clock: object, tmp_path: Path
) -> None:
    """R5.4, one count and one threshold: a retry_restore `decide` sent that failed again with the same
    attention is left out of a later `batch decide retry_restore` (which asks for --cause-fixed), while
    the batch's other members go on."""
    sandbox = sandbox_factory(scenarios=None)
    made = make_incident(sandbox, {"restore_stopped_transient": 3})["restore_stopped_transient"]
    router = bulk_router(sandbox, tmp_path)
    again = made[0]
    assert _run(router, f'/recover decide {again} retry_restore --reason "store back" --yes').ok
    for _ in range(3):  # the cause was not fixed: it stops again at the third failure
        sandbox.admin.fail_restore(again, "restore_unavailable")
        clock.advance(61)  # type: ignore[attr-defined]
        sandbox.admin.scheduler_pass()
    dry = _text(_run(router, f'/recover dryrun batch decide --sessions {",".join(made)} retry_restore --reason "b"'))
    assert f"left out {again}: retry_restore already applied 1 time(s)" in dry and "(R5.4)" in dry, dry
    assert all(f"left out {sid}" not in dry for sid in made[1:])
