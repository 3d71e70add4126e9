"""Facts extraction (docs/facts.md) from API answers parsed by the client's models and real parsed log lines."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.controlhost import Event, Session, Turn
from bot.diagnosis import facts as F
from bot.logs import parse_line

DOC = Path(__file__).resolve().parents[2] / "docs/facts.md"


def lines(*texts: str):
    parsed = [parse_line(t) for t in texts]
    assert all(p is not None for p in parsed)
    return parsed


def test_fact_names_equal_the_documented_vocabulary():
    documented = set(re.findall(r"^\| `([a-z_.<>]+)` \|", DOC.read_text(), re.M))
    documented = {d for d in documented if "<" not in d} | {f"source.{s}" for s in F.SOURCES}
    assert set(F.ALL_FACTS) == documented


def test_empty_facts_are_unknown_with_sources_not_configured():
    facts = F.empty_facts("ses_1", datetime(2026, 11, 29, 10, 0, tzinfo=UTC))
    assert facts["now"] == "2026-11-29T10:00:00.000Z"
    assert facts["session.id"] == "ses_1"
    assert facts["session.found"] is None and facts["logs.permanent_damage"] is None
    assert facts["source.logs"] == "not_configured"


def test_session_in_backoff():
    # R2.1, R2.2, R2.10: retry_at set means the restore is still in backoff.
    session = {
        "id": "ses_1",
        "status": "failed",
        "admission_state": "recovery_required",
        "revision": 7,
        "resumable": False,
        "queued_inputs": 2,
        "attention": {
            "code": "RESTORE_FAILED",
            "reason": "execution_gone",
            "failures": 2,
            "retry_at": "2026-11-29T10:04:30Z",
        },
        "checkpoint": {"id": "ckpt_1", "covers_turn_id": "turn_8"},
        "execution": {"state": "gone", "confirmed_gone_at": "2026-11-29T10:00:00Z"},
    }
    facts = F.session_facts(Session.parse(session))
    assert facts["attention.in_backoff"] is True
    assert facts["attention.retry_at"] == "2026-11-29T10:04:30.000Z"
    assert facts["attention.failures"] == 2
    assert facts["session.revision"] == 7
    assert facts["execution.confirmed_gone"] is True
    assert facts["checkpoint.covers_turn_id"] == "turn_8"


def test_session_with_missing_blocks_and_fields_never_crashes():
    facts = F.session_facts(Session.parse({"id": "ses_1", "status": "stopped"}))
    assert facts["session.found"] is True
    assert facts["attention.present"] is False and facts["attention.in_backoff"] is False
    assert facts["checkpoint.present"] is False
    assert facts["execution.state"] is None and facts["execution.confirmed_gone"] is None
    assert facts["session.revision"] is None and facts["session.resumable"] is None
    # stopped at the limit: attention present, retry_at null
    stopped = F.session_facts(
        Session.parse(
            {
                "attention": {"code": "RESTORE_FAILED", "retry_at": None, "failures": "3"},
                "execution": {"state": "draining"},
                "revision": "x",
            }
        )
    )
    assert stopped["attention.in_backoff"] is False and stopped["attention.failures"] == 3
    assert stopped["execution.confirmed_gone"] is False
    assert stopped["session.revision"] is None


def test_unknown_turn_uses_the_turn_detail_and_the_oldest_head():
    turns = [
        {"id": "turn_10", "status": "outcome_unknown", "started_at": "2026-11-29T10:00:05Z"},
        {"id": "turn_9", "status": "outcome_unknown", "started_at": "2026-11-29T09:59:00Z"},
    ]
    head = F.pick_unknown_turn(Turn.parse(t) for t in turns)
    assert head is not None and head.id == "turn_9"
    detail = Turn.parse({"id": "turn_9", "terminal_reason": "interrupt_unanswered", "control_id": "ctl_3"})
    facts = F.turn_facts(head, detail)
    assert facts == {
        "unknown_turn.present": True,
        "unknown_turn.id": "turn_9",
        "unknown_turn.terminal_reason": "interrupt_unanswered",
        "unknown_turn.control_id": "ctl_3",
    }
    assert F.turn_facts(None)["unknown_turn.present"] is False
    assert F.pick_unknown_turn([Turn.parse({"id": "t", "status": "completed"})]) is None


def test_covered_by_checkpoint_links_session_and_turn():
    # R3.11: confirm_completed needs a committed checkpoint covering the turn.
    facts = F.empty_facts("ses_1", datetime(2026, 11, 29, tzinfo=UTC))
    facts.update(F.session_facts(Session.parse({"checkpoint": {"id": "c", "covers_turn_id": "turn_9"}})))
    facts.update(F.turn_facts(Turn.parse({"id": "turn_9"})))
    assert F.link_facts(facts)["unknown_turn.covered_by_checkpoint"] is True
    facts.update(F.session_facts(Session.parse({"checkpoint": None})))
    assert F.link_facts(facts)["unknown_turn.covered_by_checkpoint"] is False
    unknown_session = F.empty_facts("ses_1", datetime(2026, 11, 29, tzinfo=UTC))
    unknown_session.update(F.turn_facts(Turn.parse({"id": "turn_9"})))
    assert F.link_facts(unknown_session)["unknown_turn.covered_by_checkpoint"] is None


def test_event_counts():
    raw = [
        {"name": "checkpoint_restore_failed"},
        {"type": "checkpoint_restore_failed"},
        {"name": "startup_failed"},
        {"name": "other"},
        {},
    ]
    events = [Event.parse(e) for e in raw]
    facts = F.event_facts(events)
    assert {k: facts[k] for k in ("events.restore_failed", "events.startup_failed")} == {
        "events.restore_failed": 2,
        "events.startup_failed": 1,
    }
    assert facts["events.ready_seq"] is None and facts["events.last_seq"] == 0


def test_the_newest_ready_report_and_what_it_restored():
    """R5.1, R5.2: the evidence verification reads — the newest worker_ready and the stream's end."""
    raw = [
        {"seq": 3, "name": "worker_ready", "generation": 1, "checkpoint_id": "ckpt_1"},
        {"seq": 5, "name": "checkpoint_restore_failed"},
        {"seq": 7, "name": "worker_ready", "generation": 2, "checkpoint_id": None},
        {"seq": 9, "name": "other"},
    ]
    facts = F.event_facts([Event.parse(e) for e in raw])
    assert facts["events.last_seq"] == 9
    assert facts["events.ready_seq"] == 7 and facts["events.ready_generation"] == 2
    assert facts["events.ready_names_checkpoint"] is True and facts["events.ready_checkpoint_id"] is None
    silent = F.event_facts([Event.parse({"seq": 2, "name": "worker_ready", "generation": 1})])
    assert silent["events.ready_names_checkpoint"] is False  # the host does not say (R5.2 unknowable)


