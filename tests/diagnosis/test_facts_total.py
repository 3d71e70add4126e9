"""Facts extraction is total: arbitrary API shapes and log text give facts or None, never an exception."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from bot.controlhost import Event, Session, Turn
from bot.diagnosis import facts as F
from bot.logs import parse_line

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
keys = st.sampled_from(
    [
        "id",
        "status",
        "admission_state",
        "revision",
        "resumable",
        "attention",
        "checkpoint",
        "execution",
        "queued_inputs",
        "code",
        "reason",
        "failures",
        "retry_at",
        "state",
        "covers_turn_id",
        "terminal_reason",
        "control_id",
        "started_at",
        "name",
    ]
)
objects = st.dictionaries(keys, json_values | st.dictionaries(keys, json_values, max_size=5), max_size=9)
ALLOWED = (str, int, float, bool, type(None))


@given(objects, st.lists(objects, max_size=4), st.lists(objects, max_size=4))
def test_any_api_shape_gives_plain_facts(session, turns, events):
    facts = F.empty_facts("ses_1", datetime(2026, 11, 29, tzinfo=UTC))
    facts.update(F.session_facts(Session.parse(session)))
    head = F.pick_unknown_turn(Turn.parse(t) for t in turns)
    facts.update(F.turn_facts(head, head))
    facts.update(F.event_facts(Event.parse(e) for e in events))
    F.link_facts(facts)
    assert set(facts) == set(F.ALL_FACTS)
    assert all(isinstance(v, ALLOWED) for v in facts.values())


@given(
    st.lists(
        st.text(max_size=200)
        | st.sampled_from(
            [
                '{"event":"worker.turn.interrupt.stage","stage":"capture_finished","elapsed_ms":"x","outcome":7}',
                "worker.stopping kind=failed error=",
                '{"event":"control.result","effect_ms":null,"outcome":["a"]}',
                '{"event":"late_sdk_interrupt_answered"}',
                "worker.failed status=404",
            ]
        ),
        max_size=12,
    )
)
def test_any_log_text_gives_plain_facts(texts):
    lines = [ln for ln in (parse_line(t) for t in texts) if ln is not None]
    facts, _ = F.log_facts(lines, turn_id="turn_1")
    assert set(facts) == set(F.LOG_FACTS)
    assert all(isinstance(v, ALLOWED) for v in facts.values())
    assert facts["logs.lines"] == len(lines)
