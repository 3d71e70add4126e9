"""Evaluation: exactly one branch by precedence, its explanation, rules, valid and invalid decisions.

Facts are hand-built from the runbook's cases (R2, R3, R4); the sandbox end-to-end runs live with the
diagnose service. Times use the manual clock's day, 2026-11-29.
"""

from __future__ import annotations

import pytest

from bot.decisions._policy import decision_policy, runbook_limits
from bot.runbook import RunbookSet, check_decision, evaluate
from tests.runbook.helpers import facts

RETRY_AT = "2026-11-29T10:04:30.000Z"


def _stuck(**values: object) -> dict[str, object]:
    base = dict(
        session__found=True,
        session__status="failed",
        session__admission_state="recovery_required",
        session__revision=7,
        session__resumable=False,
        attention__present=True,
        attention__in_backoff=False,
        unknown_turn__present=False,
        execution__state="gone",
        execution__confirmed_gone=True,
        source__session="ok",
        source__turns="ok",
        source__events="ok",
        source__logs="ok",
    )
    base.update(values)
    return facts(**base)


def _restore(**values: object) -> dict[str, object]:
    base: dict[str, object] = dict(attention__code="RESTORE_FAILED", attention__in_backoff=False, attention__failures=3)
    return _stuck(**{**base, **values})


def _reasons(ev: object) -> dict[str, str]:
    return {v.decision: v.text for v in ev.invalid_decisions}  # type: ignore[attr-defined]


def test_restore_in_backoff(runbooks: RunbookSet) -> None:
    # R2.1, R2.10: in backoff retry_restore and start_fresh get 409 REQUEST_STALE until retry_at; close stays.
    ev = evaluate(
        runbooks,
        _stuck(
            attention__code="RESTORE_FAILED",
            attention__reason="execution_gone",
            attention__failures=1,
            attention__retry_at=RETRY_AT,
            attention__in_backoff=True,
        ),
    )
    assert ev.branch_id == "restore_backoff"
    assert ev.valid_decisions == ["close"]
    reasons = _reasons(ev)
    assert reasons["retry_restore"] == "retry_restore: 409 REQUEST_STALE until the backoff ends at 10:04:30Z"
    assert reasons["start_fresh"] == "start_fresh: 409 REQUEST_STALE until the backoff ends at 10:04:30Z"
    assert "REQUEST_STALE" in reasons["abandon"] and "no outcome_unknown turn" in reasons["abandon"]
    assert {"R2.1", "R2.2", "R2.10"} <= set(ev.rules)
    assert "10:04:30Z" in ev.explanation and "execution_gone" in ev.explanation


@pytest.mark.parametrize(
    ("extra", "branch", "rule"),
    [
        (
            {"attention__reason": "incompatible_checkpoint", "attention__failures": 1},
            "restore_incompatible",
            "R2.3",
        ),
        ({"attention__reason": "worker_failed", "logs__permanent_damage": True}, "restore_permanent", "R2.8"),
        ({"attention__reason": "worker_failed", "logs__restore_refused": 2}, "restore_permanent", "R2.8"),
        (
            {"attention__reason": "worker_failed", "logs__restore_unavailable": 12},
            "restore_transient",
            "R2.6",
        ),
        (
            {"attention__reason": "execution_gone", "logs__restore_unavailable": 0},
            "restore_execution_gone",
            "R2.2",
        ),
        ({"attention__reason": "worker_failed", "source__logs": "unreachable"}, "restore_stopped", "R2.5"),
    ],
)
def test_restore_stopped_at_the_limit(runbooks: RunbookSet, extra: dict[str, object], branch: str, rule: str) -> None:
    # R2.4, R2.9: fix the cause, then retry_restore / start_fresh / close.
    ev = evaluate(runbooks, _restore(**extra))
    assert ev.branch_id == branch
    assert ev.valid_decisions == ["retry_restore", "start_fresh", "close"]
    assert rule in ev.rules
    assert set(_reasons(ev)) == {"abandon", "confirm_completed", "resume"}


def test_transient_outage_notes_count_the_lines(runbooks: RunbookSet) -> None:
    ev = evaluate(runbooks, _restore(attention__reason="worker_failed", logs__restore_unavailable=12))
    assert any("12 worker.checkpoint.restore_unavailable" in n for n in ev.notes)
    assert any("retry_restore" in s for s in ev.next_steps)


def test_permanent_damage_wins_over_transient_lines(runbooks: RunbookSet) -> None:
    ev = evaluate(
        runbooks,
        _restore(attention__reason="worker_failed", logs__restore_unavailable=3, logs__restore_refused=1),
    )
    assert ev.branch_id == "restore_permanent"


