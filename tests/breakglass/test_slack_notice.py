"""Break-glass over signed Slack HTTP: the real Bolt app and router, the Slack stand-in, the sandbox
control host. The loud notice (the channel, and a DM to the approver by chat.postMessage to the user id)
is received by Slack before the control host receives the decision's POST: the stand-in's recorded call
times against the sandbox's recorded request times."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.sandbox import SandboxHandle, start_sandbox
from tests.breakglass.world import APPROVER, CHANNEL, LADDER_END, REQUESTER, make_world, post_times, stopped
from tests.fixtures.slack import SlackStandIn


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios=None) as handle:
        yield handle


def test_the_notice_and_the_dm_reach_slack_before_the_send(sbx: SandboxHandle, slack_api: SlackStandIn,
                                                           slack_harness, tmp_path) -> None:
    world = make_world(sbx, slack_api, tmp_path / "bg.db")
    world.router.services.decisions.glass.notice = None  # the Slack front attaches its own
    h = slack_harness(world.router)
    assert world.router.services.decisions.glass.notice is not None
    stopped(sbx, "ses_slk1")
    h.send.command('decide ses_slk1 close --reason "stuck since the outage"', user=REQUESTER, channel=CHANNEL)
    h.settle()
    rid = world.router.services.decisions.requests.find(session_id="ses_slk1")[-1].id
    world.clock.advance(LADDER_END + 5)

    h.send.command(f'break-glass {rid} --incident INC-4711 --reason "nobody answers"', user=REQUESTER, channel=CHANNEL)
    h.settle()
    shown = [m for m in slack_api.messages.values() if f"/recover confirm {rid}" in m.all_text()]
    assert shown and "POST /v1/sessions/ses_slk1/recovery-decisions" in shown[0].all_text()
    assert not world.posts("ses_slk1") and not world.notices(rid)

    h.send.command(f"confirm {rid}", user=REQUESTER, channel=CHANNEL)
    h.settle()
    posts, notices = world.posts("ses_slk1"), world.notices(rid)
    assert len(posts) == 1, posts
    assert sorted(where for where, _ in notices) == sorted([CHANNEL, APPROVER]), notices
    assert max(at for _, at in notices) < min(post_times(posts)), (notices, posts)
