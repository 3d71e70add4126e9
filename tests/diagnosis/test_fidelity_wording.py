"""The runbook's words, through the router over HTTP against the sandbox: evidence per turn (R3.2),
R2.14 keyed on the checkpoint, an ongoing outage (R2.6, R2.7), structured fields before free text
(R2.6 vs R2.8), and the wording fixes (none for none; what the next failure does; local refusals)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.decisions import reply_text, say


@pytest.fixture
def router(console_router: Any) -> Any:
    return console_router


def _with_logs(sandbox: Any, tmp_path: Any, spec: dict[str, Any]) -> None:
    """Create a session and append its worker lines to the demo log file the router reads."""
    sandbox.admin.create_session(spec)
    sid = spec["session"]["id"]
    with (tmp_path / "demo-worker.log").open("a", encoding="utf-8") as out:
        for line in sandbox.admin.worker_logs(sid):
            out.write(f"{line['ts']} {line['text']}\n")


def _stage(sid: str, turn: str, control: str, stage: str, ms: int, **extra: Any) -> dict[str, Any]:
    return {
        "at": "-50m",
        "json": {
            "level": "info",
            "event": "worker.turn.interrupt.stage",
            "session_id": sid,
            "turn_id": turn,
            "control_id": control,
            "stage": stage,
            "elapsed_ms": ms,
            **extra,
        },
    }


def test_another_turns_interrupt_evidence_is_not_the_unknown_turns(router, sandbox, tmp_path):
    """R3.2: no stage lines for the checkpoint_unavailable turn; an older turn's timeout and
    deadline_exceeded must not make the bot say its worker ended as failed (that worker drains)."""
    sid = "ses_per_turn"
    _with_logs(
        sandbox,
        tmp_path,
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 7,
                "resumable": False,
                "attention": {"code": "OUTCOME_UNKNOWN", "reason": "interrupt_checkpoint_unavailable"},
                "checkpoint": {"id": "ckpt_pt", "covers_turn_id": "turn_old"},
                "execution": {"state": "gone", "alive": False},
            },
            "turns": [
                {"id": "turn_old", "status": "interrupted", "control_id": "ctl_old"},
                {
                    "id": "turn_new",
                    "status": "outcome_unknown",
                    "terminal_reason": "interrupt_checkpoint_unavailable",
                    "control_id": "ctl_new",
                },
            ],
            "worker_logs": [
                _stage(sid, "turn_old", "ctl_old", "control_received", 0),
                _stage(sid, "turn_old", "ctl_old", "engine_terminal", 5003, outcome="timeout"),
                {
                    "at": "-50m",
                    "text": f"turn turn_old gave no terminal within 5000ms of its interrupt session_id={sid}",
                },
                {
                    "at": "-50m",
                    "json": {
                        "event": "control.result",
                        "session_id": sid,
                        "turn_id": "turn_old",
                        "control_id": "ctl_old",
                        "operation": "interrupt",
                        "outcome": "unknown",
                        "reason_code": "deadline_exceeded",
                        "effect_ms": 30000,
                        "duration_ms": 30000,
                    },
                },
            ],
        },
    )
    said = reply_text(say(router, f"diagnose {sid}"))
    assert "Turn outcome unknown" in said
    assert "No interrupt stage line names turn turn_new (control ctl_new)" in said
    assert "the worker ended as failed" not in said
    assert "engine_terminal outcome=timeout" not in said and "deadline_exceeded" not in said


def test_start_fresh_on_a_startup_failed_session_with_a_checkpoint_says_what_it_drops(router, sandbox):
    """R2.14's "nothing is lost" holds only without a checkpoint: keyed on the checkpoint, not the code."""
    sid = "ses_startup_ckpt"
    sandbox.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 5,
                "resumable": False,
                "attention": {
                    "code": "STARTUP_FAILED",
                    "reason": "git_credentials_refused",
                    "failures": 3,
                    "retry_at": None,
                },
                "checkpoint": {"id": "ckpt_sc", "covers_turn_id": None},
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    diagnosis = reply_text(say(router, f"diagnose {sid}"))
    assert "start_fresh drops its context" in diagnosis and "Nothing is lost" not in diagnosis
    asked = reply_text(say(router, f'decide {sid} start_fresh --reason "credentials fixed"'))
    assert "This drops: the checkpoint's context (checkpoint ckpt_sc)" in asked
    assert "Nothing is lost" not in asked
    # Without a checkpoint the runbook's words stand.
    assert "Nothing is lost" in reply_text(say(router, 'decide ses_startup_stopped start_fresh --reason "fixed"'))


