"""Warnings before sends, on every path (R2.3, R2.8, R2.11, R5.3, R5.4), through the router over HTTP.

A single retry_restore an incurable cause stands behind needs --cause-fixed exactly as a batch member
does; every consequence is shown before the send, and --yes confirms in the same reply only when
nothing but the standard question would be shown.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.decisions import reply_text, say


@pytest.fixture
def router(console_router: Any) -> Any:
    return console_router


def _decisions_sent(sandbox: Any, sid: str) -> list[dict]:
    return [
        r for r in sandbox.admin.requests(sid) if r["method"] == "POST" and r["path"].endswith("recovery-decisions")
    ]


@pytest.mark.parametrize("yes", [" --yes", ""])
@pytest.mark.parametrize("sid", ["ses_incompatible", "ses_restore_damaged"])
def test_retry_restore_on_an_incurable_cause_needs_cause_fixed(router, sandbox, sid, yes):
    reply = say(router, f'decide {sid} retry_restore --reason "try again"{yes}')
    assert not reply.ok
    assert f"`retry_restore` on `{sid}` needs --cause-fixed" in reply.messages[0].headline
    assert "Nothing was sent." in reply_text(reply)
    assert _decisions_sent(sandbox, sid) == []
    assert router.services.decisions.requests.find(session_id=sid) == []  # no request was made either


def test_incompatible_retry_with_cause_fixed_shows_the_warning_and_yes_does_not_send(router, sandbox):
    sid = "ses_incompatible"
    reply = say(router, f'decide {sid} retry_restore --cause-fixed "profile rolled back" --reason "retry" --yes')
    assert reply.ok, reply_text(reply)
    msg = reply.messages[0]
    text = msg.plain_text()
    assert msg.kind == "confirmation_request"
    assert "never succeeds on the same runtime/profile" in text
    assert "Cause fixed (the requester's words, R5.3): profile rolled back" in text
    assert "`--yes` did not send it" in text
    assert _decisions_sent(sandbox, sid) == []
    # The same line typed again does not send it either: the warning asks for the explicit confirmation.
    again = say(router, f'decide {sid} retry_restore --cause-fixed "profile rolled back" --reason "retry" --yes')
    assert _decisions_sent(sandbox, sid) == [], reply_text(again)
    assert f"/recover confirm {msg.ref}" in reply_text(again)  # it points to the request and how to confirm
    sent = say(router, f"confirm {msg.ref}")
    assert sent.ok, reply_text(sent)
    assert [r["status"] for r in _decisions_sent(sandbox, sid)] == [201]


def test_start_fresh_with_yes_shows_the_dropped_context_before_any_send(router, sandbox):
    sid = "ses_incompatible"
    reply = say(router, f'decide {sid} start_fresh --reason "drop it" --yes')
    assert reply.ok, reply_text(reply)
    text = reply.messages[0].plain_text()
    assert "This drops: the checkpoint's context" in text and "`--yes` did not send it" in text
    assert _decisions_sent(sandbox, sid) == []
    assert say(router, f"confirm {reply.messages[0].ref}").ok
    assert len(_decisions_sent(sandbox, sid)) == 1


def test_yes_still_sends_when_nothing_but_the_standard_question_would_be_shown(router, sandbox):
    # STARTUP_FAILED, no checkpoint: start_fresh drops nothing (R2.14).
    reply = say(router, 'decide ses_startup_stopped start_fresh --reason "credentials fixed" --yes')
    assert reply.ok, reply_text(reply)
    assert [r["status"] for r in _decisions_sent(sandbox, "ses_startup_stopped")] == [201]
    transient = say(router, 'decide ses_restore_transient retry_restore --reason "store back" --yes')
    assert transient.ok, reply_text(transient)
    assert len(_decisions_sent(sandbox, "ses_restore_transient")) == 1


def test_a_repeated_retry_is_warned_before_it_is_sent(router, sandbox):
    sid = "ses_restore_transient"
    assert say(router, f'decide {sid} retry_restore --reason "store back" --yes').ok
    for _ in range(3):  # the cause was not fixed: it stops again at the third failure
        sandbox.admin.fail_restore(sid, "restore_unavailable")
        sandbox.admin.advance(61)
        sandbox.admin.scheduler_pass()
    reply = say(router, f'decide {sid} retry_restore --reason "store back" --yes')
    text = reply_text(reply)
    assert "already executed 1 time(s)" in text and "R5.4" in text and "`--yes` did not send it" in text
    assert len(_decisions_sent(sandbox, sid)) == 1  # the first only
    dry = say(router, f'dryrun decide {sid} retry_restore --reason "store back"')
    assert "confirmed by button or /recover confirm (not --yes)" in reply_text(dry)


def test_the_one_incurable_check_lets_a_transient_reason_win_over_log_damage():
    """R2.6 vs R2.8, for decide and batch alike (bot.batch.plan.incurable calls the same function)."""
    from bot.batch.plan import Candidate, incurable
    from bot.decisions import incurable_cause

    outage = {"attention.reason": "restore_unavailable"}
    assert incurable_cause(outage, damage=True) is None
    assert incurable(Candidate("ses_x", 3, outage, damage=True)) is None
    damaged = {"attention.reason": "checkpoint_unavailable"}
    assert incurable_cause(damaged, damage=True) == (
        "permanent damage to the checkpoint: a restart does not cure it",
        "R2.8",
    )
    assert incurable_cause({"attention.reason": "incompatible_checkpoint"})[1] == "R2.3"
