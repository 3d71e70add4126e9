"""Tolerant parsing: unknown fields ignored, missing or mistyped optional fields are None (unknown)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.controlhost import EventPage, Receipt, Session, SessionPage, Turn
from bot.format import show

FULL = {
    "id": "ses_01J",
    "status": "failed",
    "admission_state": "recovery_required",
    "revision": 42,
    "resumable": False,
    "attention": {
        "code": "RESTORE_FAILED",
        "reason": "incompatible_checkpoint",
        "failures": 1,
        "retry_at": None,
    },
    "checkpoint": {"id": "ckpt_1", "committed_at": "2026-11-29T09:00:00Z", "covers_turn_id": "turn_1"},
    "execution": {"state": "gone", "confirmed_gone_at": "2026-11-29T09:30:00.500Z"},
    "queued_inputs": 2,
    "brand_new_field": {"nested": True},
}


def test_full_session_parses() -> None:
    s = Session.parse(FULL)
    assert (s.id, s.status, s.admission_state, s.revision, s.resumable) == (
        "ses_01J",
        "failed",
        "recovery_required",
        42,
        False,
    )
    assert s.attention is not None and s.attention.code == "RESTORE_FAILED"
    assert s.attention.failures == 1 and s.attention.retry_at is None
    assert s.checkpoint is not None and s.checkpoint.covers_turn_id == "turn_1"
    assert s.checkpoint.committed_at == datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    assert s.execution is not None and s.execution.state == "gone"
    assert s.queued_inputs == 2
    assert s.raw["brand_new_field"] == {"nested": True}


def test_minimal_session_is_unknown_not_a_crash() -> None:
    s = Session.parse({}, fallback_id="ses_x")
    assert s.id == "ses_x"
    assert s.status is None and s.revision is None and s.resumable is None
    assert s.attention is None and s.checkpoint is None and s.execution is None
    assert show(s.status) == "unknown" and show(s.resumable) == "unknown" and show(False) == "false"


@pytest.mark.parametrize("garbage", [None, [], "text", 7])
def test_non_object_answers_parse_to_unknowns(garbage: object) -> None:
    assert Session.parse(garbage, fallback_id="ses_1").status is None
    assert Turn.parse(garbage, fallback_id="turn_1").id == "turn_1"
    assert EventPage.parse(garbage).events == []
    assert SessionPage.parse(garbage).sessions == []
    assert Receipt.parse(garbage).id is None


def test_mistyped_fields_become_none() -> None:
    s = Session.parse(
        {
            "id": "s",
            "revision": "abc",
            "resumable": "yes",
            "attention": "RESTORE_FAILED",
            "execution": {"state": 5},
            "queued_inputs": True,
        }
    )
    assert s.revision is None and s.resumable is None and s.attention is None
    assert s.execution is not None and s.execution.state == "5"
    assert s.queued_inputs is None
    assert Session.parse({"revision": "43"}).revision == 43
    attention = Session.parse({"attention": {"retry_at": "not a time", "failures": 2.0}}).attention
    assert attention is not None and attention.retry_at is None and attention.retry_at_text == "not a time"
    assert attention.failures == 2


def test_turn_event_and_receipt() -> None:
    t = Turn.parse(
        {
            "id": "turn_9",
            "status": "outcome_unknown",
            "terminal_reason": "interrupt_unanswered",
            "control_id": "ctl_3",
            "started_at": "2026-11-29T10:00:00Z",
            "extra": 1,
        }
    )
    assert t.terminal_reason == "interrupt_unanswered" and t.ended_at is None
    page = EventPage.parse(
        {
            "events": [
                {
                    "seq": 7,
                    "type": "system",
                    "name": "checkpoint_restore_failed",
                    "reason": "incompatible_checkpoint",
                    "failures": 1,
                },
                "junk",
            ],
            "next": 8,
        }
    )
    assert len(page.events) == 1 and page.events[0].name == "checkpoint_restore_failed" and page.next == 8
    r = Receipt.parse(
        {
            "id": "rcpt_1",
            "decision": "abandon",
            "status": "accepted",
            "session": {"revision": 43, "status": "stopped", "admission_state": "open"},
            "result": {"resumable": False},
        },
        http_status=201,
        idempotency_key="k",
    )
    assert r.session is not None and r.session.revision == 43 and r.resumable is False
    assert (r.http_status, r.idempotency_key) == (201, "k")
    assert Receipt.parse({"id": "rcpt_2", "status": "accepted"}).resumable is None


def test_the_lenient_reading_lives_here_empty_text_boolean_text_and_a_null_retry_at() -> None:
    # Everything after the client reads typed fields, so these odd shapes are settled once, here.
    s = Session.parse({"id": "s", "status": "", "resumable": "TRUE", "execution": {"state": ""}})
    assert s.status is None and s.resumable is True
    assert s.execution is not None and s.execution.state is None
    assert Session.parse({"resumable": "false"}).resumable is False
    # R2.2: retry_at present and null (stopped) is not the same as a retry_at the API left out.
    null = Session.parse({"attention": {"code": "RESTORE_FAILED", "retry_at": None}}).attention
    missing = Session.parse({"attention": {"code": "RESTORE_FAILED"}}).attention
    assert null is not None and null.retry_at_null is True
    assert missing is not None and missing.retry_at_null is False
