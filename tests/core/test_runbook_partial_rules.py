"""Rules an operator needs surfaced, through the router against the sandbox over HTTP (and the file log
source for worker lines): drain advice (R1.8, R1.9), events as evidence (R2.5), what is not counted
(R2.15), the old API's counting (R2.16), the fixed grace (R3.6) and held inputs (R3.7)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.app.router import Router
from bot.clock import ManualClock
from bot.messages import ListReporter, Reply
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import load_settings
from tests.fixtures.composing import default_router


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios="builtin", clock=ManualClock()) as handle:
        yield handle


def make_router(sbx: SandboxHandle, tmp_path: Path, **update: object) -> Router:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db", **update})
    built = default_router(settings, sandbox=sbx)
    assert isinstance(built, Router)
    return built


def say(router: Router, line: str) -> Reply:
    return router.handle_text(line, actor="alice", channel="C1", reporter=ListReporter())


def lines(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def test_upgrade_order_gives_the_drain_advice(sbx, tmp_path) -> None:
    said = lines(say(make_router(sbx, tmp_path), "/recover upgrade-order"))
    # R1.8: how long old-contract workers and inputs stay, and how to cut at once.
    assert "drain for up to MAX_TURN_SECONDS + 5 minutes" in said
    assert "terminate the affected sessions" in said
    # R1.9: a rollback does not cancel the drain.
    assert "After a rollback the drain request still stands" in said and "next launch" in said
    assert "R1.8" in said and "R1.9" in said


def test_restore_failure_events_are_evidence_and_uncounted_stops_are_named(sbx, tmp_path) -> None:
    said = lines(say(make_router(sbx, tmp_path), "/recover diagnose ses_restore_damaged"))
    # R2.5: the checkpoint_restore_failed events are shown as evidence next to the attention's count.
    assert "Evidence: 3 checkpoint_restore_failed event(s)" in said
    assert "the attention counts 3 failure(s) in a row" in said
    # R2.15: what never counts as a failure.
    assert "Not counted as failures: workers ended by pause, terminate, close or revoked execution rights" in said
    assert "SIGTERM" in said


def test_startup_failure_events_are_evidence(sbx, tmp_path) -> None:
    said = lines(say(make_router(sbx, tmp_path), "/recover diagnose ses_startup_stopped"))
    assert "startup_failed event(s) in the event stream" in said
    assert "Not counted as failures" in said


def test_the_old_api_counting_is_said_in_a_restore_branch(sbx, tmp_path) -> None:
    sid = "ses_old_api"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 6,
                "resumable": False,
                "checkpoint": {"id": "ckpt_o1", "covers_turn_id": "turn_1"},
                "attention": {"code": "RESTORE_FAILED", "reason": "execution_gone", "failures": 3, "retry_at": None},
                "execution": {"state": "gone", "alive": False},
            },
            "worker_logs": [
                {
                    "at": "-90s",
                    "json": {
                        "level": "warn",
                        "event": "worker.release.stop_kind_refused",
                        "session_id": sid,
                        "status": 400,
                        "code": "BAD_REQUEST",
                    },
                },
            ],
        }
    )
    log = tmp_path / "worker.log"
    log.write_text("\n".join(line["text"] for line in sbx.admin.worker_logs(sid)) + "\n", encoding="utf-8")
    router = make_router(sbx, tmp_path, log_files=str(log))
    said = lines(say(router, f"/recover diagnose {sid}"))
    # R2.16: in the restore branch, the old API counts that ending as one failure (the claim carried a restore).
    assert "worker.release.stop_kind_refused" in said
    assert "one failure, because the claim carried a restore" in said


def test_an_interrupt_timeout_says_the_engine_gets_no_next_input_and_inputs_are_held(sbx, tmp_path) -> None:
    said = lines(say(make_router(sbx, tmp_path), "/recover diagnose ses_unknown_unanswered"))
    # R3.6: no next input to the same engine; the 5 s grace is not tunable.
    assert "the next input is never given to the same engine" in said
    assert "The 5 s grace is fixed: it is not tunable" in said
    # R3.7: queued inputs held; the receipt is unknown with RECOVERY_REQUIRED.
    detail = sbx.admin.session("ses_unknown_unanswered")
    assert f"its {detail['queued_inputs']} queued input(s) are held, not dispatched" in said
    assert "receipt reads unknown with error RECOVERY_REQUIRED" in said


def test_the_worker_log_lines_really_are_read_from_the_file(sbx, tmp_path) -> None:
    # Guards the R2.16 test above: without the file, the note is absent (it is evidence, not boilerplate).
    sid = "ses_old_api_nolog"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 6,
                "resumable": False,
                "checkpoint": {"id": "ckpt_o2", "covers_turn_id": "turn_1"},
                "attention": {"code": "RESTORE_FAILED", "reason": "execution_gone", "failures": 3, "retry_at": None},
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    empty = tmp_path / "none.log"
    empty.write_text(json.dumps({"event": "worker.started", "session_id": sid}) + "\n", encoding="utf-8")
    said = lines(say(make_router(sbx, tmp_path, log_files=str(empty)), f"/recover diagnose {sid}"))
    assert "stop_kind_refused" not in said
