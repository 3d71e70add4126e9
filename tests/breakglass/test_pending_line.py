"""The one pending-request line over signed Slack HTTP (the real Bolt app and router, the Slack stand-in,
the sandbox control host, a real SQLite file): ``pending``, the hand-off (asked in another channel) and
App Home print the same line, whose command is the one that works for the request — ``confirm`` for a
single-person request, ``approve`` for a two-person one — and pasting the printed command back is
accepted. Who may approve now is read through the on-call directory (a Slack user group, as serve
resolves it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from bot.sandbox import SandboxHandle, start_sandbox
from bot.slack.web import approver_directory, make_client
from bot.vocab import RequestState
from tests.breakglass.world import APPROVER, CHANNEL, OTHER, REQUESTER, World, make_world, stopped
from tests.fixtures.slack import SlackHarness, SlackStandIn

ONCALL = "S0ONCALL01"
ELSEWHERE = "C0HANDOFF1"  # the hand-off is asked in a channel of its own


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios=None) as handle:
        yield handle


def _said_since(h: SlackHarness, responses: int) -> str:
    """Everything the bot said: command answers (response_url) after ``responses``, and every message."""
    answered = [json.dumps(body) for _, body in h.api.responses[responses:]]
    return "\n".join([*answered, *(m.all_text() for m in h.api.messages.values())])


def _line_of(said: str, request_id: str) -> str:
    lines = [x for x in said.replace("\\n", "\n").splitlines() if f"`{request_id}`" in x]
    assert lines, said[-3000:]
    return lines[-1]


def _pasted(line: str, request_id: str) -> str:
    """The command the line prints, as a person copies it (without the slash command's own name)."""
    found = set(re.findall(rf"`/recover (\w[\w-]* {request_id}(?: --ok)?)`", line))
    assert len(found) == 1, line  # one command (said in the text and again in the blocks)
    return str(found.pop())


def _world(sbx: SandboxHandle, api: SlackStandIn, slack_harness: Any, tmp_path: Any) -> tuple[World, SlackHarness]:
    world = make_world(sbx, api, tmp_path / "line.db", approvers=(ONCALL,))
    # As serve does: approver groups resolved through Slack's user groups (the stand-in's).
    world.router.services.decisions.ctx.directory = approver_directory(
        world.router.services.settings, make_client(world.router.services.settings)
    )
    api.groups[ONCALL] = [REQUESTER, APPROVER]
    return world, slack_harness(world.router)


def _ask(h: SlackHarness, line: str) -> int:
    before = len(h.api.responses)
    assert h.send.command(line, user=REQUESTER, channel=CHANNEL).status_code == 200
    h.settle()
    return before


def test_a_single_person_request_is_handed_off_and_listed_with_confirm_and_the_pasted_line_is_accepted(
    sbx: SandboxHandle, slack_api: SlackStandIn, slack_harness: Any, tmp_path: Any
) -> None:
    world, h = _world(sbx, slack_api, slack_harness, tmp_path)
    stopped(sbx, "ses_pl1")
    _ask(h, 'decide ses_pl1 start_fresh --reason "the old context may go"')
    (req,) = world.router.services.decisions.requests.find(session_id="ses_pl1")
    assert req.policy != "two_person" and req.state == RequestState.REQUESTED

    before = len(slack_api.responses)
    h.send.command("handoff", user=OTHER, channel=ELSEWHERE)
    h.settle()
    handed = _line_of(_said_since(h, before), req.id)
    assert "start_fresh on `ses_pl1`" in handed and f"by <@{REQUESTER}>" in handed and "ago" in handed, handed
    assert "expires in" in handed and f"now: <@{REQUESTER}> confirms" in handed, handed
    assert f"/recover approve {req.id}" not in handed  # `approve` refuses a single-person request

    pending = _line_of(_said_since(h, _ask(h, "pending")), req.id)
    h.send.event("EvHome1", {"type": "app_home_opened", "user": REQUESTER, "tab": "home"})
    h.settle()
    home = json.dumps(slack_api.calls_to("views.publish")[-1].params["view"])
    assert _pasted(handed, req.id) == _pasted(pending, req.id) == f"confirm {req.id}"
    assert f"/recover confirm {req.id}" in home and f"/recover approve {req.id}" not in home, home

    _ask(h, _pasted(handed, req.id))  # pasted back as printed, by its requester
    after = world.router.services.decisions.requests.get(req.id)
    assert after is not None and after.state != RequestState.REQUESTED, after
    assert len(world.posts("ses_pl1")) == 1


def test_a_two_person_request_names_who_may_approve_through_the_directory_and_approve_is_accepted(
    sbx: SandboxHandle, slack_api: SlackStandIn, slack_harness: Any, tmp_path: Any
) -> None:
    world, h = _world(sbx, slack_api, slack_harness, tmp_path)
    stopped(sbx, "ses_pl2")
    _ask(h, 'decide ses_pl2 close --reason "stuck since the outage"')
    (req,) = world.router.services.decisions.requests.find(session_id="ses_pl2")
    line = _line_of(_said_since(h, _ask(h, "pending")), req.id)
    # The group's members by the one approver rule: the other member, never the requester.
    assert f"may approve now: {APPROVER} (not {REQUESTER})" in line, line
    assert _pasted(line, req.id) == f"approve {req.id}"
    assert h.send.command(_pasted(line, req.id), user=APPROVER, channel=CHANNEL).status_code == 200
    h.settle()
    after = world.router.services.decisions.requests.get(req.id)
    assert after is not None and after.state != RequestState.REQUESTED and after.approved_by == APPROVER
    assert len(world.posts("ses_pl2")) == 1
