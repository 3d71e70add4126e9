"""Rendering a diagnosis: long timelines go to an attachment; source warnings; decision commands."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from bot.controlhost import Session, Turn
from bot.diagnosis import facts as F
from bot.diagnosis import wording
from bot.diagnosis.model import Diagnosis, Evidence, SourceStatus
from bot.logs import parse_line
from bot.runbook.evaluate import evaluate

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def stage_lines(turn: str = "turn_9"):
    stages = [
        ("control_received", 0, {}),
        ("sdk_interrupt_called", 2, {}),
        ("sdk_interrupt_answered", 40, {}),
        ("engine_terminal", 41, {}),
        ("capture_started", 42, {}),
        ("capture_finished", 900, {"outcome": "ok"}),
        ("finalize_started", 901, {}),
        ("finalize_started", 920, {"attempt": 2}),
        ("finalize_finished", 950, {"outcome": "failed", "reason": "CHECKPOINT_UNAVAILABLE"}),
    ]
    out = []
    for name, ms, extra in stages:
        out.append(
            parse_line(
                json.dumps(
                    {
                        "event": "worker.turn.interrupt.stage",
                        "session_id": "ses_1",
                        "turn_id": turn,
                        "control_id": "ctl_1",
                        "stage": name,
                        "elapsed_ms": ms,
                        **extra,
                    }
                )
            )
        )
    out.append(
        parse_line(
            json.dumps(
                {
                    "event": "late_sdk_interrupt_answered",
                    "session_id": "ses_1",
                    "turn_id": turn,
                    "control_id": "ctl_1",
                    "elapsed_ms": 6000,
                }
            )
        )
    )
    out.append(
        parse_line(
            f"control.result session_id=ses_1 turn_id={turn} control_id=ctl_1 operation=interrupt "
            "outcome=unknown reason_code=deadline_exceeded effect_ms=0 duration_ms=0"
        )
    )
    return out


def make(shipped_runbooks, sources=None) -> Diagnosis:
    facts = F.empty_facts("ses_1", NOW)
    facts.update(
        F.session_facts(
            Session.parse(
                {
                    "status": "failed",
                    "admission_state": "recovery_required",
                    "revision": 4,
                    "attention": {"code": "OUTCOME_UNKNOWN", "reason": "interrupt_checkpoint_unavailable"},
                    "checkpoint": {"id": "c1", "covers_turn_id": "turn_8"},
                    "execution": {"state": "gone"},
                }
            )
        )
    )
    facts.update(F.turn_facts(Turn.parse({"id": "turn_9", "terminal_reason": "interrupt_checkpoint_unavailable"})))
    log_facts, log_evidence = F.log_facts(stage_lines(), turn_id="turn_9")
    facts.update(log_facts)
    F.link_facts(facts)
    sources = sources or [SourceStatus(n, "ok") for n in F.SOURCES]
    for s in sources:
        facts[f"source.{s.name}"] = s.state
    evidence = Evidence(
        timeline=log_evidence.timeline, control_result=log_evidence.control_result, log_lines=log_evidence.notable
    )
    return Diagnosis("ses_1", facts, evaluate(shipped_runbooks, facts), sources, evidence, NOW)


def test_long_timeline_goes_to_an_attachment(shipped_runbooks):
    diagnosis = make(shipped_runbooks)
    (message,) = wording.render(diagnosis, shipped_runbooks)
    assert message.attachment is not None
    assert message.attachment.filename == "diagnose-ses_1-timeline.txt"
    text = message.attachment.text
    # All eight stages in R3.2 order, with elapsed_ms.
    order = [
        text.index(f"  {s}")
        for s in (
            "control_received",
            "sdk_interrupt_called",
            "sdk_interrupt_answered",
            "engine_terminal",
            "capture_started",
            "capture_finished",
            "finalize_started",
            "finalize_finished",
        )
    ]
    assert order == sorted(order)
    assert "missing stages" not in text
    assert "the API refused the manifest or its ref — not a capture timeout and not an S3 failure (R3.5)" in text
    assert "late_sdk_interrupt_answered at 6000 ms" in text
    assert "effect_ms=0" in text and "deadline" in text
    assert "Log lines:" in text
    assert any("see the attachment diagnose-ses_1-timeline.txt" in line for line in message.lines)
    assert not any(line.strip().startswith("950 ms") for line in message.lines)


def test_degraded_sources_are_named(shipped_runbooks):
    sources = [
        SourceStatus("session", "ok"),
        SourceStatus("turns", "ok"),
        SourceStatus("events", "slow", wording.source_slow(10.0), 10000),
        SourceStatus("logs", "unreachable", "No log file matches /x/*.log.", 3),
        SourceStatus("reconciler", "not_configured", wording.source_not_configured("reconciler")),
    ]
    (message,) = wording.render(make(shipped_runbooks, sources), shipped_runbooks)
    warnings = [line for line in message.lines if line.startswith("[!] Source")]
    assert warnings == [
        "[!] Source events was slow: no answer within the diagnose budget of 10 s; its facts are unknown",
        "[!] Source logs was unreachable: No log file matches /x/*.log.",
    ]
    assert message.level == "warn"


def test_source_error_text_is_redacted():
    from bot.errors import ControlHostError

    exc = ControlHostError("GET failed: Authorization: Bearer sekrit-token-123", code="UNREACHABLE")
    text = wording.source_error(exc)
    assert "sekrit" not in text and text.startswith("UNREACHABLE: ")
