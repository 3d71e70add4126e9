"""Cases close when nobody is needed: a diagnosis that finds the session healthy or closed, a verification
(R5.1), or `/recover done` by hand (which sends nothing). The hand-off lists only cases that need someone."""

from __future__ import annotations

from typing import Any

import pytest

from bot.messages import ListReporter
from bot.settings import Settings
from tests.fixtures.composing import default_router

ME = "console:alice"


@pytest.fixture
def router(sandbox, tmp_path) -> Any:
    # alice is mapped: a two-person request from an unmapped login is refused (docs/commands.md)
    settings = Settings(db_path=tmp_path / "cases.db", console_users={"alice": "UALICE0001"})
    return default_router(settings, sandbox=sandbox, startup=False)


def _say(router: Any, text: str) -> Any:
    return router.handle_text(text, actor=ME, channel="console", reporter=ListReporter())


def _posts(sandbox: Any) -> list[dict]:
    return [r for r in sandbox.admin.requests() if r.get("method") == "POST"]


def test_a_diagnosis_that_finds_the_session_healthy_closes_its_case(router, sandbox):
    store = router.services.store
    assert _say(router, "note ses_healthy users say it is slow").ok
    assert store.get_open_case("ses_healthy") is not None
    reply = _say(router, "diagnose ses_healthy")
    assert reply.ok and any("Case of `ses_healthy` closed" in m.headline for m in reply.messages)
    assert store.get_open_case("ses_healthy") is None
    closing = [s for s in store.steps(session_id="ses_healthy") if s.step == "case_closed"]
    assert len(closing) == 1 and closing[0].actor == ME and "diagnosis" in closing[0].inputs["reason"]
    # A second look at a healthy session opens no case that would then sit in everyone's list.
    _say(router, "diagnose ses_healthy")
    assert "ses_healthy" not in str(_say(router, "handoff").messages[0].plain_text())


def test_a_diagnosis_of_a_stuck_session_keeps_its_case_and_an_unknown_session_opens_none(router):
    store = router.services.store
    _say(router, "diagnose ses_restore_transient")
    assert store.get_open_case("ses_restore_transient") is not None
    _say(router, "diagnose ses_nosuchthing")
    assert store.get_open_case("ses_nosuchthing") is None


def test_done_closes_the_case_with_a_step_and_sends_nothing(router, sandbox):
    store = router.services.store
    _say(router, "diagnose ses_restore_transient")
    before = len(sandbox.admin.requests())
    reply = _say(router, 'done ses_restore_transient --reason "store team took it over"')
    assert reply.ok and "not `close`" in reply.messages[0].plain_text()
    assert store.get_open_case("ses_restore_transient") is None
    closing = [s for s in store.steps(session_id="ses_restore_transient") if s.step == "case_closed"]
    assert closing[-1].inputs["reason"] == "done: store team took it over" and closing[-1].actor == ME
    assert len(sandbox.admin.requests()) == before and _posts(sandbox) == []
    handoff = _say(router, "handoff")
    assert "0 open case(s)" in handoff.messages[0].headline
    again = _say(router, "done ses_restore_transient")
    assert not again.ok and "no open case" in again.messages[0].headline


def test_done_refuses_while_a_request_is_open(router, sandbox):
    made = _say(router, 'decide ses_restore_transient close --reason "store gone"')
    rid = made.messages[0].ref
    reply = _say(router, "done ses_restore_transient")
    assert not reply.ok and rid in reply.messages[0].headline
    assert f"/recover withdraw {rid}" in reply.messages[0].plain_text()
    assert router.services.store.get_open_case("ses_restore_transient") is not None
    withdrawn = _say(router, f"withdraw {rid}")
    assert withdrawn.ok and "nothing was sent and it never will be" in withdrawn.messages[0].plain_text()
    assert _say(router, "done ses_restore_transient").ok
    assert _posts(sandbox) == []
