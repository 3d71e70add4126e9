"""No silent side effects: withdraw, Ctrl-C during a wait (R4.2, R3.9), uncertain sends kept with their key,
unfinished requests named at start, and a restart that never replays what was withdrawn.

Ctrl-C is a real KeyboardInterrupt raised where the console would get it: in the bot's sleep between two
tries (a clock hook), or while a POST is on the wire (an httpx transport that forwards to the sandbox and
is interrupted before the answer is read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from bot.clock import ManualClock
from bot.errors import Interrupted
from bot.messages import ListReporter
from tests.fixtures.decisions import APPROVER, CHANNEL, OUTSIDER, REQUESTER


class HookClock(ManualClock):
    """A manual clock that runs ``hook(seconds)`` on every sleep (where Ctrl-C lands in a wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[float], None] | None = None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.hook is not None:
            self.hook(seconds)


def _ctrl_c_on_backoff(clock: HookClock) -> None:
    def hook(seconds: float) -> None:
        if seconds >= 1:  # the R4.2 / R3.9 backoff, not the client's sub-second retry
            raise KeyboardInterrupt

    clock.hook = hook


def _steps(env: Any, sid: str) -> list[tuple[str, str]]:
    return [(s.step, s.outcome) for s in env.store.steps(session_id=sid)]


def _close(env: Any, svc: Any, sid: str, actor: str = REQUESTER) -> str:
    reply = svc.decide(actor, CHANNEL, sid, "close", reason="store gone for good", reporter=ListReporter())
    assert reply.ok, reply.messages[0].plain_text()
    return str(reply.messages[0].ref)


def test_the_requester_withdraws_a_pending_request_and_it_is_never_sent(decision_env):
    env = decision_env
    env.restore_failed("ses_wd1")
    svc = env.service()
    rid = _close(env, svc, "ses_wd1")
    refused = svc.withdraw(OUTSIDER, CHANNEL, rid)
    assert not refused.ok and "only @UREQ000001, who asked for it" in refused.messages[0].plain_text()
    # The refusal is in the chain with the mention readable: no front's syntax, no per-process marker.
    (stored,) = [s for s in env.store.steps(session_id="ses_wd1") if s.actor == OUTSIDER]
    assert stored.detail["why"] == f"only @{REQUESTER}, who asked for it, withdraws request {rid}"
    reply = svc.withdraw(REQUESTER, CHANNEL, rid)
    assert reply.ok and "withdrawn by its requester" in reply.messages[0].headline
    assert reply.messages[0].ref == rid and not reply.messages[0].buttons  # the Slack message updated in place
    assert svc.requests.get(rid).state == "withdrawn"
    assert ("decision_withdrawn", "withdrawn") in _steps(env, "ses_wd1")
    late = svc.approve(APPROVER, CHANNEL, rid, ListReporter())
    assert not late.ok and "withdrawn" in late.messages[0].headline
    env.restart()
    env.service().recover_after_restart(ListReporter())
    assert env.posts("ses_wd1") == []


def test_withdraw_outside_the_recovery_channels_is_refused(decision_env):
    env = decision_env
    env.restore_failed("ses_wd2")
    svc = env.service()
    rid = _close(env, svc, "ses_wd2")
    reply = svc.withdraw(REQUESTER, "COTHER0001", rid)
    assert not reply.ok and "RECOVER_CHANNELS" in reply.messages[0].headline
    assert svc.requests.get(rid).state == "requested"


def test_ctrl_c_in_the_resume_wait_withdraws_it_and_no_restart_resends_it(make_decision_env):
    clock = HookClock()
    env = make_decision_env(clock)
    env.stopped_resumable("ses_wr1", claim=True)
    _ctrl_c_on_backoff(clock)
    svc = env.service()
    with pytest.raises(Interrupted) as caught:
        svc.resume(REQUESTER, CHANNEL, "ses_wr1", ListReporter())
    said = caught.value.reply.messages[0]
    assert "withdrawn" in said.headline and "503 BACKEND_UNAVAILABLE" in said.plain_text()
    assert ("resume_withdrawn", "withdrawn") in _steps(env, "ses_wr1")
    assert env.store.unfinished_requests() == []
    assert not svc.requests.active_waits("ses_wr1")
    sent = len(env.posts("ses_wr1"))
    assert sent >= 1 and {p["status"] for p in env.posts("ses_wr1")} == {503}
    # The reclamation ends; neither a restarted bot (serve) nor a console replay re-sends it.
    env.sandbox.admin.reclamation("ses_wr1", False)
    clock.hook = None
    env.restart()
    env.service().recover_after_restart(ListReporter())
    env.service().replay(REQUESTER, CHANNEL, ListReporter())
    assert len(env.posts("ses_wr1")) == sent and env.effects("ses_wr1") == []


