"""Case states stay true: a repeated approval never re-opens a closed case, a mistyped session id opens
no case, and a batch's outcome closes or updates its members' cases.

The real router and core against the sandbox control host over HTTP, a real SQLite file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.messages import ListReporter, Reply
from bot.sandbox import SandboxHandle
from bot.settings import Settings
from tests.fixtures.composing import default_router
from tests.fixtures.triage import bulk_router, make_incident


@pytest.fixture
def router(sandbox: SandboxHandle, tmp_path: Path) -> Any:
    return default_router(Settings(db_path=tmp_path / "cases.db"), sandbox=sandbox, startup=False)


def _say(router: Any, text: str, actor: str = "U1") -> Reply:
    reply: Reply = router.handle_text(text, actor=actor, channel="C1", reporter=ListReporter())
    return reply


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def test_a_repeated_approval_of_an_executed_request_does_not_reopen_its_case(router: Any) -> None:
    store = router.services.store
    asked = _say(router, 'decide ses_startup_stopped close --reason "repository is gone"')
    request_id = next(m.ref for m in asked.messages if m.kind == "approval_request")
    done = _say(router, f"approve {request_id}", actor="U2")
    assert done.ok and store.get_open_case("ses_startup_stopped") is None, _text(done)
    again = _say(router, f"approve {request_id}", actor="U2")
    assert not again.ok and "already executed" in _text(again)
    assert store.get_open_case("ses_startup_stopped") is None  # the refusal is recorded, the case stays closed
    refusal = store.steps(session_id="ses_startup_stopped")[-1]
    assert refusal.step == "approve" and refusal.outcome != "executed"
    assert "ses_startup_stopped" not in _text(_say(router, "handoff"))


@pytest.mark.parametrize("command", ["take ses_nosuchthing", "note ses_nosuchthing the store team is on it"])
def test_take_or_note_on_a_session_the_control_host_does_not_know_opens_no_case(router: Any, command: str) -> None:
    store = router.services.store
    reply = _say(router, command)
    assert not reply.ok and "has no session `ses_nosuchthing`" in _text(reply) and "no case was opened" in _text(reply)
    assert store.get_open_case("ses_nosuchthing") is None
    assert "ses_nosuchthing" not in _text(_say(router, "handoff"))
    assert _say(router, "note ses_restore_transient the store team is on it").ok  # a known session still works


def test_a_close_batch_closes_its_members_cases_and_a_retry_batch_names_its_outcome(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    made = make_incident(incident_sandbox, {"startup_stopped": 2, "restore_stopped_transient": 2})
    router = bulk_router(incident_sandbox, tmp_path)
    store = router.services.store
    closing = made["startup_stopped"]
    asked = _say(router, f'batch decide --sessions {",".join(closing)} close --reason "repo gone"')
    batch_id = next(m.ref for m in asked.messages if m.kind == "batch_request")
    done = _say(router, f"approve {batch_id}", actor="U2")
    # Each member verified as a single close is: its session is closed, so its case closes (R5.1).
    assert "2/2 accepted" in _text(done) and f"Batch {batch_id}: `close` settled · 2/2 closed" in _text(done)
    assert all(store.get_open_case(sid) is None for sid in closing)
    retried = made["restore_stopped_transient"]
    asked = _say(router, f'batch decide --sessions {",".join(retried)} retry_restore --reason "store back" --yes')
    handoff = _text(_say(router, "handoff"))
    for sid in retried:  # accepted is not recovered (R5.1): open, and the hand-off says what happened
        assert store.get_open_case(sid) is not None
    assert "verifying after `retry_restore`" in handoff, handoff  # as a single decision's case says
    assert "under investigation" not in handoff and not any(sid in handoff for sid in closing)
