"""Messages by weight: each reply leads with one line and a few facts; the full list is one click away.

Budgets: an approval request, an approval, a confirmation and a rejection each at most 12 lines, in
Slack (the real router behind the Bolt app over signed HTTP, the messages as the Slack stand-in holds
them) and in the console (the same router, rendered as the terminal shows it); diagnose at most 25
lines before details; a triage group at most 3 lines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.app.router import Router
from bot.console import render
from bot.messages import ListReporter, Message, Reply
from bot.settings import load_settings
from tests.fixtures.composing import default_router
from tests.fixtures.slack import Posted, SlackHarness

REPLY_BUDGET = 12
DIAGNOSE_BUDGET = 25
GROUP_BUDGET = 3


def slack_lines(message: Posted) -> int:
    """Lines a person reads in Slack: a header, a context or an actions row is one; a section its lines."""
    n = 0
    for block in message.blocks:
        kind = block.get("type")
        if kind == "section":
            text = (block.get("text") or {}).get("text", "")
            n += len(text.splitlines()) + len(block.get("fields") or [])
        elif kind in ("header", "context", "actions"):
            n += 1
    return n


def console_lines(reply: Reply, posted: list[Message]) -> int:
    return sum(len(render(m).splitlines()) for m in [*posted, *reply.messages])


def test_slack_request_approval_confirmation_and_rejection_fit_their_budget(slack_harness: Any, sandbox: Any) -> None:
    h: SlackHarness = slack_harness.real(sandbox)
    seen: dict[str, Posted] = {}

    def newest(after: set[str]) -> list[Posted]:
        return [m for ts, m in h.api.messages.items() if ts not in after]

    def step(text: str, user: str) -> list[Posted]:
        before = set(h.api.messages)
        before_updates = {ts: m.updates for ts, m in h.api.messages.items()}
        assert h.send.command(text, user=user).status_code == 200
        h.settle()
        changed = newest(before) + [m for ts, m in h.api.messages.items() if m.updates > before_updates.get(ts, 0)]
        for m in changed:
            seen[m.ts] = m
        return changed

    asked = step('decide ses_startup_stopped close --reason "repository is gone"', "UALICE")
    request = next(m for m in asked if any(a.startswith("rb:approve:") for a, _ in m.action_ids()))
    request_id = re.search(r"req_[A-Za-z0-9]+", request.all_text()).group(0)  # type: ignore[union-attr]
    assert any(a.startswith("rb:run:") and v == f"details {request_id}" for a, v in request.action_ids())
    approved = step(f"approve {request_id}", "UBOB")
    confirm = step('decide ses_stopped_no_checkpoint start_fresh --reason "repository is back"', "UALICE")
    confirm_id = re.search(r"req_[A-Za-z0-9]+", confirm[-1].all_text()).group(0)  # type: ignore[union-attr]
    confirmed = step(f"confirm {confirm_id}", "UALICE")
    asked2 = step('decide ses_restore_transient close --reason "store is gone for good"', "UALICE")
    other_id = re.search(r"req_[A-Za-z0-9]+", asked2[-1].all_text()).group(0)  # type: ignore[union-attr]
    rejected = step(f'reject {other_id} --reason "not yet"', "UBOB")
    for what, messages in [
        ("request", asked),
        ("approval", approved),
        ("confirmation request", confirm),
        ("confirmation", confirmed),
        ("rejection", rejected),
    ]:
        assert messages, what
        for m in messages:
            assert slack_lines(m) <= REPLY_BUDGET, (what, slack_lines(m), m.all_text())


@pytest.fixture
def router(sandbox: Any, tmp_path: Path) -> Router:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "budget.db"})
    made = default_router(settings, sandbox=sandbox, startup=False)
    assert isinstance(made, Router)
    return made


def _say(router: Router, text: str, actor: str = "U1") -> tuple[Reply, list[Message]]:
    reporter = ListReporter()
    reply = router.handle_text(text, actor=actor, channel="C1", reporter=reporter)
    return reply, reporter.posted


def test_console_request_approval_confirmation_and_rejection_fit_their_budget(router: Router) -> None:
    asked, posted = _say(router, 'decide ses_startup_stopped close --reason "repository is gone"')
    assert console_lines(asked, posted) <= REPLY_BUDGET
    request_id = next(m.ref for m in asked.messages if m.kind == "approval_request")
    approved, posted = _say(router, f"approve {request_id}", "U2")
    assert approved.ok and console_lines(approved, posted) <= REPLY_BUDGET
    confirm, posted = _say(router, 'decide ses_stopped_no_checkpoint start_fresh --reason "repository is back"')
    assert console_lines(confirm, posted) <= REPLY_BUDGET
    confirm_id = next(m.ref for m in confirm.messages if m.kind == "confirmation_request")
    confirmed, posted = _say(router, f"confirm {confirm_id}")
    assert confirmed.ok and console_lines(confirmed, posted) <= REPLY_BUDGET
    asked, _ = _say(router, 'decide ses_restore_transient close --reason "store is gone for good"')
    other_id = next(m.ref for m in asked.messages if m.kind == "approval_request")
    rejected, posted = _say(router, f'reject {other_id} --reason "not yet"', "U2")
    assert console_lines(rejected, posted) <= REPLY_BUDGET


@pytest.mark.parametrize(
    "session",
    [
        "ses_unknown_unanswered",
        "ses_unknown_ckpt_unavailable",
        "ses_restore_damaged",
        "ses_startup_stopped",
        "ses_restore_transient",
        "ses_incompatible",
    ],
)
def test_diagnose_fits_before_details_and_details_has_every_fact(router: Router, session: str) -> None:
    reply, posted = _say(router, f"diagnose {session}")
    diagnosis = next(m for m in reply.messages if m.kind == "diagnosis")
    shown = render(diagnosis).splitlines()
    assert len(shown) <= DIAGNOSE_BUDGET, "\n".join(shown)
    assert any(line.startswith("Valid now") for line in shown)  # what to do is never what is cut
    assert f"/recover details {session}" in "\n".join(shown)
    details, _ = _say(router, f"details {session}")
    full = "\n".join(m.plain_text() for m in details.messages)
    for name, value in diagnosis.facts:
        assert f"{name}: {value}" in full


def test_a_triage_group_is_at_most_three_lines(router: Router) -> None:
    reply, _ = _say(router, "triage")
    text = render(reply.messages[0]).splitlines()
    starts = [i for i, line in enumerate(text) if line.startswith("*t1.g")]
    assert len(starts) >= 3
    for i, start in enumerate(starts):
        end = (
            starts[i + 1]
            if i + 1 < len(starts)
            else next(j for j in range(start + 1, len(text)) if not text[j].startswith("    "))
        )
        assert end - start <= GROUP_BUDGET, text[start:end]


def _said(h: SlackHarness, responses_before: int, calls_before: int) -> list[dict[str, Any]]:
    """What the bot answered a person since then: response_url posts and ephemeral/posted messages."""
    out = [body for _, body in h.api.responses[responses_before:]]
    out += [c.params for c in h.api.calls[calls_before:] if c.method in ("chat.postEphemeral", "chat.postMessage")]
    return out


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = body.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def test_slack_details_is_one_click_and_a_typo_gets_the_corrected_command(slack_harness: Any, sandbox: Any) -> None:
    h: SlackHarness = slack_harness.real(sandbox)
    assert (
        h.send.command('decide ses_startup_stopped close --reason "repository is gone"', user="UALICE").status_code
        == 200
    )
    h.settle()
    request = next(m for m in h.api.messages.values() if any(a.startswith("rb:approve:") for a, _ in m.action_ids()))
    assert "attention.code" not in request.all_text()  # the fact list is not in the request
    marks = (len(h.api.responses), len(h.api.calls))
    h.send.click(request, "run", user="UBOB")  # its Details button
    h.settle()
    details = "\n".join(json.dumps(b) for b in _said(h, *marks))
    assert "Details of" in details and "attention.code: " in details
    marks = (len(h.api.responses), len(h.api.calls))
    assert h.send.command("diagnoes ses_healthy", user="UALICE").status_code == 200
    h.settle()
    typo = next(b for b in _said(h, *marks) if "Did you mean" in json.dumps(b))
    assert "/recover diagnose ses_healthy" in json.dumps(typo)
    assert slack_lines(Posted("C", "t", None, "", _blocks(typo))) <= 5


def test_console_batch_request_and_its_outcome_fit_the_budget(incident_sandbox: Any, tmp_path: Path) -> None:
    from tests.fixtures.triage import bulk_router, make_incident

    made = make_incident(incident_sandbox, {"startup_stopped": 30})["startup_stopped"]
    router = bulk_router(incident_sandbox, tmp_path)
    asked, posted = _say(router, f'batch decide --sessions {",".join(made)} close --reason "repository is gone"')
    assert console_lines(asked, posted) <= REPLY_BUDGET
    batch_id = next(m.ref for m in asked.messages if m.kind == "batch_request")
    done, posted = _say(router, f"approve {batch_id}", "U2")
    assert "30/30 accepted" in "\n".join(m.headline for m in done.messages)
    assert console_lines(done, []) <= REPLY_BUDGET  # (its progress updates replace one line in place)
