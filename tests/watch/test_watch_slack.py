"""``/recover watch`` over signed Slack HTTP (the real Bolt app, the Web API stand-in, the sandbox):
the state, pause --for and resume, each recorded as a step; /healthz says when the listing fails."""

from __future__ import annotations

import json
from typing import Any

from bot.sandbox import SandboxHandle
from bot.slack.watch_health import watch_health_lines
from tests.fixtures.triage import clone

CHANNEL = "C0WATCH"


def _said(h: Any, since: int) -> str:
    return "\n".join(json.dumps(body) for _, body in h.api.responses[since:])


def test_watch_state_pause_and_resume_over_slack(incident_sandbox: SandboxHandle, slack_harness: Any) -> None:
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL)
    # The watch channel's members, three pages of conversations.members: UBOB on the last one.
    h.api.channel_members[CHANNEL] = ["UALICE", *(f"UFILL{i:03d}" for i in range(420)), "UBOB"]
    watcher = h.composed.watchers.get("default")
    assert watcher is not None
    incident_sandbox.admin.create_session(clone("healthy", "ses_ws_001"))
    watcher.poll_once()

    before = len(h.api.responses)
    assert h.send.command("watch").status_code == 200
    h.settle()
    text = _said(h, before)
    assert "Watch is on" in text and "last poll" in text and "next poll" in text
    assert "listing cursor" in text and "end of the listing after 1 page(s)" in text

    # Not a member of the watch channel: refused in one line, nothing recorded, nothing paused.
    before = len(h.api.responses)
    h.send.command("watch pause --for 2h", user="UMALLORY")
    h.settle()
    refused = [body for _, body in h.api.responses[before:]]
    assert len(refused) == 1 and "is not one; nothing changed" in json.dumps(refused[0])
    assert "Only members of" in json.dumps(refused[0])
    assert not [s for s in watcher.store.steps() if s.step == "watch"]

    before = len(h.api.responses)
    h.send.command("watch pause --for 2h", user="UALICE")
    h.settle()
    assert "Watch paused until" in _said(h, before)
    incident_sandbox.admin.stop("ses_ws_001")
    watcher.poll_once()
    assert h.api.roots(CHANNEL) == []  # held while paused

    before = len(h.api.responses)
    h.send.command("watch", user="UBOB")
    h.settle()
    text = _said(h, before)
    assert "Watch is paused (until" in text and "by <@UALICE>" in text
    assert "1 stop(s) held, posted when it ends" in text and "held by the pause" in text

    before = len(h.api.responses)
    h.send.command("watch resume", user="UBOB")
    h.settle()
    assert "1 stop(s) held during the pause" in _said(h, before)
    steps = [(s.actor, s.outcome) for s in watcher.store.steps() if s.step == "watch"]
    assert steps == [("UALICE", "paused"), ("UBOB", "resumed")]
    assert len(h.api.calls_to("conversations.members")) >= 1 + 1 + 3  # UBOB is found on the third page

    # What the pause held is not lost: the next poll names it in one digest and posts the stuck session.
    watcher.poll_once()
    watcher.poll_once()  # and only once
    roots = [p.text for p in h.api.roots(CHANNEL)]
    digests = [t for t in roots if "Watch pause over" in t]
    assert len(digests) == 1 and "ses_ws_001" in digests[0] and "still stuck" in digests[0], roots
    assert len([t for t in roots if "Stopped: ses_ws_001 " in t]) == 1, roots

    before = len(h.api.responses)
    h.send.command("watch resume --for 2h")
    h.settle()
    assert "--for goes with pause" in _said(h, before)


def test_healthz_line_says_the_listing_fails_and_when_it_reads_again(
    incident_sandbox: SandboxHandle, slack_harness: Any
) -> None:
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL)
    watcher = h.composed.watchers.get("default")
    assert watcher is not None
    settings = h.bot.settings
    incident_sandbox.admin.fault("server_error", "/v1/sessions", method="GET", times=None, status=503)
    for _ in range(3):
        watcher.poll_once()
    (line,) = watch_health_lines(settings, watcher.store)
    assert "cannot read the session listing since" in line
    incident_sandbox.admin.clear_faults()
    watcher.poll_once()
    (line,) = watch_health_lines(settings, watcher.store)
    assert line.startswith("watch: on, last poll")


def test_watch_is_off_without_a_channel(incident_sandbox: SandboxHandle, slack_harness: Any) -> None:
    h = slack_harness.real(incident_sandbox)
    assert h.composed.watchers.get("default") is None
    before = len(h.api.responses)
    h.send.command("watch")
    h.settle()
    assert "RECOVER_WATCH_CHANNEL" in _said(h, before)
