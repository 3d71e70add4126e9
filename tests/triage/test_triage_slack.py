"""Triage through the real Slack app: one progress message updated in place, at most every 2 s; a 429
from Slack slows the updates, never the work, and the progress line says so.

Real parts: the Bolt app over HTTP with signed requests, the Slack Web API stand-in (answering 429),
the sandbox control host over HTTP with a latency fault.
"""

from __future__ import annotations

from typing import Any

from bot.sandbox import SandboxHandle
from tests.fixtures.triage import make_incident


def test_triage_progress_updates_in_place_and_a_429_slows_only_the_updates(
    incident_sandbox: SandboxHandle, slack_harness: Any
) -> None:
    make_incident(incident_sandbox, {"startup_stopped": 40})
    incident_sandbox.admin.fault("latency", path="/v1/sessions/*/events", seconds=1.0, times=None)
    h = slack_harness.real(incident_sandbox)
    h.api.rate_limit("chat.update", times=1, retry_after=3)
    r = h.send.command("triage")
    assert r.status_code == 200
    h.settle(120)
    updates = h.api.calls_to("chat.update")
    posts = [c for c in h.api.calls_to("chat.postMessage") if "Triage t1" in str(c.params.get("text", ""))]
    assert len(posts) == 1, "one progress message, posted once"
    assert updates and all(u.params["ts"] == updates[0].params["ts"] for u in updates)
    gaps = [b.at - a.at for a, b in zip(updates, updates[1:], strict=False)]
    # At most one update every 2 s (the final answer may follow the last progress at once).
    assert all(g >= 1.9 for g in gaps[:-1]), gaps
    final = str(updates[-1].params.get("text", "")) + str(updates[-1].params.get("blocks", ""))
    assert "40 session(s) need an operator" in final and "complete" in final
    assert "Slack rate-limited the updates (429)" in final
