"""The runbook's ``irreversible`` flag is said in every message that asks to approve or send such a
decision (R5.4): at the console and in Slack alike, on a repeated decide, and not for a reversible one."""

from __future__ import annotations

import re

from bot.console import DEMO_CONSOLE_USERS
from bot.messages import ListReporter
from bot.settings import load_settings
from tests.fixtures.composing import default_router
from tests.fixtures.slack import SlackHarness

SESSION = "ses_restore_transient"
IRREVERSIBLE = "[!] Irreversible: once the control host accepts `close`, it cannot be undone (R5.4)."
FORM = "application/x-www-form-urlencoded"


def test_console_decide_and_repeat_say_close_is_irreversible(sandbox, tmp_path) -> None:
    settings = load_settings({"RECOVER_CHANNELS": "console", "RECOVER_DB": str(tmp_path / "c.db")}, dotenv=None)
    router = default_router(settings, sandbox=sandbox, startup=False, console_users_map=DEMO_CONSOLE_USERS)

    def decide(decision: str) -> str:
        reply = router.handle_text(
            f'decide {SESSION} {decision} --reason "store gone"',
            actor="console:alice",
            channel="console",
            reporter=ListReporter(),
        )
        assert reply.ok, reply.messages[0].plain_text()
        return "\n".join(m.plain_text() for m in reply.messages)

    first = decide("close")
    assert "Approval needed: `close`" in first and IRREVERSIBLE in first
    assert first.count("cannot be undone") == 1, first  # said once, not again in the runbook's own words
    again = decide("close")  # the same request again: the pointer with its Approve button says it too
    assert "Already requested" in again and IRREVERSIBLE in again
    # retry_restore is reversible in the runbook: its confirmation has no such line.
    retry = decide("retry_restore")
    assert "Confirm `retry_restore`" in retry and "Irreversible" not in retry


def test_slack_approval_request_says_close_is_irreversible(slack_harness, sandbox, tmp_path) -> None:
    h: SlackHarness = slack_harness.real(sandbox, db_path=tmp_path / "irr.db")
    body = h.send.command_body(f"decide {SESSION} close --reason gone", user="UALICE")
    assert h.send.post(body, content_type=FORM).status_code == 200
    h.settle()
    posted = [m for root in h.api.roots("CINC") for m in h.api.thread("CINC", root.ts)]
    approvals = [m for m in posted if any(a.startswith("rb:approve:") for a, _ in m.action_ids())]
    assert len(approvals) == 1, [m.all_text() for m in posted]
    text = approvals[0].all_text()
    assert re.search(r"Irreversible: once the control host accepts `?close`?, it cannot be undone \(R5\.4\)", text), (
        text
    )
    assert "close cannot be undone" not in text  # the flag's line only, not the runbook's words again
