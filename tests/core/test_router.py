"""The router: one entry point for text and buttons, so no front end can skip a rule.

Runs the real core against the sandbox control host over HTTP; nothing of ours is mocked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.app.router import Router
from bot.messages import ListReporter, Message, Reply
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import load_settings
from tests.fixtures.composing import default_router

SESSION = "ses_unknown_ckpt_unavailable"
TURN = "turn_uc3"


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox() as handle:
        yield handle


def _router(sbx: SandboxHandle, tmp_path: Path, **overrides: object) -> Router:
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db", **overrides})
    router = default_router(settings, sandbox=sbx)
    assert isinstance(router, Router)
    return router


def _request_id(reply: Reply) -> str:
    for message in reply.messages:
        if message.kind == "approval_request" and message.ref:
            return message.ref
    raise AssertionError(f"no approval request in {[m.headline for m in reply.messages]}")


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def _abandon(router: Router, actor: str = "alice", channel: str | None = "C1") -> str:
    reply = router.handle_text(
        f'/recover decide {SESSION} abandon --turn {TURN} --effects "wrote nothing outside" '
        '--reason "engine stopped, no checkpoint"',
        actor=actor,
        channel=channel,
        reporter=ListReporter(),
    )
    assert reply.ok, _text(reply)
    return _request_id(reply)


def test_self_approval_refused_by_text_and_by_button(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    request_id = _abandon(router)
    # R3.9-R3.11: abandon never runs on the requester's word alone, whichever path the approval takes.
    by_text = router.handle_text(f"/recover approve {request_id}", actor="alice", channel="C1", reporter=ListReporter())
    by_button = router.handle_action("approve", request_id, actor="alice", channel="C1", reporter=ListReporter())
    assert not by_text.ok and not by_button.ok
    assert "own" in _text(by_text).lower() and "own" in _text(by_button).lower()
    assert sbx.admin.effect_count(SESSION) == 0

    approved = router.handle_action("approve", request_id, actor="bob", channel="C1", reporter=ListReporter())
    assert approved.ok, _text(approved)
    assert sbx.admin.effect_count(SESSION) == 1
    # A double click (or the same approval typed) never executes twice.
    again = router.handle_text(f"/recover approve {request_id}", actor="bob", channel="C1", reporter=ListReporter())
    assert not again.ok
    assert sbx.admin.effect_count(SESSION) == 1


def test_channel_restriction_applies_to_text_and_buttons(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path, channels=("C0INCIDENT",))
    refused = router.handle_text(
        f'/recover decide {SESSION} close --reason "end it"', actor="alice", channel="C0OTHER", reporter=ListReporter()
    )
    assert not refused.ok and "RECOVER_CHANNELS" in _text(refused)
    request_id = _abandon(router, channel="C0INCIDENT")
    for reply in (
        router.handle_text(f"/recover approve {request_id}", actor="bob", channel="C0OTHER", reporter=ListReporter()),
        router.handle_action("approve", request_id, actor="bob", channel="C0OTHER", reporter=ListReporter()),
    ):
        assert not reply.ok
    assert sbx.admin.effect_count(SESSION) == 0
    # Reading commands work anywhere (docs/commands.md).
    assert router.handle_text("/recover cases", actor="bob", channel="C0OTHER", reporter=ListReporter()).ok


def test_bad_input_gets_usage_never_a_traceback(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    for text in ("/recover frobnicate", "/recover diagnose", "/recover diagnose ../../etc/passwd", "/recover decide"):
        reply = router.handle_text(text, actor="alice", channel=None, reporter=ListReporter())
        assert not reply.ok
        assert "Traceback" not in _text(reply)
    unknown = router.handle_action("explode", "x", actor="alice", channel=None, reporter=ListReporter())
    assert not unknown.ok and "Unknown button action" in _text(unknown)
    bad_id = router.handle_action("approve", "req/../x", actor="bob", channel=None, reporter=ListReporter())
    assert not bad_id.ok and "Not a valid request id" in _text(bad_id)


def test_docker_commands_without_docker_are_clear(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    reply = router.handle_text("/recover dryrun", actor="alice", channel=None, reporter=ListReporter())
    assert not reply.ok
    assert "RECOVER_INSTALLATION" in _text(reply)


def test_text_kind_command_from_the_isolation_runbook(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    reply = router.handle_text("/recover upgrade-order", actor="alice", channel=None, reporter=ListReporter())
    assert reply.ok
    text = _text(reply)
    assert "API_IMAGE" in text and "WORKER_IMAGE" in text and "R2.17" in text
    assert text.index("API_IMAGE") < text.index("WORKER_IMAGE")  # R2.17 deploy order


def test_session_of_threads_approvals_with_their_session(sbx: SandboxHandle, tmp_path: Path) -> None:
    router = _router(sbx, tmp_path)
    request_id = _abandon(router)
    assert router.session_of(f"/recover approve {request_id}") == SESSION
    assert router.session_of(f"/recover diagnose {SESSION}") == SESSION
    assert router.session_of("/recover handoff") is None
    pending: list[Message] = router.pending_approvals_view()
    assert [m.ref for m in pending] == [request_id]


def test_the_bot_keys_its_chain_with_the_configured_audit_key(sbx: SandboxHandle, tmp_path: Path) -> None:
    """RECOVER_AUDIT_KEY reaches the store: the two-person flow writes keyed steps that verify only with it."""
    from pydantic import SecretStr

    from bot.store.audit import verify

    router = _router(sbx, tmp_path, audit_key=SecretStr("the-audit-key"))
    rid = _abandon(router)
    reply = router.handle_text(f"/recover approve {rid}", actor="bob", channel="C1", reporter=ListReporter())
    assert reply.ok, _text(reply)
    report = verify(tmp_path / "recover.db", key=b"the-audit-key")
    assert report.ok and report.keyed_steps == report.steps > 0, report.summary()
    assert not verify(tmp_path / "recover.db", key=b"another-key").ok
