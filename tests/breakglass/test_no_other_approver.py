"""Break-glass under the runbook's second default condition, over signed Slack HTTP (the real Bolt app
and router, the Slack stand-in, the sandbox control host, a real SQLite file): when no eligible approver
other than the requester exists — RECOVER_APPROVERS read through the on-call directory (a Slack user
group, as serve resolves it) and the ladder's widening — break-glass is allowed at once, not at the
ladder's end, with everything else as before (the typed confirmation, the notice before the one send,
the review); ``pending`` says so and why. While another eligible approver exists and the ladder has not
ended, the command refuses and the gate refuses a break-glass step written past the command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bot.sandbox import SandboxHandle, start_sandbox
from bot.slack.web import approver_directory, make_client
from tests.breakglass.test_glass_attacks import _execute, _record_glass, _req
from tests.breakglass.world import (
    APPROVER,
    CHANNEL,
    LADDER_END,
    OTHER,
    REQUESTER,
    World,
    make_world,
    post_times,
    stopped,
)
from tests.fixtures.slack import SlackHarness, SlackStandIn

ONCALL = "S0ONCALL01"


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios=None) as handle:
        yield handle


def _world(sbx: SandboxHandle, api: SlackStandIn, tmp_path: Any, members: list[str]) -> World:
    world = make_world(sbx, api, tmp_path / "nobody.db", approvers=(ONCALL,))
    # As serve does: approver groups resolved through Slack's user groups (the stand-in's).
    settings = world.router.services.settings
    world.router.services.decisions.ctx.directory = approver_directory(settings, make_client(settings))
    api.groups[ONCALL] = members
    return world


def _say(h: SlackHarness, line: str, user: str = REQUESTER) -> str:
    """What the bot answered: the command's response_url answers and the messages it posted."""
    before, posted = len(h.api.responses), set(h.api.messages)
    assert h.send.command(line, user=user, channel=CHANNEL).status_code == 200
    h.settle()
    answers = [json.dumps(body) for _, body in h.api.responses[before:]]
    return "\n".join([*answers, *(m.all_text() for k, m in h.api.messages.items() if k not in posted)])


def test_alone_on_call_the_requester_breaks_glass_at_once_with_notice_confirmation_and_review(
    sbx: SandboxHandle, slack_api: SlackStandIn, slack_harness: Any, tmp_path: Any
) -> None:
    world = _world(sbx, slack_api, tmp_path, [REQUESTER])  # the on-call group holds only the requester
    h = slack_harness(world.router)
    stopped(sbx, "ses_no1")
    _say(h, 'decide ses_no1 close --reason "stuck since the outage"')
    (req,) = world.router.services.decisions.requests.find(session_id="ses_no1")
    world.clock.advance(23)  # far from the ladder's end (20m): nothing waits for it

    pending = _say(h, "pending", user=OTHER)
    assert "may approve now: nobody but the requester" in pending, pending
    assert "break-glass: possible now" in pending
    assert "because no eligible approver other than the requester exists" in pending, pending

    shown = _say(h, f'break-glass {req.id} --incident INC-4711 --reason "alone on call"')
    assert f"/recover confirm {req.id}" in shown and "no eligible approver other than" in shown, shown
    assert "POST /v1/sessions/ses_no1/recovery-decisions" in shown
    assert not world.posts("ses_no1") and not world.notices(req.id)  # nothing before the typed confirm

    _say(h, f"confirm {req.id}")
    posts, notices = world.posts("ses_no1"), world.notices(req.id)
    assert len(posts) == 1, posts
    assert [where for where, _ in notices] == [CHANNEL]  # nobody else to DM
    assert max(at for _, at in notices) < min(post_times(posts))  # the notice before the send
    review = _say(h, "pending", user=OTHER)
    assert "review open" in review and f"/recover review {req.id} --ok" in review, review


def test_with_another_eligible_approver_before_the_ladder_end_the_command_refuses(
    sbx: SandboxHandle, slack_api: SlackStandIn, slack_harness: Any, tmp_path: Any
) -> None:
    world = _world(sbx, slack_api, tmp_path, [REQUESTER, APPROVER])
    h = slack_harness(world.router)
    stopped(sbx, "ses_no2")
    _say(h, 'decide ses_no2 close --reason "stuck since the outage"')
    (req,) = world.router.services.decisions.requests.find(session_id="ses_no2")
    world.clock.advance(60)
    pending = _say(h, "pending", user=OTHER)
    assert "break-glass: in 19m, if still unapproved (not now: 1 other eligible approver(s) exist)" in pending

    refused = _say(h, f'break-glass {req.id} --incident INC-4711 --reason "nobody answers"')
    assert "break-glass refused" in refused and "it ends in 19m" in refused, refused
    assert "1 other eligible approver(s) exist" in refused
    assert not world.posts("ses_no2") and not world.notices(req.id)


def test_the_gate_refuses_a_break_glass_step_before_the_ladder_end_while_another_approver_exists(
    sbx: SandboxHandle, slack_api: SlackStandIn, tmp_path: Any
) -> None:
    world = _world(sbx, slack_api, tmp_path, [REQUESTER, APPROVER])
    req = _req(world, "ses_no3")
    world.clock.advance(LADDER_END - 120)
    # The reading the command records: the group as read, with the other member found.
    reading = {"approvers": [ONCALL], "groups": {ONCALL: [APPROVER, REQUESTER]}, "others": [APPROVER]}
    _record_glass(world, req, content_hash=req.content_hash, reading=reading)
    said = _execute(world, req)
    assert "does not authorise" in said and "none of the runbook's break-glass conditions holds" in said, said
    assert "has not run to its end yet" in said and "the reading found 1 other eligible approver(s)" in said
    assert not world.posts("ses_no3")
