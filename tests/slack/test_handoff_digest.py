"""The hand-off over signed Slack HTTP (the real Bolt app, the Web API stand-in, the sandbox control
host, a real SQLite file), asked in a channel of its own, not the one the cases began in:

- the answer there is the digest: a line per case that needs someone, its request's line with the
  verb that works, a permalink to the case's thread (chat.getPermalink); cases only counted by watch's
  storm are counted, not listed; nothing of it lands in the cases' own threads;
- an expired request is handed off once, with who asked, when it expired and how to ask again, and
  not again at the hand-off after that;
- past the listed entries (the console's text too) the digest ends with "… n more: `/recover cases`".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bot.messages import NullReporter
from bot.sandbox import SandboxHandle
from tests.fixtures.escalation import short_ladder_folder
from tests.fixtures.slack import PERMALINK_BASE, SlackHarness
from tests.fixtures.triage import clone

WATCH = "C0WATCH"  # where the cases began (watch posts them there)
ASKED = "C0HANDOFF"  # where the next shift asks
SID = "ses_hd_001"
LISTED = 20  # entries the digest lists one per line (bot/app/handoff.py LISTED)


def _runbooks(tmp_path: Path) -> Path:
    folder = short_ladder_folder(tmp_path)  # a two-person request expires 10 s after it is made
    rb = folder / "session-recovery.yaml"
    rb.write_text(rb.read_text().replace("storm_threshold: {count: 10,", "storm_threshold: {count: 2,"))
    return folder


def _ask(h: SlackHarness, user: str = "UBOB", command: str = "handoff") -> str:
    before = len(h.api.responses)
    assert h.send.command(command, user=user, channel=ASKED).status_code == 200
    h.settle()
    bodies = [body for _, body in h.api.responses[before:]]
    assert bodies, "the hand-off said nothing where it was asked"
    return "\n".join(json.dumps(b, ensure_ascii=False) for b in bodies)


def _watched_request(incident_sandbox: SandboxHandle, slack_harness: Any, tmp_path: Path) -> tuple[Any, Any, Any, Any]:
    """A stop watch posted in its channel, and a two-person ``close`` asked there (the case's thread)."""
    h: SlackHarness = slack_harness.real(
        incident_sandbox, watch_channel=WATCH, runbooks_dir=_runbooks(tmp_path), approvers=("UBOB",)
    )
    watcher = h.composed.watchers.get("default")
    runner = h.composed.ladders.get("default")
    assert watcher is not None and runner is not None
    incident_sandbox.admin.create_session(clone("healthy", SID))
    incident_sandbox.admin.stop(SID)
    watcher.poll_once()  # its case, posted in the watch channel
    (post,) = [p for p in h.api.roots(WATCH) if f"Stopped: {SID} " in p.text]
    assert (
        h.send.command(
            f'decide {SID} close --reason "the customer cancelled"', user="UALICE", channel=WATCH
        ).status_code
        == 200
    )
    h.settle()
    (request,) = [r for r in h.composed.core().decisions.requests.find(session_id=SID) if r.is_open]
    return h, (watcher, runner), post, request


def test_the_hand_off_is_a_digest_where_it_was_asked(
    incident_sandbox: SandboxHandle, slack_harness: Any, tmp_path: Path
) -> None:
    h, (watcher, _), post, request = _watched_request(incident_sandbox, slack_harness, tmp_path)
    storm = [f"ses_hd_s{i}" for i in range(3)]  # a burst: one triage message, three untouched cases
    for s in storm:
        incident_sandbox.admin.create_session(clone("healthy", s))
        incident_sandbox.admin.stop(s)
    watcher.poll_once()
    thread_before = len(h.api.thread(WATCH, post.ts))
    roots_before = len(h.api.roots())

    said = _ask(h)
    assert "Hand-off: 4 open case(s) at" in said and "1 need someone now" in said
    assert "Needs someone now:" in said and f"`{SID}`" in said
    # The request's line, with the verb that works for it (a second person approves a two-person request).
    assert f"`{request.id}` close on `{SID}`" in said and f"/recover approve {request.id}" in said
    link = f"{PERMALINK_BASE}/archives/{WATCH}/p{post.ts.replace('.', '')}"
    assert f"<{link}|thread>" in said  # the case's thread, linked through chat.getPermalink
    assert ("chat.getPermalink", WATCH, post.ts) in [
        (c.method, c.params.get("channel"), c.params.get("message_ts")) for c in h.api.calls
    ]
    assert "3 case(s) need no one now" in said and not any(f"`{s}`" in said for s in storm)  # counted only
    # The details stay in the case's thread: the hand-off posts nothing there, nor anywhere else.
    assert len(h.api.thread(WATCH, post.ts)) == thread_before and len(h.api.roots()) == roots_before


def test_an_expired_request_is_handed_off_once_with_who_asked_and_how_to_ask_again(
    incident_sandbox: SandboxHandle, slack_harness: Any, tmp_path: Path
) -> None:
    h, (_, runner), _, request = _watched_request(incident_sandbox, slack_harness, tmp_path)
    incident_sandbox.clock.advance(11)  # the request expires (announced in its thread)
    runner.run_due()
    runner.run_due()
    assert h.composed.core().decisions.requests.get(request.id).state == "expired"
    # `pending` lists open requests only; `pending --all` also the expired one, in the hand-off's words.
    assert f"`{request.id}`" not in _ask(h, command="pending")
    listed = _ask(h, command="pending --all")
    assert f"Expired: `{request.id}` close on `{SID}` · asked by <@UALICE>" in listed and "ask again" in listed
    said = _ask(h)
    expired = re.search(
        rf"Expired: `{request.id}` close on `{SID}` · asked by <@UALICE> · expired at "
        rf"{re.escape(request.expires_at)} \([^)]*\), nothing was sent · ask again: "
        rf"`/recover decide {SID} close --reason",
        said,
    )
    assert expired is not None, said
    again = _ask(h)  # the hand-off after the one that handed the expiry off
    assert f"Expired: `{request.id}`" not in again and f"`{SID}`" in again
    assert f"Expired: `{request.id}`" not in _ask(h, command="pending --all")  # handed off: no longer listed


def test_a_long_hand_off_ends_with_how_many_more_and_the_command_that_lists_them(
    incident_sandbox: SandboxHandle, slack_harness: Any
) -> None:
    h: SlackHarness = slack_harness.real(incident_sandbox)
    ids = [f"ses_hl_{i:03d}" for i in range(LISTED + 3)]
    for sid in ids:
        incident_sandbox.admin.create_session(clone("healthy", sid))
        assert h.send.command(f"note {sid} looked at it", user="UALICE", channel="C0CASES").status_code == 200
    h.settle()
    said = _ask(h)
    assert f"Hand-off: {len(ids)} open case(s)" in said and "… 3 more: `/recover cases`" in said
    assert sum(f"`{sid}`" in said for sid in ids) == LISTED
    # The console prints the same digest (the router's reply as text).
    text = h.bot.router.handle_text("/recover handoff", actor="UCAROL", channel=None, reporter=NullReporter())
    plain = "\n".join(m.plain_text() for m in text.messages)
    assert "… 3 more: `/recover cases`" in plain and sum(f"`{sid}`" in plain for sid in ids) == LISTED
