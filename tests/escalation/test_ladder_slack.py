"""The ladder end to end over signed Slack HTTP (the real Bolt app, the Web API stand-in, the sandbox
control host, a real SQLite file) on a shortened ladder and the sandbox's simulated clock:
thread reminder → mention → widen → announced expiry, the live line, and a widened approver's
approval sent through the gate."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from bot.escalation.text import key_line
from bot.messages import Message
from bot.slack.ladder import UNREADABLE_WAIT, SlackLadderPoster
from tests.fixtures.escalation import BACKUP, TIER2, short_ladder_folder
from tests.fixtures.slack import SlackHarness

SESSION = "ses_restore_transient"


def _request(h: SlackHarness) -> tuple[Any, Any, str]:
    (root,) = h.api.roots("CINC")
    request = next(
        m for m in h.api.thread("CINC", root.ts) if any(a.startswith("rb:approve:") for a, _ in m.action_ids())
    )
    found = re.search(r"req_[A-Za-z0-9]+", request.all_text())
    assert found is not None
    return root, request, found.group(0)


def _close_asked(slack_harness: Any, sandbox: Any, tmp_path: Path) -> tuple[SlackHarness, Any]:
    """The shortened ladder over Slack, and alice's two-person close asked (its approval request posted)."""
    h: SlackHarness = slack_harness.real(sandbox, runbooks_dir=short_ladder_folder(tmp_path), approvers=("UBOB",))
    runner = h.composed.ladders.get("default")
    assert runner is not None
    assert h.send.command(f'decide {SESSION} close --reason "end it"', user="UALICE").status_code == 200
    h.settle()
    return h, runner


def _new(h: SlackHarness, root: Any, seen: int) -> list[Any]:
    return h.api.thread("CINC", root.ts)[seen:]


def test_reminder_mention_widen_and_the_announced_expiry_over_slack(
    slack_harness: Any, sandbox: Any, tmp_path: Path
) -> None:
    h, runner = _close_asked(slack_harness, sandbox, tmp_path)
    root, request, rid = _request(h)
    seen = len(h.api.thread("CINC", root.ts))

    sandbox.clock.advance(2)
    runner.run_due()
    (remind,) = _new(h, root, seen)
    assert "Reminder" in remind.all_text() and "<@" not in remind.all_text() and "subteam" not in remind.all_text()
    assert remind.thread_ts == root.ts  # a new message in the request's thread
    # Its key (how a runner taking over a dead owner's claim finds it) is in the text Slack searches,
    # never in the blocks people read.
    assert key_line(rid, 0) in remind.text and not any("ladder step" in t for t in remind.block_texts())
    live = h.api.messages[request.ts]
    assert live.updates >= 1 and "expires in" in live.all_text() and "may approve now: UBOB" in live.all_text()

    sandbox.clock.advance(2)
    runner.run_due()
    (mention,) = _new(h, root, seen + 1)
    assert "<@UBOB>" in mention.all_text()

    sandbox.clock.advance(2)
    runner.run_due()
    (widen,) = _new(h, root, seen + 2)
    assert f"<!subteam^{TIER2}>" in widen.all_text() and f"<@{BACKUP}>" in widen.all_text()

    sandbox.clock.advance(4)
    runner.run_due()
    runner.run_due()
    (expired,) = _new(h, root, seen + 3)
    assert "Expired" in expired.all_text() and rid in expired.all_text()
    steps = [s.step for s in h.composed.core().store.steps(session_id=SESSION) if s.step.startswith("escalation_")]
    assert steps == ["escalation_reminded", "escalation_mentioned", "escalation_widened", "escalation_expired"]

    h.send.command("handoff", user="UBOB")
    h.settle()
    # The digest answers where it was asked (the command's response_url, in the channel).
    said = "\n".join(json.dumps(body) for _, body in h.api.responses)
    assert re.search(rf"Expired: `{rid}`", said), said[-3000:]


def test_a_widened_group_member_approves_over_slack_and_it_is_sent(
    slack_harness: Any, sandbox: Any, tmp_path: Path
) -> None:
    h: SlackHarness = slack_harness.real(sandbox, runbooks_dir=short_ladder_folder(tmp_path), approvers=("UBOB",))
    h.api.groups[TIER2] = ["UCAROL"]
    runner = h.composed.ladders.get("default")
    assert runner is not None
    h.send.command(f'decide {SESSION} close --reason "end it"', user="UALICE")
    h.settle()
    _root, _request_msg, rid = _request(h)
    h.send.command(f"approve {rid}", user="UCAROL")  # before the widening: refused
    h.settle()
    assert h.composed.core().decisions.requests.get(rid).state == "requested"
    sandbox.clock.advance(6)
    runner.run_due()
    h.send.command(f"approve {rid}", user="UCAROL")
    h.settle()
    assert h.composed.core().decisions.requests.get(rid).state == "executed"
    assert [r for r in sandbox.admin.requests(SESSION) if "decision" in str(r.get("path", ""))]


