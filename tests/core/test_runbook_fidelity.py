"""Runbook fidelity through the router (the core the Slack app and the console both call), against the
sandbox control host over HTTP: the bot refuses what the runbook refuses, and says what the session is.

Each test creates its session through the sandbox's admin API and counts what reached the control host
(POSTs, Idempotency-Keys, effects) there, not in the bot.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.app.router import Router
from bot.clock import ManualClock
from bot.messages import ListReporter, Reply
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import load_settings
from tests.fixtures.composing import default_router

CHANNEL = "C1"


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios=None, clock=ManualClock()) as handle:
        yield handle


@pytest.fixture
def router(sbx: SandboxHandle, tmp_path: Path) -> Router:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db"})
    built = default_router(settings, sandbox=sbx)
    assert isinstance(built, Router)
    return built


def say(router: Router, line: str, actor: str = "alice") -> Reply:
    return router.handle_text(line, actor=actor, channel=CHANNEL, reporter=ListReporter())


def text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def posts(sbx: SandboxHandle, sid: str) -> list[dict[str, Any]]:
    return [r for r in sbx.admin.requests(sid) if r.get("method") == "POST"]


def confirmation_id(reply: Reply) -> str:
    (asked,) = [m for m in reply.messages if m.kind == "confirmation_request"]
    assert asked.ref
    return asked.ref


def diagnosis_lines(reply: Reply) -> list[str]:
    (message,) = [m for m in reply.messages if m.kind == "diagnosis"]
    return message.lines


def valid_line(reply: Reply) -> str:
    return next((line for line in diagnosis_lines(reply) if line.startswith("Valid now: ")), "")


def not_valid(reply: Reply) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in diagnosis_lines(reply):
        if line.startswith("  • "):
            name, _, reason = line[4:].partition(": ")
            out[name] = reason
    return out


def next_steps(reply: Reply) -> list[str]:
    lines = diagnosis_lines(reply)
    if "Next:" not in lines:
        return []
    start = lines.index("Next:") + 1
    steps = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        steps.append(line)
    return steps


def unknown_turn_over_restore_limit(sbx: SandboxHandle, sid: str) -> None:
    """An outcome_unknown turn heads the queue while the attention alone reads "stopped at the limit"."""
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 9,
                "resumable": False,
                "attention": {"code": "RESTORE_FAILED", "reason": "restore_refused", "failures": 3, "retry_at": None},
                "checkpoint": {"id": "ckpt_1", "covers_turn_id": "turn_1"},
                "execution": {"state": "gone", "alive": False},
            },
            "turns": [
                {"id": "turn_1", "status": "completed"},
                {
                    "id": "turn_2",
                    "status": "outcome_unknown",
                    "terminal_reason": "interrupt_unanswered",
                    "control_id": "ctl_2",
                },
            ],
        }
    )


# -- R2.10: retry_restore only for a session stopped at the restore-failure limit ---------------------


def test_retry_restore_over_an_unknown_turn_is_refused_locally_with_the_reason(sbx, router) -> None:
    sid = "ses_fid_unknown_over_limit"
    unknown_turn_over_restore_limit(sbx, sid)
    # R2.10 (seed: "unknown turn … 409 REQUEST_STALE"), R3.8: the attention fields alone look like a
    # stop at the limit; the unknown turn decides.
    diagnosis = say(router, f"/recover diagnose {sid}")
    assert "retry_restore" not in valid_line(diagnosis)
    reason = not_valid(diagnosis)["retry_restore"]
    assert reason.startswith("409 REQUEST_STALE an outcome_unknown turn (turn_2) heads the queue"), reason
    for line in (
        f'/recover decide {sid} retry_restore --reason "proxy fixed" --yes',
        f'/recover decide {sid} retry_restore --reason "proxy fixed"',
    ):
        reply = say(router, line)
        assert not reply.ok
        said = text(reply)
        assert "outcome_unknown turn (turn_2) heads the queue" in said and "Nothing was sent" in said
    # The button path ends in the same core.
    button = router.handle_action(
        "decide",
        "",
        actor="alice",
        channel=CHANNEL,
        reporter=ListReporter(),
        form={"session_id": sid, "decision": "retry_restore", "reason": "proxy fixed", "yes": "1"},
    )
    assert not button.ok and "outcome_unknown turn (turn_2)" in text(button)
    assert posts(sbx, sid) == []  # no POST at all: refused by the bot, not by the control host
    assert sbx.admin.effect_count(sid) == 0


def test_retry_restore_refused_for_a_context_gap_and_for_startup_failures(sbx, router) -> None:
    sbx.admin.create_session(
        {
            "session": {
                "id": "ses_fid_gap",
                "status": "stopped",
                "admission_state": "open",
                "revision": 3,
                "resumable": False,
                "attention": {
                    "code": "CONTEXT_GAP",
                    "reason": "turn_after_checkpoint",
                    "failures": None,
                    "retry_at": None,
                },
                "checkpoint": {"id": "ckpt_1", "covers_turn_id": "turn_1"},
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    sbx.admin.create_session(
        {
            "session": {
                "id": "ses_fid_startup",
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 5,
                "resumable": False,
                "checkpoint": None,
                "execution": {"state": "gone", "alive": False},
                "attention": {"code": "STARTUP_FAILED", "reason": "git_clone_failed", "failures": 3, "retry_at": None},
            }
        }
    )
    gap = say(router, '/recover decide ses_fid_gap retry_restore --reason "r" --yes')
    assert not gap.ok and "stopped for a context gap (CONTEXT_GAP)" in text(gap)
    startup = say(router, '/recover decide ses_fid_startup retry_restore --reason "r" --yes')
    assert not startup.ok and "startup failures without a restore (STARTUP_FAILED)" in text(startup)
    assert posts(sbx, "ses_fid_gap") == [] and posts(sbx, "ses_fid_startup") == []


# -- R2.1–R2.3, R2.16: "stopped at the limit" is the stop itself ---------------------------------------


def test_a_relaunched_session_is_described_as_running_with_no_refused_next_step(sbx, router) -> None:
    sid = "ses_fid_relaunched"
    # Drive the sandbox's own state machine: a starting worker fails its restore once, the backoff
    # passes, the scheduler relaunches it (running, admission open, retry_at null, failures 1).
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "running",
                "admission_state": "open",
                "revision": 2,
                "resumable": False,
                "checkpoint": {"id": "ckpt_5", "covers_turn_id": "turn_1"},
                "execution": {"state": "running", "alive": True, "phase": "starting"},
            }
        }
    )
    sbx.admin.fail_restore(sid, "restore_refused")
    sbx.admin.advance(31)
    launched = sbx.admin.scheduler_pass()
    assert sid in launched["launched"]
    detail = sbx.admin.session(sid)
    assert (detail["status"], detail["admission_state"]) == ("running", "open")
    assert detail["attention"]["retry_at"] is None and detail["attention"]["failures"] == 1

    reply = say(router, f"/recover diagnose {sid}")
    said = text(reply)
    assert "Running again after failures" in said
    assert "stopped at the limit" not in said.lower() and "permanent damage" not in said
    assert "Startup failures stopped" not in said
    refused = not_valid(reply)
    steps = " ".join(next_steps(reply))
    assert steps, said
    # No decision it would refuse is offered among its next steps.
    assert not [name for name in refused if name in steps], (refused, steps)
    assert "retry_restore" in refused and "start_fresh" in refused
    # And the refusal is real, locally: nothing reaches the control host.
    again = say(router, f'/recover decide {sid} retry_restore --reason "r" --yes')
    assert not again.ok and "not recovery_required" in text(again)
    assert posts(sbx, sid) == []


def test_a_restore_stopped_at_the_limit_still_offers_retry_restore(sbx, router) -> None:
    sid = "ses_fid_incompatible"
    # R2.3: an incompatible checkpoint stops after ONE failure; the count is evidence, not a check.
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "running",
                "admission_state": "open",
                "revision": 2,
                "resumable": False,
                "checkpoint": {"id": "ckpt_6", "covers_turn_id": "turn_1"},
                "execution": {"state": "running", "alive": True, "phase": "starting"},
            }
        }
    )
    sbx.admin.fail_restore(sid, "incompatible_checkpoint")
    reply = say(router, f"/recover diagnose {sid}")
    assert "Incompatible checkpoint" in text(reply)
    assert valid_line(reply).startswith("Valid now: retry_restore (needs --cause-fixed: incompatible checkpoint")
    assert ", start_fresh, close" in valid_line(reply)
    refused = say(router, f'/recover decide {sid} retry_restore --reason "runtime pinned back"')
    # R2.3/R5.3: without saying what changed it is refused, as for a batch member …
    assert "needs --cause-fixed" in text(refused) and posts(sbx, sid) == []
    confirm = say(
        router,
        f'/recover decide {sid} retry_restore --cause-fixed "runtime pinned back" --reason "runtime pinned back" --yes',
    )
    # R2.4/R5.3: … and then the incompatible warning is shown before any send, --yes or not.
    assert "never succeeds on the same runtime/profile" in text(confirm)
    assert posts(sbx, sid) == []


def test_retry_restore_after_a_store_outage_has_no_incompatible_warning(sbx, router) -> None:
    sid = "ses_fid_transient"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 8,
                "resumable": False,
                "attention": {
                    "code": "RESTORE_FAILED",
                    "reason": "restore_unavailable",
                    "failures": 3,
                    "retry_at": None,
                },
                "checkpoint": {"id": "ckpt_7", "covers_turn_id": "turn_1"},
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    reply = say(router, f'/recover decide {sid} retry_restore --reason "store back"')
    assert reply.ok
    # … and not to a transient outage (R2.6, R2.9): the wording follows the cause.
    assert "incompatible" not in text(reply).lower()
    sent = say(router, f"/recover confirm {confirmation_id(reply)}")
    assert sent.ok, text(sent)
    assert [p["status"] for p in posts(sbx, sid)] == [201]


# -- R3.12: start_fresh for a stopped session with nothing to continue from ------------------------------


def test_start_fresh_is_accepted_and_sent_for_a_stopped_session_without_context_gap(sbx, router) -> None:
    sid = "ses_fid_stopped_plain"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "stopped",
                "admission_state": "open",
                "revision": 4,
                "resumable": False,
                "attention": None,
                "checkpoint": None,
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    reply = say(router, f"/recover diagnose {sid}")
    assert "Stopped, nothing to continue from" in text(reply)
    assert valid_line(reply).startswith("Valid now: start_fresh, close")
    # R4.1: no committed checkpoint, so the volume may expire: save files before the TTL.
    assert any("before the TTL ends" in line for line in diagnosis_lines(reply))
    confirm = say(router, f'/recover decide {sid} start_fresh --reason "nothing to continue from"')
    assert confirm.ok
    # R2.14/R3.12 wording: no checkpoint, nothing is dropped.
    assert "Nothing is lost: there is no checkpoint to drop" in text(confirm)
    assert "drops the checkpoint" not in text(confirm)
    sent = say(router, f"/recover confirm {confirmation_id(confirm)}")
    assert sent.ok, text(sent)
    assert [p["status"] for p in posts(sbx, sid)] == [201]
    assert [e["decision"] for e in sbx.admin.effects(sid)] == ["start_fresh"]


def test_start_fresh_after_startup_failures_loses_nothing(sbx, router) -> None:
    sid = "ses_fid_startup_fresh"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 5,
                "resumable": False,
                "checkpoint": None,
                "execution": {"state": "gone", "alive": False},
                "attention": {
                    "code": "STARTUP_FAILED",
                    "reason": "credentials_refused",
                    "failures": 3,
                    "retry_at": None,
                },
            }
        }
    )
    reply = say(router, f'/recover decide {sid} start_fresh --reason "credentials fixed"')
    assert reply.ok
    said = text(reply)
    assert "Nothing is lost" in said and "R2.14" in said
    assert "drops the checkpoint's context" not in said and "This drops:" not in said


# -- R3.9: close is valid wherever the session is not closed ---------------------------------------------


CLOSE_CASES = {
    "ses_fid_c_resumable": (
        {
            "status": "stopped",
            "admission_state": "open",
            "resumable": True,
            "attention": None,
            "checkpoint": {"id": "ckpt_2", "covers_turn_id": "turn_1"},
            "execution": {"state": "gone", "alive": False},
        },
        "it could simply be resumed",
    ),
    "ses_fid_c_healthy": (
        {
            "status": "running",
            "admission_state": "open",
            "resumable": None,
            "attention": None,
            "execution": {"state": "running", "alive": True},
        },
        "it is healthy and needs nothing",
    ),
    "ses_fid_c_backoff": (
        {
            "status": "idle",
            "admission_state": "open",
            "resumable": False,
            "attention": {"code": "RESTORE_FAILED", "reason": "restore_refused", "failures": 1, "retry_at": "+30s"},
            "execution": {"state": "gone", "alive": False},
        },
        "ends the session for good",
    ),
    "ses_fid_c_odd": (  # no branch fits (failed, admission open, no attention): unclassified
        {
            "status": "failed",
            "admission_state": "open",
            "resumable": None,
            "attention": None,
            "execution": {"state": "gone", "alive": False},
        },
        "ends the session for good",
    ),
}


@pytest.mark.parametrize("sid", sorted(CLOSE_CASES))
def test_close_is_valid_wherever_the_session_is_not_closed(sbx, router, sid) -> None:
    session, consequence = CLOSE_CASES[sid]
    sbx.admin.create_session({"session": {"id": sid, "revision": 3, **session}})
    reply = say(router, f"/recover diagnose {sid}")
    assert "close" not in not_valid(reply), diagnosis_lines(reply)
    line = valid_line(reply)
    assert "close (ends the session for good" in line and consequence in line, line
    (message,) = [m for m in reply.messages if m.kind == "diagnosis"]
    assert "close" in [b.label for b in message.buttons]


def test_close_is_not_valid_once_closed(sbx, router) -> None:
    sbx.admin.create_session(
        {
            "session": {
                "id": "ses_fid_closed",
                "status": "closed",
                "admission_state": "closed",
                "revision": 9,
                "attention": None,
            }
        }
    )
    reply = say(router, "/recover diagnose ses_fid_closed")
    assert "close" not in valid_line(reply)
    assert "the session is closed" in text(reply)


# -- wording: backoff end in the past, "none" for none ---------------------------------------------------


def test_a_backoff_end_in_the_past_is_said_to_have_passed(sbx, router) -> None:
    sid = "ses_fid_backoff_past"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "idle",
                "admission_state": "open",
                "revision": 6,
                "resumable": False,
                "attention": {"code": "RESTORE_FAILED", "reason": "restore_refused", "failures": 2, "retry_at": "+20s"},
                "checkpoint": {"id": "ckpt_8", "covers_turn_id": "turn_1"},
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    before = not_valid(say(router, f"/recover diagnose {sid}"))["retry_restore"]
    assert before.startswith("409 REQUEST_STALE until the backoff ends at 10:00:20Z"), before
    sbx.clock.advance(25)  # 10:00:25Z: the scheduler has not run yet, retry_at still reads 10:00:20Z
    after = not_valid(say(router, f"/recover diagnose {sid}"))["retry_restore"]
    assert "until the backoff ends" not in after
    assert "was to end at 10:00:20Z, which has passed (now 10:00:25Z)" in after and "diagnose again" in after


def test_none_is_said_for_none_and_unknown_only_for_unread(sbx, router) -> None:
    sid = "ses_fid_none"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "open",
                "revision": 2,
                "resumable": None,
                "attention": None,
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    reply = say(router, f"/recover diagnose {sid}")
    said = text(reply)
    assert "attention none (reason none)" in said
    assert "attention unknown" not in said
    close = say(router, f'/recover decide {sid} close --reason "done with it"')
    assert close.ok
    assert "Turn: none   Evidence: none" in text(close) and "Turn: unknown" not in text(close)


def test_a_voided_approval_lists_every_fact_that_changed(sbx, router) -> None:
    sid = "ses_fid_void"
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 4,
                "resumable": False,
                "attention": {"code": "RESTORE_FAILED", "reason": "restore_refused", "failures": 3, "retry_at": None},
                "checkpoint": {"id": "ckpt_v1", "covers_turn_id": "turn_1"},
                "execution": {"state": "gone", "alive": False},
            }
        }
    )
    close = say(router, f'/recover decide {sid} close --reason "give up"')
    (asked,) = [m for m in close.messages if m.kind == "approval_request"]
    # Meanwhile carol's retry_restore clears the attention (R2.9): three decisive facts change.
    retry = say(
        router,
        f'/recover decide {sid} retry_restore --cause-fixed "proxy replaced" --reason "proxy fixed"',
        actor="carol",
    )
    assert say(router, f"/recover confirm {confirmation_id(retry)}", actor="carol").ok
    sbx.admin.worker_ready(sid)  # the attention clears when the next worker is ready (R5.1)
    void = say(router, f"/recover approve {asked.ref}", actor="bob")
    assert not void.ok
    updated = void.messages[0].headline
    for change in (
        "attention.code: RESTORE_FAILED → none",
        "attention.reason: restore_refused → none",
        "attention.failures: 3 → none",
    ):
        assert change in updated, updated
    assert [e["decision"] for e in sbx.admin.effects(sid)] == ["retry_restore"]


BUILTIN = {
    # The sandbox's own scenarios for these cases (written from the runbook, independently of the bot).
    "ses_relaunched": ("Running again after failures", {"retry_restore", "start_fresh"}),
    "ses_unknown_over_limit": ("Turn outcome unknown after an interrupt", {"retry_restore", "start_fresh"}),
    "ses_stopped_no_checkpoint": ("Stopped, nothing to continue from", {"retry_restore", "resume"}),
}


@pytest.mark.parametrize("sid", sorted(BUILTIN))
def test_the_sandbox_scenarios_read_as_the_runbook_says(tmp_path, sid) -> None:
    title, refused = BUILTIN[sid]
    with start_sandbox(clock=ManualClock()) as builtin:
        settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db"})
        router = default_router(settings, sandbox=builtin)
        reply = say(router, f"/recover diagnose {sid}")
        assert title in text(reply)
        assert refused <= set(not_valid(reply)), not_valid(reply)
        assert "close" in valid_line(reply)
        steps = " ".join(next_steps(reply))
        assert not [name for name in refused if name in steps], steps
        before = len(posts(builtin, sid))
        for decision in sorted(refused - {"resume"}):
            assert not say(router, f'/recover decide {sid} {decision} --reason "r"').ok
        assert len(posts(builtin, sid)) == before  # refused locally: nothing reached the control host