def test_transient_store_outage_is_not_permanent_damage():
    # R2.6: restore_unavailable lines (even mentioning 503/404 paths) are transient.
    facts, _ = F.log_facts(
        lines(
            '{"event":"worker.checkpoint.restore_unavailable","session_id":"ses_1","status":503,"attempt":1}',
            '{"event":"worker.checkpoint.restore_unavailable","session_id":"ses_1","error":"HTTP 404 from proxy"}',
            '{"event":"worker.checkpoint.store_unavailable","session_id":"ses_1","error":"dns failure"}',
            "worker.failed session_id=ses_1 error=startup_timeout",
        )
    )
    assert facts["logs.restore_unavailable"] == 2
    assert facts["logs.store_unavailable"] == 1
    assert facts["logs.worker_failed"] == 1
    assert facts["logs.permanent_damage"] is False
    assert facts["logs.likely_cause"] == "startup_timeout"
    assert facts["logs.lines"] == 4
    assert facts["logs.missing_stages"] is None  # no interrupt at all: unknown, not "everything missing"


def test_permanent_damage_markers():
    # R2.5, R2.8: restore_refused, CHECKPOINT_UNAVAILABLE, 404/NoSuchKey, 401/403, digest/checksum mismatch.
    damaged = [
        '{"event":"worker.checkpoint.restore_refused","session_id":"ses_1"}',
        '{"event":"worker.failed","session_id":"ses_1","error":"CHECKPOINT_UNAVAILABLE: manifest missing"}',
        '{"event":"worker.failed","session_id":"ses_1","error":"NoSuchKey: checkpoints/ckpt_1/part-3"}',
        '{"event":"worker.failed","session_id":"ses_1","status":403}',
        'worker.failed session_id=ses_1 error="store answered HTTP 401"',
        '{"event":"worker.failed","session_id":"ses_1","error":"digest mismatch on part 2"}',
        "worker.failed session_id=ses_1 reason=checksum_mismatch",
    ]
    for text in damaged:
        facts, _ = F.log_facts(lines(text))
        assert facts["logs.permanent_damage"] is True, text
    harmless = '{"event":"worker.failed","session_id":"ses_1","error":"git clone failed","elapsed_ms":404}'
    assert F.log_facts(lines(harmless))[0]["logs.permanent_damage"] is False


