"""The channel rule with an installations file, over signed Slack HTTP, composed as production composes
the Slack front (``slack_compose`` over RECOVER_INSTALLATIONS_FILE) for ONE and TWO installations:
an installation's ``channels`` narrow RECOVER_CHANNELS and never widen it; ``channels: []`` binds it to
no channel, so a two-person ``close`` is neither requested nor approved anywhere for it and nothing is
sent; a file whose channel RECOVER_CHANNELS does not list is refused at start with FILE:LINE."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.installations import InstallationsError
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import Settings, load_settings
from bot.slack.ports import slack_compose
from bot.slack.web import make_client
from bot.vocab import RequestState
from tests.breakglass.world import APPROVER, REQUESTER, stopped
from tests.fixtures.slack import BOT_TOKEN, SlackStandIn
from tests.installations.standin import installations_file

SESSION = "ses_chan1"
INCIDENT = "C0INCIDNT"  # RECOVER_CHANNELS
NO_LIST = "C0NOLIST1"  # on no list at all
CLOSE = f'decide {SESSION} close --reason "stuck since the outage"'


@pytest.fixture
def hosts(request: pytest.FixtureRequest) -> Iterator[dict[str, SandboxHandle]]:
    started = {name: start_sandbox(scenarios=None) for name in request.param}
    yield started
    for handle in started.values():
        handle.stop()


def _file(folder: Path, hosts: dict[str, SandboxHandle], channels: dict[str, str]) -> Path:
    """The file as an operator writes it; ``channels`` maps a name to its YAML list text."""
    return installations_file(folder, {n: (h.url, h.api_key, channels[n]) for n, h in hosts.items()})


def settings_for(folder: Path, api: SlackStandIn, path: Path, recover_channels: tuple[str, ...]) -> Settings:
    return load_settings({}, dotenv=None).model_copy(
        update={
            "db_path": folder / "recover.db",
            "approvers": (APPROVER,),
            "channels": recover_channels,
            "installations_file": path,
            "slack_bot_token": SecretStr(BOT_TOKEN),
            "slack_api_url": api.base_url,
        }
    )


def posts(handle: SandboxHandle) -> list[dict[str, Any]]:
    return [r for r in handle.admin.requests() if r.get("method") == "POST"]


def said(api: SlackStandIn) -> str:
    """Everything the bot said to Slack (posts, ephemerals, response_url answers)."""
    return " ".join([str(c.params) for c in api.calls] + [str(body) for _, body in api.responses])


@pytest.mark.parametrize("hosts", [("eu-1",), ("eu-1", "us-1")], indirect=True, ids=["one", "two"])
def test_an_installation_bound_to_no_channel_takes_no_decision_in_any_channel(
    hosts: dict[str, SandboxHandle], slack_api: SlackStandIn, slack_harness: Any, tmp_path: Path
) -> None:
    lists = {"eu-1": "[]", "us-1": f"[{INCIDENT}]"}
    settings = settings_for(tmp_path, slack_api, _file(tmp_path, hosts, lists), (INCIDENT,))
    router = slack_compose(settings, make_client(settings)).router
    h = slack_harness(router)
    eu = router.fleet.core("eu-1")
    stopped(hosts["eu-1"], SESSION)

    # A channel on no list, then RECOVER_CHANNELS' own channel: eu-1 is bound to none, so neither.
    for channel in (NO_LIST, INCIDENT):
        h.send.command(f"{CLOSE} --install eu-1", user=REQUESTER, channel=channel)
        h.settle()
        for request in eu.decisions.requests.find(session_id=SESSION):  # before the rule held: approved, sent
            h.send.command(f"approve {request.id}", user=APPROVER, channel=channel)
            h.settle()
    assert eu.decisions.requests.find(session_id=SESSION) == []
    assert posts(hosts["eu-1"]) == []
    assert "is bound to no channel" in said(slack_api) and "RECOVER_INSTALLATIONS_FILE" in said(slack_api)

    if "us-1" in hosts:  # its own channel, within RECOVER_CHANNELS: requested, approved and sent there
        us = router.fleet.core("us-1")
        stopped(hosts["us-1"], SESSION)
        h.send.command(CLOSE, user=REQUESTER, channel=INCIDENT)
        h.settle()
        (request,) = us.decisions.requests.find(session_id=SESSION)
        h.send.command(f"approve {request.id}", user=APPROVER, channel=NO_LIST)  # not here: refused
        h.settle()
        assert us.decisions.requests.get(request.id).state == RequestState.REQUESTED
        h.send.command(f"approve {request.id}", user=APPROVER, channel=INCIDENT)
        h.settle()
        assert [p for p in posts(hosts["us-1"]) if SESSION in p["path"]] and posts(hosts["eu-1"]) == []


@pytest.mark.parametrize("hosts", [("eu-1",), ("eu-1", "us-1")], indirect=True, ids=["one", "two"])
def test_a_file_channel_outside_recover_channels_is_refused_at_start_with_file_and_line(
    hosts: dict[str, SandboxHandle], slack_api: SlackStandIn, tmp_path: Path
) -> None:
    lists = {"eu-1": "[C0EU1INCD]", "us-1": f"[{INCIDENT}]"}
    path = _file(tmp_path, hosts, lists)
    settings = settings_for(tmp_path, slack_api, path, (INCIDENT,))
    with pytest.raises(InstallationsError) as caught:
        slack_compose(settings, make_client(settings)).router
    assert caught.value.problems == [
        f"{path}:5: channel C0EU1INCD is not in RECOVER_CHANNELS ({INCIDENT}): an installation's channels narrow "
        "RECOVER_CHANNELS, never widen it; add it to RECOVER_CHANNELS or remove it here"
    ]


@pytest.mark.parametrize("hosts", [("eu-1",), ("eu-1", "us-1")], indirect=True, ids=["one", "two"])
def test_the_console_decides_for_an_installation_that_lists_it_and_for_no_other(
    hosts: dict[str, SandboxHandle], slack_api: SlackStandIn, tmp_path: Path
) -> None:
    """The console is the channel `console` (docs/commands.md): listed in an installation's channels
    (several may list it), the console decides for it with --install; bound to none, it does not."""
    from bot.app.compose import FrontPorts, compose
    from bot.messages import ListReporter

    lists = {"eu-1": "[console]", "us-1": "[console]"} if len(hosts) == 2 else {"eu-1": "[]"}
    settings = settings_for(tmp_path, slack_api, _file(tmp_path, hosts, lists), ())
    router = compose(settings, ports=FrontPorts(), startup=False).router  # as run_real_console composes it
    for name in hosts:
        stopped(hosts[name], SESSION)
        reply = router.handle_text(
            f'/recover decide {SESSION} start_fresh --reason "context may go" --install {name}',
            actor="console:alice",
            channel="console",
            reporter=ListReporter(),
        )
        text = "\n".join(m.plain_text() for m in reply.messages)
        if lists[name] == "[]":
            assert not reply.ok and "is bound to no channel" in text, text
        else:
            assert reply.ok and "not allowed in this channel" not in text, text
