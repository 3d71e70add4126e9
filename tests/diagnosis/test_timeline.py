"""The interrupt-stage timeline (R3.2–R3.5) and control.result (R3.3) from real parsed log lines."""

from __future__ import annotations

import json

from bot.diagnosis import timeline as tl
from bot.logs import parse_line


def stage(stage: str, elapsed: int, *, turn: str = "turn_9", ctl: str = "ctl_3", ses: str = "ses_1", **extra):
    payload = {
        "ts": f"2026-11-29T10:00:{min(59, elapsed // 1000):02d}.000Z",
        "event": "worker.turn.interrupt.stage",
        "session_id": ses,
        "turn_id": turn,
        "control_id": ctl,
        "stage": stage,
        "elapsed_ms": elapsed,
        **extra,
    }
    line = parse_line(json.dumps(payload))
    assert line is not None
    return line


def test_stages_are_ordered_by_the_r3_2_sequence_not_by_log_order():
    # R3.2: interleaved collection must not reorder the stages people read.
    lines = [
        stage("capture_started", 5100),
        stage("control_received", 0),
        stage("engine_terminal", 5050),
        stage("sdk_interrupt_called", 3),
        stage("sdk_interrupt_answered", 40),
    ]
    (timeline,) = tl.build_timelines(lines)
    assert [s.stage for s in timeline.stages] == [
        "control_received",
        "sdk_interrupt_called",
        "sdk_interrupt_answered",
        "engine_terminal",
        "capture_started",
    ]
    assert [s.elapsed_ms for s in timeline.stages] == [0, 3, 40, 5050, 5100]
    assert timeline.missing == ["capture_finished", "finalize_started", "finalize_finished"]


def test_lines_group_by_session_turn_and_control():
    lines = [
        stage("control_received", 0, ctl="ctl_a"),
        stage("control_received", 0, ctl="ctl_b"),
        stage("sdk_interrupt_called", 2, ctl="ctl_b"),
        stage("control_received", 0, turn="turn_other", ctl="ctl_a"),
    ]
    groups = {(t.turn_id, t.control_id): len(t.stages) for t in tl.build_timelines(lines)}
    assert groups == {("turn_9", "ctl_a"): 1, ("turn_9", "ctl_b"): 2, ("turn_other", "ctl_a"): 1}


def test_late_sdk_answer_is_kept_apart_from_the_sequence():
    # R3.4: an answer after the engine terminal is logged late_sdk_interrupt_answered, not in sequence.
    late = parse_line(
        '{"event":"late_sdk_interrupt_answered","session_id":"ses_1","turn_id":"turn_9","control_id":"ctl_3",'
        '"elapsed_ms":7200}'
    )
    lines = [stage("control_received", 0), stage("engine_terminal", 5001, outcome="timeout"), late]
    (timeline,) = tl.build_timelines(lines)
    assert [s.stage for s in timeline.stages] == ["control_received", "engine_terminal"]
    assert [(s.stage, s.elapsed_ms) for s in timeline.late] == [("late_sdk_interrupt_answered", 7200)]
    assert "sdk_interrupt_answered" in timeline.missing


def test_late_answer_as_a_stage_value_is_also_apart():
    lines = [stage("control_received", 0), stage("late_sdk_interrupt_answered", 6100)]
    (timeline,) = tl.build_timelines(lines)
    assert [s.stage for s in timeline.stages] == ["control_received"]
    assert len(timeline.late) == 1


def test_reading_engine_terminal_timeout():
    # R3.5: engine_terminal outcome=timeout = no terminal within the 5 s grace.
    (timeline,) = tl.build_timelines([stage("control_received", 0), stage("engine_terminal", 5002, outcome="timeout")])
    assert timeline.engine_terminal_timeout
    assert not timeline.capture_timeout
    assert [code for code, _ in timeline.readings()] == [tl.READ_ENGINE_TERMINAL_TIMEOUT]