def test_finalize_checkpoint_unavailable_is_not_restore_damage():
    facts, _ = F.log_facts(
        lines(
            '{"event":"worker.turn.interrupt.stage","session_id":"ses_1","turn_id":"t","control_id":"c",'
            '"stage":"capture_finished","outcome":"ok","elapsed_ms":800}',
            '{"event":"worker.turn.interrupt.stage","session_id":"ses_1","turn_id":"t","control_id":"c",'
            '"stage":"finalize_finished","outcome":"failed","reason":"CHECKPOINT_UNAVAILABLE","elapsed_ms":900}',
        )
    )
    assert facts["logs.finalize_checkpoint_unavailable"] is True
    assert facts["logs.permanent_damage"] is False
    assert facts["logs.capture_timeout"] is False


def test_startup_failure_cause_and_stop_kind_refused():
    # R2.13: the likely cause is the error text of the last failing line; R2.16 counted apart.
    facts, evidence = F.log_facts(
        lines(
            "worker.stopping kind=drain session_id=ses_1",
            '{"event":"worker.failed","session_id":"ses_1","error":"git fetch: repository not found"}',
            'worker.stopping kind=failed session_id=ses_1 error="remote branch feature/x not found"',
            '{"event":"worker.release.stop_kind_refused","session_id":"ses_1","status":400}',
        )
    )
    assert facts["logs.stopping_failed"] == 1
    assert facts["logs.worker_failed"] == 1
    assert facts["logs.stop_kind_refused"] == 1
    assert facts["logs.likely_cause"] == "remote branch feature/x not found"
    # A drained stop (R2.15) is shown to people but never counted as a failure.
    assert [ln.event for ln in evidence.notable] == [
        "worker.stopping",
        "worker.failed",
        "worker.stopping",
        "worker.release.stop_kind_refused",
    ]


def test_likely_cause_is_redacted():
    facts, _ = F.log_facts(
        lines('{"event":"worker.failed","session_id":"ses_1","error":"clone refused: Authorization: Bearer abc.def"}')
    )
    assert "abc.def" not in facts["logs.likely_cause"]


def test_interrupt_facts_from_the_unknown_turn_timeline():
    def st(stage, ms, turn="turn_9", **kw):
        return json.dumps(
            {
                "event": "worker.turn.interrupt.stage",
                "session_id": "ses_1",
                "turn_id": turn,
                "control_id": "ctl_3",
                "stage": stage,
                "elapsed_ms": ms,
                **kw,
            }
        )

    facts, evidence = F.log_facts(
        lines(
            st("control_received", 0),
            st("sdk_interrupt_called", 2),
            st("engine_terminal", 5003, outcome="timeout"),
            st("control_received", 0, turn="turn_2"),
            "turn turn_9 gave no terminal within 5000ms of its interrupt session_id=ses_1",
            '{"event":"late_sdk_interrupt_answered","session_id":"ses_1","turn_id":"turn_9","control_id":"ctl_3",'
            '"elapsed_ms":6400}',
            "control.result session_id=ses_1 turn_id=turn_9 control_id=ctl_3 operation=interrupt outcome=unknown "
            "reason_code=deadline_exceeded effect_ms=30000 duration_ms=30000",
        ),
        turn_id="turn_9",
    )
    assert facts["logs.interrupt_unanswered"] is True
    assert facts["logs.engine_terminal_timeout"] is True
    assert facts["logs.late_sdk_interrupt_answered"] is True
    assert facts["logs.missing_stages"] == (
        "sdk_interrupt_answered,capture_started,capture_finished,finalize_started,finalize_finished"
    )
    assert facts["logs.control_result_outcome"] == "unknown"
    assert facts["logs.control_result_reason_code"] == "deadline_exceeded"
    assert evidence.timeline is not None and evidence.timeline.turn_id == "turn_9"
    assert evidence.control_result is not None and evidence.control_result.deadline_exceeded