def test_a_store_outage_in_progress_on_a_running_session_is_not_healthy(router, sandbox, tmp_path):
    sid = "ses_outage_now"
    outage = [
        {
            "at": f"-{60 - i}s",
            "json": {
                "level": "warn",
                "event": "worker.checkpoint.restore_unavailable",
                "session_id": sid,
                "status": 503,
                "attempt": i + 1,
            },
        }
        for i in range(6)
    ]
    _with_logs(
        sandbox,
        tmp_path,
        {
            "session": {
                "id": sid,
                "status": "running",
                "admission_state": "open",
                "revision": 3,
                "checkpoint": {"id": "ckpt_on", "covers_turn_id": None},
                "execution": {"state": "running", "alive": True, "phase": "starting"},
            },
            "worker_logs": outage,
        },
    )
    said = reply_text(say(router, f"diagnose {sid}"))
    assert "Store outage in progress" in said and "looks healthy" not in said
    assert "WORKER_STARTUP_TIMEOUT_SEC" in said
    assert router.services.store.get_open_case(sid) is not None  # not closed as "needs no operator"


def test_a_transient_reason_wins_over_a_loose_damage_word(router, sandbox, tmp_path):
    """R2.6 vs R2.8: a 503 line mentioning NoSuchKey and the API's reason restore_unavailable are an outage."""
    sid = "ses_loose_text"
    _with_logs(
        sandbox,
        tmp_path,
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 9,
                "resumable": False,
                "attention": {
                    "code": "RESTORE_FAILED",
                    "reason": "restore_unavailable",
                    "failures": 3,
                    "retry_at": None,
                },
                "checkpoint": {"id": "ckpt_lt", "covers_turn_id": None},
                "execution": {"state": "gone", "alive": False},
            },
            "worker_logs": [
                {
                    "at": "-2m",
                    "json": {
                        "level": "warn",
                        "event": "worker.checkpoint.restore_unavailable",
                        "session_id": sid,
                        "status": 503,
                    },
                },
                {
                    "at": "-1m",
                    "json": {
                        "level": "error",
                        "event": "worker.failed",
                        "session_id": sid,
                        "status": 503,
                        "error": "store 503 while reading; earlier probe said NoSuchKey",
                    },
                },
            ],
        },
    )
    said = reply_text(say(router, f"diagnose {sid}"))
    assert f"{sid}: Restore stopped at the limit — store outage" in said


def test_wording_none_for_none_and_what_the_next_failure_does(router):
    # No attention block after start_fresh on a stopped session: "none", not "unknown".
    verified = reply_text(say(router, 'decide ses_stopped_no_checkpoint start_fresh --reason "begin again" --yes'))
    assert "attention.code: none" in verified and "attention.code: unknown" not in verified
    relaunched = reply_text(say(router, "diagnose ses_relaunched"))  # RESTORE_FAILED, 2 failures, running
    assert (
        "the next failure is the 3rd and stops the session as recovery_required at once, with no backoff" in relaunched
    )
    assert "backs off, and stops" not in relaunched


def test_a_local_request_stale_refusal_does_not_say_the_session_changed(router):
    refused = say(router, 'decide ses_restore_backoff retry_restore --reason "try" --yes')
    said = reply_text(refused)
    assert not refused.ok and "will not be accepted" in said
    assert "The session changed" not in said


def test_the_dry_run_never_prints_409_none(router, sandbox):
    sandbox.admin.fault("server_error", "/v1/sessions/ses_incompatible/turns*", times=None)
    said = reply_text(say(router, 'dryrun decide ses_incompatible start_fresh --reason "drop it"'))
    assert "409 None" not in said and "Expected back: cannot tell" in said


def test_help_reconcile_gives_an_id_the_bot_accepts(router):
    from bot.ids import DRYRUN_ID

    said = reply_text(say(router, "help reconcile"))
    example = next(w for w in said.split() if w.startswith("dry_"))
    assert DRYRUN_ID.match(example.strip("`.,")), example