def test_startup_failure_in_backoff(runbooks: RunbookSet) -> None:
    ev = evaluate(
        runbooks,
        _stuck(
            attention__code="STARTUP_FAILED",
            attention__failures=2,
            attention__retry_at=RETRY_AT,
            attention__in_backoff=True,
            logs__likely_cause="git clone: repository not found",
        ),
    )
    assert ev.branch_id == "startup_backoff"
    assert ev.valid_decisions == ["close"]
    assert "git clone: repository not found" in ev.explanation
    assert _reasons(ev)["retry_restore"].startswith(
        "retry_restore: 409 REQUEST_STALE accepted only for a session stopped at the restore-failure limit"
    )


def test_startup_failure_stopped(runbooks: RunbookSet) -> None:
    # R2.14: start_fresh after the fix (nothing is lost), or close; retry_restore is REQUEST_STALE (R2.10).
    ev = evaluate(
        runbooks,
        _stuck(
            attention__code="STARTUP_FAILED",
            attention__failures=3,
            attention__in_backoff=False,
            logs__stopping_failed=3,
            logs__worker_failed=3,
        ),
    )
    assert ev.branch_id == "startup_stopped"
    assert ev.valid_decisions == ["start_fresh", "close"]
    assert "startup failures without a restore (STARTUP_FAILED)" in _reasons(ev)["retry_restore"]
    assert any("worker.stopping kind=failed" in n for n in ev.notes)
    assert {"R2.12", "R2.13", "R2.14"} <= set(ev.rules)


def _unknown_turn(**values: object) -> dict[str, object]:
    base: dict[str, object] = dict(
        attention__code="OUTCOME_UNKNOWN",
        attention__reason="interrupt_checkpoint_unavailable",
        unknown_turn__present=True,
        unknown_turn__id="turn_9",
        unknown_turn__terminal_reason="interrupt_checkpoint_unavailable",
        unknown_turn__control_id="ctl_3",
        unknown_turn__covered_by_checkpoint=False,
        checkpoint__present=True,
        checkpoint__covers_turn_id="turn_8",
    )
    return _stuck(**{**base, **values})


def test_outcome_unknown_without_covering_checkpoint(runbooks: RunbookSet) -> None:
    ev = evaluate(runbooks, _unknown_turn(logs__finalize_checkpoint_unavailable=True, logs__missing_stages=""))
    assert ev.branch_id == "outcome_unknown"
    assert ev.valid_decisions == ["abandon", "close"]
    reasons = _reasons(ev)
    assert reasons["confirm_completed"].startswith("confirm_completed: 409 CHECKPOINT_UNAVAILABLE")
    assert "turn_9" in reasons["confirm_completed"] and "turn_8" in reasons["confirm_completed"]
    assert "REQUEST_STALE" in reasons["start_fresh"] and "turn_9" in reasons["start_fresh"]  # R3.8
    assert "REQUEST_STALE" in reasons["retry_restore"]
    # R3.10: external effects first; R3.5 reading of the stages
    assert "outside" in ev.next_steps[0]
    assert any("finalize_finished outcome=failed with CHECKPOINT_UNAVAILABLE" in n for n in ev.notes)
    assert not any("Stages missing" in n for n in ev.notes)
    assert {"R3.1", "R3.5", "R3.8", "R3.9", "R3.10", "R3.11"} <= set(ev.rules)


def test_outcome_unknown_worker_not_confirmed_gone(runbooks: RunbookSet) -> None:
    # R3.9: abandon/confirm_completed wait for the worker; close does not.
    ev = evaluate(runbooks, _unknown_turn(execution__state="draining", execution__confirmed_gone=False))
    assert ev.valid_decisions == ["close"]
    reasons = _reasons(ev)
    assert reasons["abandon"].startswith("abandon: 409 RECOVERY_REQUIRED the previous execution has not been")
    assert "draining" in reasons["abandon"]
    assert any("RECOVERY_REQUIRED" in n for n in ev.notes)


def test_outcome_unknown_with_covering_checkpoint(runbooks: RunbookSet) -> None:
    ev = evaluate(
        runbooks,
        _unknown_turn(
            unknown_turn__terminal_reason="interrupt_unanswered",
            unknown_turn__covered_by_checkpoint=True,
            checkpoint__covers_turn_id="turn_9",
            logs__late_sdk_interrupt_answered=True,
            logs__missing_stages="capture_started,capture_finished",
            logs__control_result_outcome="unknown",
            logs__control_result_reason_code="deadline_exceeded",
        ),
    )
    assert ev.valid_decisions == ["abandon", "confirm_completed", "close"]
    text = "\n".join(ev.notes)
    assert "late_sdk_interrupt_answered" in text and "capture_started,capture_finished" in text
    assert "deadline_exceeded" in text and "interrupt_unanswered" in text