def test_reading_capture_budget_ran_out():
    (timeline,) = tl.build_timelines(
        [stage("capture_started", 100), stage("capture_finished", 30110, outcome="timeout", budget_ms=30000)]
    )
    assert timeline.capture_timeout and not timeline.capture_failed
    ((code, entry),) = timeline.readings()
    assert code == tl.READ_CAPTURE_TIMEOUT and entry.budget_ms == 30000


def test_reading_capture_failed_with_reason():
    (timeline,) = tl.build_timelines([stage("capture_finished", 900, outcome="failed", reason="store_request_failed")])
    assert timeline.capture_failed and not timeline.capture_timeout
    ((code, entry),) = timeline.readings()
    assert code == tl.READ_CAPTURE_FAILED and entry.reason == "store_request_failed"


def test_finalize_checkpoint_unavailable_after_finished_capture_is_an_api_refusal():
    # R3.5: not a capture timeout and not an S3 failure.
    lines = [
        stage("capture_started", 100),
        stage("capture_finished", 800, outcome="ok"),
        stage("finalize_started", 810),
        stage("finalize_finished", 900, outcome="failed", reason="CHECKPOINT_UNAVAILABLE"),
    ]
    (timeline,) = tl.build_timelines(lines)
    assert timeline.finalize_checkpoint_unavailable
    assert not timeline.capture_timeout and not timeline.capture_failed
    assert [code for code, _ in timeline.readings()] == [tl.READ_FINALIZE_CHECKPOINT_UNAVAILABLE]


def test_finalize_failure_after_a_failed_capture_is_not_read_as_an_api_refusal():
    lines = [
        stage("capture_finished", 800, outcome="failed", reason="s3 timeout"),
        stage("finalize_finished", 900, outcome="failed", reason="CHECKPOINT_UNAVAILABLE"),
    ]
    (timeline,) = tl.build_timelines(lines)
    assert not timeline.finalize_checkpoint_unavailable
    assert [code for code, _ in timeline.readings()] == [tl.READ_CAPTURE_FAILED, tl.READ_FINALIZE_FAILED]


def test_logfmt_stage_lines_with_text_numbers():
    line = parse_line(
        "worker.turn.interrupt.stage session_id=ses_1 turn_id=turn_9 control_id=ctl_3 stage=capture_finished "
        "outcome=timeout budget_ms=30000 elapsed_ms=35012"
    )
    (timeline,) = tl.build_timelines([line])
    entry = timeline.stage("capture_finished")
    assert entry is not None and entry.elapsed_ms == 35012 and entry.budget_ms == 30000
    assert timeline.capture_timeout


def test_select_timeline_prefers_the_unknown_turn():
    lines = [stage("control_received", 0, turn="turn_old"), stage("control_received", 0, turn="turn_9")]
    timelines = tl.build_timelines(lines)
    chosen = tl.select_timeline(timelines, "turn_old")
    assert chosen is not None and chosen.turn_id == "turn_old"
    assert tl.select_timeline([], "turn_9") is None


def test_control_result_readings():
    # R3.3: effect_ms=0 is a no-op; outcome=unknown reason_code=deadline_exceeded is a missed deadline.
    noop = parse_line(
        '{"event":"control.result","session_id":"ses_1","operation":"interrupt","outcome":"interrupted",'
        '"reason_code":"already_terminal","effect_ms":0,"duration_ms":0,"control_id":"ctl_1"}'
    )
    late = parse_line(
        "control.result session_id=ses_1 operation=interrupt outcome=unknown reason_code=deadline_exceeded "
        "effect_ms=30500 duration_ms=30500 control_id=ctl_3 turn_id=turn_9"
    )
    results = tl.control_results([noop, late])
    assert [r.no_op for r in results] == [True, False]
    assert [r.deadline_exceeded for r in results] == [False, True]
    assert results[1].effect_ms == 30500 and results[1].operation == "interrupt"
    (timeline,) = tl.build_timelines([stage("control_received", 0, ctl="ctl_1")])
    assert tl.select_control_result(results, timeline) is results[0]
    assert tl.select_control_result(results, None, "turn_9") is results[1]