def test_ctrl_c_in_the_worker_gone_wait_withdraws_the_request(make_decision_env):
    clock = HookClock()
    env = make_decision_env(clock)
    env.outcome_unknown("ses_wg1", gone=False, covered=True)
    svc = env.service()
    rid = str(
        svc.decide(
            REQUESTER,
            CHANNEL,
            "ses_wg1",
            "abandon",
            turn="turn_9",
            effects="none",
            reason="hung",
            reporter=ListReporter(),
        )
        .messages[0]
        .ref
    )
    _ctrl_c_on_backoff(clock)
    with pytest.raises(Interrupted) as caught:
        svc.approve(APPROVER, CHANNEL, rid, ListReporter())
    assert "withdrawn: interrupted" in caught.value.reply.messages[0].headline
    assert svc.requests.get(rid).state == "withdrawn"
    assert not svc.requests.active_waits("ses_wg1")
    assert env.posts("ses_wg1") == []  # R3.9: nothing is sent while the runbook says RECOVERY_REQUIRED
    env.sandbox.admin.scheduler_pass()  # the worker is confirmed gone now
    clock.hook = None
    env.restart()
    env.service().recover_after_restart(ListReporter())
    assert env.posts("ses_wg1") == [] and env.effects("ses_wg1") == []


class InterruptedOnTheWire(httpx.BaseTransport):
    """Forwards a POST to the sandbox, then Ctrl-C arrives before its answer is read (uncertain)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.armed = True

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and self.armed:
            self.armed = False
            response.read()
            raise KeyboardInterrupt
        return response


def test_ctrl_c_while_a_send_is_on_the_wire_keeps_it_uncertain_and_it_is_finished_with_its_key(decision_env, tmp_path):
    from bot.controlhost import ControlHostClient

    env = decision_env
    env.restore_failed("ses_ow1", reason="restore_unavailable")  # transient: no --cause-fixed needed
    transport = InterruptedOnTheWire()
    env.client = ControlHostClient(
        env.sandbox.url, env.sandbox.api_key, store=env.store, clock=env.clock, transport=transport
    )
    env.diagnoser.client = env.client
    env._clients.append(env.client)
    svc = env.service()
    with pytest.raises(Interrupted) as caught:
        svc.decide(
            REQUESTER,
            CHANNEL,
            "ses_ow1",
            "retry_restore",
            reason="store fixed",
            yes=True,
            reporter=ListReporter(),
        )
    assert "uncertain" in caught.value.reply.messages[0].headline
    (req,) = svc.requests.find(session_id="ses_ow1")
    assert req.state == "uncertain"
    assert ("decision_uncertain", "INTERRUPTED") in _steps(env, "ses_ow1")
    # It cannot be withdrawn: the control host may have applied it.
    refused = svc.withdraw(REQUESTER, CHANNEL, req.id)
    assert not refused.ok and "cannot be withdrawn" in refused.messages[0].headline
    listed = svc.unfinished()
    assert [(u.session_id, u.what, u.uncertain) for u in listed] == [("ses_ow1", "retry_restore", True)]
    assert len(env.effects("ses_ow1")) == 1
    # Finished, never dropped: the same key again, and the control host answers with the first receipt.
    env.restart()
    reply = env.service().replay(REQUESTER, CHANNEL, ListReporter())
    assert reply.ok
    posts = env.posts("ses_ow1")
    assert len(posts) == 2 and posts[0]["idempotency_key"] == posts[1]["idempotency_key"]
    assert len(env.effects("ses_ow1")) == 1
    assert env.service().requests.get(req.id).state == "executed"


def test_unfinished_requests_are_named_and_nothing_is_sent_to_name_them(decision_env):
    env = decision_env
    env.restore_failed("ses_un1")
    svc = env.service()
    rid = _close(env, svc, "ses_un1")
    record = env.store.begin_request("POST", "/v1/sessions/ses_un2/resume", "{}", "resume", session_id="ses_un2")
    env.store.note_attempt(record.key)  # an earlier run sent it and never heard back
    report = svc.unfinished_report(console=True).messages[0]
    text = report.plain_text()
    assert "ses_un1" in text and "close" in text and rid in text and "waiting for approval" in text
    assert "ses_un2" in text and "resume" in text and "uncertain" in text
    assert "/recover replay" in text
    assert env.posts("ses_un1") == [] and env.sandbox.admin.requests("ses_un2") == []


def test_the_slack_start_up_finishes_an_uncertain_resume_and_reports_it_about_its_session(decision_env):
    env = decision_env
    env.stopped_resumable("ses_sr1")
    path = "/v1/sessions/ses_sr1/resume"
    record = env.store.begin_request("POST", path, '{"reason":"r"}', "resume", session_id="ses_sr1")
    # An earlier run recorded the resume, sent it, and died before the answer arrived.
    vouched = {"method": "POST", "path": path, "body": {"reason": "r"}}  # what the bot records with it
    env.store.record_step("ses_sr1", REQUESTER, "resume_requested", vouched, "sending", idempotency_key=record.key)
    env.store.note_attempt(record.key)
    reporter = ListReporter()
    reply = env.service().recover_after_restart(reporter)
    assert any("Unfinished request found" in m.headline and m.session_id == "ses_sr1" for m in reporter.posted)
    finished = [m for m in reply.messages if m.session_id == "ses_sr1" and "Finished the resume" in m.headline]
    assert finished, [m.headline for m in reply.messages]
    assert ("resume_accepted", "accepted") in _steps(env, "ses_sr1")
    assert [p["idempotency_key"] for p in env.posts("ses_sr1")] == [record.key]
    # Running again is not recovery (R5.1, R5.2): the case stays open, verifying, until a new turn runs.
    assert env.store.get_open_case("ses_sr1") is not None
