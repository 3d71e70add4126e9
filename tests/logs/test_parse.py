"""parse_line: the three worker line formats (docs/control-host-api.md, "Worker log lines") and garbage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.logs import MAX_TEXT_CHARS, parse_line, parse_timestamp

API_EXAMPLE = (
    '{"ts":"2026-11-29T10:00:01.250Z","level":"info","event":"worker.turn.interrupt.stage",'
    '"session_id":"ses_1","turn_id":"turn_9","control_id":"ctl_3","stage":"capture_finished",'
    '"outcome":"timeout","budget_ms":30000,"elapsed_ms":35012}'
)
_T = datetime(2026, 11, 29, 10, 0, 1, tzinfo=UTC)


def test_json_line_from_the_api_doc() -> None:
    # R3.2 / R3.5: the interrupt-stage line diagnosis groups and reads.
    line = parse_line(API_EXAMPLE, source="worker.log")
    assert line is not None
    assert line.ts == datetime(2026, 11, 29, 10, 0, 1, 250000, tzinfo=UTC)
    assert line.event == "worker.turn.interrupt.stage"
    assert line.session_id == "ses_1"
    assert line.fields["stage"] == "capture_finished"
    assert line.fields["budget_ms"] == 30000 and isinstance(line.fields["budget_ms"], int)
    assert line.fields["elapsed_ms"] == 35012
    assert line.text == API_EXAMPLE and line.raw == API_EXAMPLE
    assert line.source == "worker.log"


def test_json_nested_values_become_compact_json_text() -> None:
    line = parse_line('{"event":"x","session_id":"ses_1","detail":{"b":[1,2],"a":null},"ok":true,"f":1.5}')
    assert line is not None
    assert line.fields["detail"] == '{"a":null,"b":[1,2]}'
    assert line.fields["ok"] is True and line.fields["f"] == 1.5


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("time", '"2026-11-29T10:00:01+02:00"', datetime(2026, 11, 29, 8, 0, 1, tzinfo=UTC)),
        ("timestamp", '"2026-11-29 10:00:01,500"', datetime(2026, 11, 29, 10, 0, 1, 500000, tzinfo=UTC)),
        ("ts", str(int(_T.timestamp())), _T),
        ("ts", str(int(_T.timestamp() * 1000) + 250), _T + timedelta(milliseconds=250)),
    ],
)
def test_json_time_keys_and_formats(key: str, value: str, expected: datetime) -> None:
    line = parse_line(f'{{"{key}":{value},"event":"worker.failed","session_id":"ses_1"}}')
    assert line is not None and line.ts == expected


def test_logfmt_line_from_the_api_doc() -> None:
    # R2.13: the startup-failure cause comes from worker.stopping kind=failed.
    line = parse_line('worker.stopping kind=failed session_id=ses_1 error="git clone failed"')
    assert line is not None
    assert line.event == "worker.stopping"
    assert line.session_id == "ses_1"
    assert line.fields == {"kind": "failed", "session_id": "ses_1", "error": "git clone failed"}
    assert line.ts is None


def test_logfmt_quoted_escapes_typed_values_and_level_prefix() -> None:
    line = parse_line(
        '2026-11-29T10:00:02Z ERROR worker.failed session_id=ses_1 error="repo \\"a b\\" gone\\n\\u00e9" '
        "attempt=3 ratio=0.5 retry=false missing=null empty="
    )
    assert line is not None
    assert line.event == "worker.failed"
    assert line.ts == datetime(2026, 11, 29, 10, 0, 2, tzinfo=UTC)
    assert line.fields["level"] == "error"
    assert line.fields["error"] == 'repo "a b" gone\né'
    assert line.fields["attempt"] == 3 and line.fields["ratio"] == 0.5
    assert line.fields["retry"] is False and line.fields["missing"] is None and line.fields["empty"] == ""


def test_logfmt_event_field_and_ts_field_win() -> None:
    line = parse_line(
        "2026-01-01T00:00:00Z level=info event=control.result ts=2026-11-29T10:00:03.5Z session_id=ses_1 "
        "operation=interrupt outcome=unknown reason_code=deadline_exceeded effect_ms=0"
    )
    assert line is not None
    assert line.event == "control.result"
    assert line.ts == datetime(2026, 11, 29, 10, 0, 3, 500000, tzinfo=UTC)  # its own ts, not the prefix
    assert line.fields["effect_ms"] == 0 and line.fields["reason_code"] == "deadline_exceeded"


def test_logfmt_unterminated_quote_runs_to_end_of_line() -> None:
    line = parse_line('worker.failed session_id=ses_1 error="cut off here')
    assert line is not None and line.fields["error"] == "cut off here"


def test_plain_sentence_is_recognised_but_has_no_event() -> None:
    # R3.1: interrupt_unanswered leaves this plain sentence in the worker log.
    line = parse_line("gave no terminal within 5000ms of its interrupt")
    assert line is not None
    assert line.event is None and line.session_id is None and line.ts is None
    assert line.fields == {"recognised": "interrupt_unanswered", "within_ms": 5000}
    assert line.text == "gave no terminal within 5000ms of its interrupt"


def test_plain_sentence_with_docker_timestamp_and_embedded_session_id() -> None:
    line = parse_line(
        "2026-11-29T10:00:01.123456789Z worker ended before its interrupt was answered (session_id: ses_4)"
    )
    assert line is not None
    assert line.ts == datetime(2026, 11, 29, 10, 0, 1, 123456, tzinfo=UTC)
    assert line.session_id == "ses_4"
    assert line.fields["recognised"] == "interrupt_unanswered"


def test_docker_timestamp_prefix_then_json() -> None:
    line = parse_line('2026-11-29T10:00:01.000000001Z {"event":"worker.failed","session_id":"ses_1"}')
    assert line is not None
    assert line.event == "worker.failed" and line.session_id == "ses_1"
    assert line.ts == datetime(2026, 11, 29, 10, 0, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "\n", "\x00\x01\x02\x03", "}}}{{ ]]", "\ufffd\ufffd\ufffd\ufffd", "\x00\x00a\x00\x00\x00"],
)
def test_blank_and_garbage_lines_are_none(text: str) -> None:
    assert parse_line(text) is None


@pytest.mark.parametrize("text", ['{"session_id": "ses_1", "cut', "[1, 2, 3]", '{"a": 1} trailing'])
def test_broken_json_is_kept_as_text(text: str) -> None:
    line = parse_line(text)
    assert line is not None and line.text == text and line.event is None


def test_text_is_capped() -> None:
    line = parse_line("x" * (MAX_TEXT_CHARS * 3))
    assert line is not None
    assert len(line.text) == MAX_TEXT_CHARS + 1 and line.text.endswith("…")


def test_parse_timestamp_edges() -> None:
    assert parse_timestamp("2026-11-29T10:00:01") == datetime(2026, 11, 29, 10, 0, 1, tzinfo=UTC)
    assert parse_timestamp("2026-11-29T12:00:01+02:00") == datetime(
        2026, 11, 29, 12, 0, 1, tzinfo=timezone(timedelta(hours=2))
    )
    for bad in ("yesterday", "", "2026-13-45T99:00:00Z", True, None, float("nan"), 10**30, [1]):
        assert parse_timestamp(bad) is None


@given(st.text(max_size=2000))
def test_parse_line_never_raises(text: str) -> None:
    line = parse_line(text)
    if line is not None:
        assert len(line.text) <= MAX_TEXT_CHARS + 1
        assert all(v is None or isinstance(v, str | int | float | bool) for v in line.fields.values())


@given(st.dictionaries(st.text(max_size=10), st.recursive(st.none() | st.integers() | st.text(), st.lists)))
def test_any_json_object_parses(obj: dict[str, object]) -> None:
    import json

    line = parse_line(json.dumps(obj))
    if line is not None:
        assert set(line.fields) == set(obj)


def test_field_readers_take_json_numbers_and_logfmt_text_alike() -> None:
    # R3.2: elapsed_ms arrives as a JSON number or as logfmt text ("5003", "5003ms"); odd values are unknown.
    json_line = parse_line('{"event":"x","elapsed_ms":5003,"budget_ms":2.0,"outcome":" timeout ","n":true}')
    logfmt = parse_line("x elapsed_ms=5003ms budget_ms=soon outcome= code=404")
    assert json_line is not None and logfmt is not None
    assert json_line.int_of("elapsed_ms") == 5003 == logfmt.int_of("elapsed_ms")
    assert json_line.int_of("budget_ms") == 2 and logfmt.int_of("budget_ms") is None
    assert json_line.int_of("n") is None and json_line.int_of("missing") is None
    assert json_line.text_of("outcome") == "timeout" and logfmt.text_of("outcome") is None
    assert logfmt.text_of("code") == "404" and logfmt.int_of("code") == 404