def test_context_gap(runbooks: RunbookSet) -> None:
    ev = evaluate(
        runbooks,
        _stuck(session__status="stopped", session__admission_state="open", attention__code="CONTEXT_GAP"),
    )
    assert ev.branch_id == "context_gap"
    assert ev.valid_decisions == ["start_fresh", "close"]
    assert "R3.12" in ev.rules


def test_stopped_and_resumable(runbooks: RunbookSet) -> None:
    ev = evaluate(
        runbooks,
        _stuck(
            session__status="stopped",
            session__admission_state="open",
            session__resumable=True,
            attention__present=False,
            checkpoint__present=True,
            checkpoint__id="ckpt_4",
        ),
    )
    assert ev.branch_id == "stopped_resumable"
    # R3.9: close is accepted at any time before the session is closed: valid, with its consequence.
    assert ev.valid_decisions == ["close", "resume"]
    assert ev.consequences["close"] == "ends the session for good; it could simply be resumed"
    assert "ckpt_4" in ev.explanation


def test_healthy(runbooks: RunbookSet) -> None:
    ev = evaluate(
        runbooks,
        _stuck(session__status="running", session__admission_state="open", attention__present=False),
    )
    assert ev.branch_id == "healthy"
    assert ev.valid_decisions == ["close"]
    assert "ends the session for good" in ev.consequences["close"]


def test_closed_wins_over_everything(runbooks: RunbookSet) -> None:
    ev = evaluate(runbooks, _unknown_turn(session__status="closed", session__admission_state="closed"))
    assert ev.branch_id == "closed"
    assert ev.valid_decisions == []
    assert all("REQUEST_STALE the session is closed" in r for r in ev.invalid_reasons)


def test_unknown_session(runbooks: RunbookSet) -> None:
    ev = evaluate(runbooks, facts(session__found=False, source__session="ok"))
    assert ev.branch_id == "unknown_session"
    assert ev.valid_decisions == []
    assert all(v.status == 404 and v.code == "NOT_FOUND" for v in ev.invalid_decisions)
    assert "ses_1" in ev.explanation


def test_outcome_unknown_beats_restore_attention(runbooks: RunbookSet) -> None:
    ev = evaluate(runbooks, _unknown_turn(attention__code="RESTORE_FAILED", attention__in_backoff=False))
    assert ev.branch_id == "outcome_unknown"


def test_turns_unreadable_is_unclassified_not_guessed(runbooks: RunbookSet) -> None:
    # Classification uses the turns endpoint, not the attention code alone (R3.1).
    ev = evaluate(
        runbooks,
        _stuck(attention__code="OUTCOME_UNKNOWN", unknown_turn__present=None, source__turns="unreachable"),
    )
    assert ev.branch_id == "unclassified"
    assert ev.valid_decisions == ["close"]  # R3.9: close does not depend on the turn
    assert "unknown_turn.present" in ev.unknown_facts
    assert any("turns endpoint could not be read (unreachable)" in n for n in ev.notes)
    assert ev.verdicts["abandon"].code is None and "cannot tell" in ev.verdicts["abandon"].reason
    assert "unknown" in ev.explanation


def test_nothing_known_is_unclassified(runbooks: RunbookSet) -> None:
    ev = evaluate(runbooks, facts())
    assert ev.branch_id == "unclassified"
    assert "session.found" in ev.unknown_facts
    assert "status unknown" in ev.explanation


def test_check_decision_with_flags(runbooks: RunbookSet) -> None:
    f = _unknown_turn(unknown_turn__covered_by_checkpoint=True, checkpoint__covers_turn_id="turn_9")
    missing = check_decision(runbooks, "confirm_completed", f, {"turn": "turn_9", "reason": "r"})
    assert (missing.ok, missing.code, missing.status) == (False, "BAD_REQUEST", 400)
    assert "--evidence" in missing.reason and "--effects" in missing.reason
    flags = {"turn": "turn_9", "evidence": "s3://x", "effects": "none", "reason": "r", "yes": False}
    assert check_decision(runbooks, "confirm_completed", f, flags).ok
    wrong = check_decision(runbooks, "abandon", f, {**flags, "turn": "turn_1"})
    assert (wrong.ok, wrong.code) == (False, "REQUEST_STALE")
    assert "turn_1 is not the outcome_unknown turn" in wrong.reason and "R3.8" in wrong.rules
    unknown = check_decision(runbooks, "frobnicate", f, flags)
    assert not unknown.ok and unknown.code == "BAD_REQUEST"