def test_remind_by_the_requester_runs_the_next_step_once_per_interval_and_nobody_else_may(
    slack_harness: Any, sandbox: Any, tmp_path: Path
) -> None:
    h: SlackHarness = slack_harness.real(sandbox, runbooks_dir=short_ladder_folder(tmp_path), approvers=("UBOB",))
    runner = h.composed.ladders.get("default")
    assert runner is not None
    h.send.command(f'decide {SESSION} close --reason "end it"', user="UALICE")
    h.settle()
    root, _request_msg, rid = _request(h)
    seen = len(h.api.thread("CINC", root.ts))

    before = len(h.api.responses)
    h.send.command(f"remind {rid}", user="UBOB")  # not the requester
    h.settle()
    said = "\n".join(json.dumps(b) for _, b in h.api.responses[before:])
    assert "only" in said and "reminds about request" in said
    assert not [m for m in _new(h, root, seen) if "Reminder" in m.all_text()]

    h.send.command(f"remind {rid}", user="UALICE")  # the ladder's first step (a reminder), now
    h.settle()
    reminders = [m for m in _new(h, root, seen) if m.all_text().startswith("Reminder") or "Reminder:" in m.all_text()]
    assert len(reminders) == 1 and "<@" not in reminders[0].all_text()

    before = len(h.api.responses)
    h.send.command(f"remind {rid}", user="UALICE")  # within remind_interval (3s): refused, time left said
    h.settle()
    said = "\n".join(json.dumps(b) for _, b in h.api.responses[before:])
    assert "the next one is allowed in 3s" in said

    sandbox.clock.advance(3)
    h.send.command(f"remind {rid}", user="UALICE")  # the mention, ahead of its time
    h.settle()
    assert any("<@UBOB>" in m.all_text() for m in _new(h, root, seen))
    runner.run_due()  # their times came: neither step is said again
    texts = [m.all_text() for m in _new(h, root, seen)]
    assert sum("Reminder:" in t for t in texts) == 1 and sum("Approval still needed" in t for t in texts) == 1

    before = len(h.api.responses)
    h.send.command("pending", user="UBOB")
    h.settle()
    said = "\n".join(json.dumps(b) for _, b in h.api.responses[before:])
    assert "may approve now: UBOB" in said and "next escalation: widen in 3s" in said and "expires in 7s" in said
    assert "break-glass: in 3s, if still unapproved" in said  # the window opens at the ladder's end

    sandbox.clock.advance(3)
    before = len(h.api.responses)
    h.send.command("pending", user="UBOB")
    h.settle()
    said = "\n".join(json.dumps(b) for _, b in h.api.responses[before:])
    assert "break-glass: possible now for UALICE, because the escalation ladder ran to its end" in said
    assert f"break-glass {rid}" in said


def test_a_429_on_the_live_line_delays_that_edit_only(slack_harness: Any, sandbox: Any, tmp_path: Path) -> None:
    h: SlackHarness = slack_harness.real(sandbox, runbooks_dir=short_ladder_folder(tmp_path), approvers=("UBOB",))
    runner = h.composed.ladders.get("default")
    assert runner is not None
    h.send.command(f'decide {SESSION} close --reason "end it"', user="UALICE")
    h.settle()
    _root, request, rid = _request(h)
    h.api.rate_limit("chat.update", times=1, retry_after=30)
    started = time.monotonic()
    done = runner.run_due()
    assert time.monotonic() - started < 5  # no Retry-After sleep on the runner's thread
    assert done.edited == [] and h.api.messages[request.ts].updates == 0
    sandbox.clock.advance(4)  # past live_update (2s), within the Retry-After (30s)
    done = runner.run_due()
    assert done.edited == [] and len(done.posted) == 2  # the steps were not slowed
    h.send.command(f"approve {rid}", user="UBOB")  # nor the decision
    h.settle()
    assert h.composed.core().decisions.requests.get(rid).state == "executed"


def test_the_live_lines_429_reads_retry_after_as_seconds_an_http_date_or_not_at_all(
    slack_harness: Any, sandbox: Any, tmp_path: Path
) -> None:
    """The ladder's own client reads Slack's Retry-After with the control-host client's parser."""
    h: SlackHarness = slack_harness.real(sandbox, runbooks_dir=short_ladder_folder(tmp_path), approvers=("UBOB",))
    poster = SlackLadderPoster.beside(h.bot.out, h.bot.state)
    ts = poster.post("CINC", Message(headline="Approval still needed"), None)
    assert ts is not None
    edited = Message(headline="Approval still needed (edited)")
    h.api.rate_limit("chat.update", times=1, retry_after=7)
    assert poster.update("CINC", ts, edited) == 7.0
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=40), usegmt=True)  # an HTTP date
    h.api.rate_limit("chat.update", times=1, retry_after=when)
    wait = poster.update("CINC", ts, edited)
    assert wait is not None and 30 <= wait <= 40
    h.api.rate_limit("chat.update", times=1, retry_after="soon, maybe")  # garbage: the fallback wait
    assert poster.update("CINC", ts, edited) == UNREADABLE_WAIT
    assert poster.update("CINC", ts, edited) is None  # no 429 left: edited
    assert h.api.messages[ts].updates == 1


def _approve_confirm(message: Any) -> Any:
    for b in message.blocks:
        for e in b.get("elements", []) if b.get("type") == "actions" else []:
            if str(e.get("action_id", "")).startswith("rb:approve:"):
                return e.get("confirm")
    raise AssertionError("no approve button")


def test_the_live_line_keeps_an_irreversible_approves_confirm_dialog(
    slack_harness: Any, sandbox: Any, tmp_path: Path
) -> None:
    """R5.4: the ladder edits its live line into the approval request as first shown; the Approve of an
    irreversible close keeps the dialog that asks before the click acts (it was lost with the kept copy)."""
    h, runner = _close_asked(slack_harness, sandbox, tmp_path)
    _, request, _ = _request(h)
    asked = _approve_confirm(request)
    assert asked, "the approval request's Approve asks first"
    sandbox.clock.advance(2)
    runner.run_due()
    live = h.api.messages[request.ts]
    assert live.updates >= 1 and "expires in" in live.all_text()
    assert _approve_confirm(live) == asked
