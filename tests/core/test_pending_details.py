"""``pending`` (what waits, who may act now) and ``details`` (everything the short reply left out).

The real router and core against the sandbox control host over HTTP, a real SQLite file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.router import Router
from bot.messages import ListReporter, Reply, brief
from bot.sandbox import SandboxHandle
from bot.settings import load_settings
from tests.fixtures.composing import default_router

SESSION = "ses_unknown_ckpt_unavailable"
TURN = "turn_uc3"
FRESH = "ses_stopped_no_checkpoint"


@pytest.fixture
def sbx(sandbox: SandboxHandle) -> SandboxHandle:
    return sandbox  # the builtin scenarios (tests/fixtures/sandbox.py)


def _router(sbx: SandboxHandle, tmp_path: Path) -> Router:
    settings = load_settings({}, dotenv=None).model_copy(
        update={"db_path": tmp_path / "recover.db", "approvers": ("U2", "U3")}
    )
    router = default_router(settings, sandbox=sbx)
    assert isinstance(router, Router)
    return router


def _run(router: Router, line: str, actor: str = "U1") -> Reply:
    return router.handle_text(line, actor=actor, channel="C1", reporter=ListReporter())


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def _ref(reply: Reply, kind: str) -> str:
    return next(m.ref for m in reply.messages if m.kind == kind and m.ref)


def test_pending_lists_each_open_request_with_who_may_act_now(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    assert "Nothing is pending" in _text(_run(router, "pending"))
    two = _ref(
        _run(router, f'decide {SESSION} abandon --turn {TURN} --effects "none" --reason "checked"'), "approval_request"
    )
    one = _ref(_run(router, f'decide {FRESH} start_fresh --reason "repo back"'), "confirmation_request")
    lines = _run(router, "/recover pending").messages[0].plain_text().splitlines()
    assert lines[0] == "Pending: 2 request(s)"
    by_id = {line.split("`")[1]: line for line in lines[1:]}
    assert f"abandon on `{SESSION}`" in by_id[two] and "by @U1" in by_id[two]
    assert "ago" in by_id[two] and "expires in 30m" in by_id[two]
    # who may approve now, as text (a live line never notifies anyone), and the ladder's next step
    assert "may approve now: U2, U3 (not U1)" in by_id[two] and f"`/recover approve {two}`" in by_id[two]
    assert "next escalation: remind in 10m" in by_id[two]
    assert "break-glass: in 20m, if still unapproved" in by_id[two]  # the ladder's end (the widen step)
    assert f"start_fresh on `{FRESH}`" in by_id[one] and "now: @U1 confirms" in by_id[one]
    assert f"`/recover confirm {one}`" in by_id[one]
    _run(router, f"reject {two}", actor="U2")
    assert two not in _text(_run(router, "pending"))


def test_a_request_shows_its_facts_only_in_details(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    reply = _run(router, f'decide {SESSION} abandon --turn {TURN} --effects "none" --reason "checked"')
    request = next(m for m in reply.messages if m.kind == "approval_request")
    shown = brief(request)
    assert request.facts and not shown.facts
    details_button = next(b for b in shown.buttons if b.label == "Details")
    assert details_button.command == f"/recover details {request.ref}"
    full = _text(_run(router, f"details {request.ref}"))
    for name, value in request.facts:
        assert f"{name}: {value}" in full
    clicked = router.handle_action(
        details_button.action, details_button.value, actor="U2", channel="C1", reporter=ListReporter()
    )
    assert _text(clicked) == full


def test_details_reads_the_stores_when_this_process_did_not_give_the_reply(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    request_id = _ref(
        _run(router, f'decide {SESSION} abandon --turn {TURN} --effects "none" --reason "x"'), "approval_request"
    )
    _run(router, f"diagnose {FRESH}")
    other = _router(sbx, tmp_path)  # a second process on the same store: nothing kept in memory
    req = _text(_run(other, f"details {request_id}"))
    assert f"Details of request {request_id}" in req and "attention.code:" in req and "Content hash:" in req
    ses = _text(_run(other, f"details {FRESH}"))
    assert "its last diagnosis" in ses and "session.status:" in ses
    missing = _run(other, "details req_nothing")
    assert not missing.ok and "/recover pending" in _text(missing)