def test_check_decision_retry_restore_in_backoff(runbooks: RunbookSet) -> None:
    f = _stuck(attention__code="RESTORE_FAILED", attention__retry_at=RETRY_AT, attention__in_backoff=True)
    verdict = check_decision(runbooks, "retry_restore", f, {"reason": "store fixed"})
    assert (verdict.ok, verdict.status, verdict.code) == (False, 409, "REQUEST_STALE")
    assert verdict.reason == "until the backoff ends at 10:04:30Z" and verdict.rules == ("R2.2", "R2.10")
    later = dict(f, **{"attention.retry_at": None, "attention.in_backoff": False})
    assert check_decision(runbooks, "retry_restore", later, {"reason": "store fixed"}).ok


def test_verify_next_after_abandon(runbooks: RunbookSet) -> None:
    # R3.12: resumable → resume; CONTEXT_GAP → start_fresh or close (the runbook's verify.next, as
    # the decision's policy reads it after an accepted decision).
    policy = decision_policy(runbooks, "abandon", runbook_limits(runbooks))
    after = facts(session__status="stopped", session__resumable=True)
    step = policy.next_step(after, {})
    assert step is not None and step.suggest == ("resume",)
    gap = facts(session__status="stopped", session__resumable=False, attention__code="CONTEXT_GAP")
    step = policy.next_step(gap, {})
    assert step is not None and step.suggest == ("start_fresh", "close") and "CONTEXT_GAP" in step.say
    assert runbooks.decisions["abandon"].verify.report[:4] == [
        "session.revision",
        "session.status",
        "session.admission_state",
        "session.resumable",
    ]


def test_accessors(runbooks: RunbookSet) -> None:
    assert runbooks.limit("diagnose_budget") == 10.0
    assert runbooks.limit("recovery_required_poll") == 15.0
    assert runbooks.limit("recovery_required_wait") == 600.0
    assert runbooks.limit("log_byte_budget") == 64 * 2**20
    assert runbooks.limit_int("repeated_decision_threshold") == 2
    policies = {name: d.approval.policy for name, d in runbooks.decisions.items() if d.approval}
    assert policies == {
        "retry_restore": "confirm",
        "start_fresh": "confirm",
        "abandon": "two_person",
        "confirm_completed": "two_person",
        "close": "two_person",
        "resume": "none",
    }
    assert runbooks.approval_expiry("close") == 1800.0
    assert runbooks.repeat_threshold("abandon") == 2
    assert runbooks.required_flags("confirm_completed") == ["turn", "evidence", "effects", "reason"]
    assert runbooks.required_flags("close") == ["reason"]
    assert runbooks.decidable == ["retry_restore", "start_fresh", "abandon", "confirm_completed", "close"]
    assert "checkpoint" in str(runbooks.decisions["start_fresh"].drops)
    assert runbooks.reconciler is not None
    assert runbooks.reconciler.argv == ["bun", "run", "apps/control-host/src/main.ts", "reconciler", "--once"]
    assert runbooks.reconciler.container.name_pattern == "{project}-reconciler-{n}"
    assert runbooks.reconciler_review_window() == 900.0
    assert runbooks.workers is not None and runbooks.workers.session_label == "control-host.session_id"
    assert runbooks.docker is not None and runbooks.docker.min_daemon_major == 28
    assert [s.image for s in runbooks.docker.deploy_order] == ["API_IMAGE", "WORKER_IMAGE"]  # type: ignore[union-attr]
    assert {c.name for c in runbooks.commands.values() if c.channel_restricted} == {
        "approve",
        "confirm",
        "reject",
        "decide",
        "reconcile",
        "batch decide",
        "withdraw",
        "replay",
        "break-glass",
        "review",
        "remind",
    }
    with pytest.raises(KeyError, match="no limit named"):
        runbooks.limit("nope")


def test_a_set_without_branches_is_a_runbook_error(runbooks_dir) -> None:
    from bot.errors import RunbookError
    from bot.runbook import load_runbooks

    only_upgrade = load_runbooks(runbooks_dir / "isolation-upgrade.yaml")
    assert (
        only_upgrade.docker is not None
        and only_upgrade.docker.min_daemon_major == 28
        and "preflight" in only_upgrade.commands
    )
    with pytest.raises(RunbookError, match="no loaded runbook defines branches"):
        evaluate(only_upgrade, facts())