def test_another_turns_interrupt_evidence_is_never_attributed_to_the_unknown_turn():
    """R3.2: with no stage lines for the outcome-unknown turn, an older turn's engine_terminal timeout,
    its deadline_exceeded control.result and an unanswered line naming it (or no turn) explain nothing."""

    def st(stage, ms, turn, **kw):
        return json.dumps(
            {
                "event": "worker.turn.interrupt.stage",
                "session_id": "ses_1",
                "turn_id": turn,
                "control_id": "ctl_old",
                "stage": stage,
                "elapsed_ms": ms,
                **kw,
            }
        )

    facts, evidence = F.log_facts(
        lines(
            st("control_received", 0, "turn_old"),
            st("engine_terminal", 5003, "turn_old", outcome="timeout"),
            "turn turn_old gave no terminal within 5000ms of its interrupt session_id=ses_1",
            "gave no terminal within 5000ms of its interrupt session_id=ses_1",
            "control.result session_id=ses_1 turn_id=turn_old control_id=ctl_old operation=interrupt outcome=unknown "
            "reason_code=deadline_exceeded effect_ms=30000 duration_ms=30000",
        ),
        turn_id="turn_new",
        control_id="ctl_new",
    )
    assert evidence.timeline is None and evidence.control_result is None
    assert facts["logs.timeline_turn_id"] is None
    assert facts["logs.engine_terminal_timeout"] is False
    assert facts["logs.interrupt_unanswered"] is False
    assert facts["logs.control_result_reason_code"] is None
    # Without a turn to explain, the session's latest evidence is shown, labelled with its turn.
    anyturn, _ = F.log_facts(lines(st("engine_terminal", 5003, "turn_old", outcome="timeout")))
    assert anyturn["logs.timeline_turn_id"] == "turn_old" and anyturn["logs.engine_terminal_timeout"] is True


@pytest.mark.parametrize(
    ("line", "damage"),
    [
        ('{"event":"worker.failed","session_id":"ses_1","status":503,"error":"NoSuchKey while retrying"}', False),
        ('{"event":"worker.failed","session_id":"ses_1","status":404,"error":"not found"}', True),
        (
            '{"event":"worker.failed","session_id":"ses_1","error":"object-store timeout",'
            '"detail":"status 404 earlier"}',
            False,
        ),
        ("worker.failed session_id=ses_1 NoSuchKey: the manifest is gone", True),
    ],
)
def test_structured_fields_decide_damage_before_free_text(line, damage):
    """R2.6 vs R2.8: a transient status field wins over a damage word in the text; free text is read
    only on lines without structured fields."""
    facts, _ = F.log_facts(lines(line))
    assert facts["logs.permanent_damage"] is damage


def test_an_ongoing_outage_is_open_until_the_store_answers():
    outage = '{"event":"worker.checkpoint.restore_unavailable","session_id":"ses_1","status":503}'
    assert F.log_facts(lines(outage, outage))[0]["logs.outage_ongoing"] is True
    back = '{"event":"worker.checkpoint.store_available","session_id":"ses_1"}'
    assert F.log_facts(lines(outage, back))[0]["logs.outage_ongoing"] is False
    failed = '{"event":"worker.failed","session_id":"ses_1","error":"startup timeout"}'
    assert F.log_facts(lines(outage, failed))[0]["logs.outage_ongoing"] is False


def test_reconciler_facts():
    assert F.reconciler_facts("Completed", "2026-11-29T09:59:00Z") == {
        "reconciler.last_pass": "completed",
        "reconciler.last_pass_at": "2026-11-29T09:59:00.000Z",
    }
    assert F.reconciler_facts(None, None) == {"reconciler.last_pass": None, "reconciler.last_pass_at": None}


def test_a_missing_retry_at_is_unknown_not_null() -> None:
    # R2.2: "stopped" reads retry_at present and null; a field the API left out is unknown.
    base = {"id": "s", "status": "failed", "admission_state": "recovery_required", "revision": 3}

    def with_attention(attention: object) -> F.Facts:
        return F.session_facts(Session.parse({**base, "attention": attention}))

    missing = with_attention({"code": "RESTORE_FAILED", "failures": 3})
    null = with_attention({"code": "RESTORE_FAILED", "failures": 3, "retry_at": None})
    later = with_attention({"code": "RESTORE_FAILED", "retry_at": "2026-11-29T10:04:30Z"})
    garbled = with_attention({"code": "RESTORE_FAILED", "retry_at": "soon"})
    none = with_attention(None)
    assert missing["attention.in_backoff"] is None
    assert null["attention.in_backoff"] is False
    assert later["attention.in_backoff"] is True
    assert garbled["attention.in_backoff"] is None
    assert garbled["attention.retry_at"] == "soon"  # shown as sent, never taken for a time
    assert none["attention.in_backoff"] is False
