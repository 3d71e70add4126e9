"""Break-glass over signed Slack HTTP, composed as production composes the Slack front
(``bot.slack.ports.slack_compose``: the installations file, one core per installation, the front's notice poster
handed in as each core is built), over ONE and TWO installations: the real Bolt app, the Slack stand-in,
a sandbox control host per installation over HTTP. The loud notice (the installation's channel, and a
DM to the approver) is received by Slack before that installation's control host receives the
decision's POST (the stand-in's call times against the sandbox's request times), and the other
installation's control host receives nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.clock import ManualClock
from bot.sandbox import SandboxHandle, start_sandbox
from bot.settings import load_settings
from bot.slack.ports import slack_compose
from bot.slack.web import make_client
from tests.breakglass.world import APPROVER, LADDER_END, REQUESTER, post_times, stopped
from tests.fixtures.slack import BOT_TOKEN, SlackStandIn
from tests.installations.standin import installations_file

CHANNELS = {"eu-1": "C0EU1INCD", "us-1": "C0US1INCD"}
SESSION = "ses_slk1"


@pytest.fixture
def hosts(request: pytest.FixtureRequest) -> Iterator[dict[str, SandboxHandle]]:
    started = {name: start_sandbox(scenarios=None) for name in request.param}
    yield started
    for handle in started.values():
        handle.stop()


def notices(api: SlackStandIn, request_id: str) -> list[tuple[str, float, str]]:
    """(where, wall-clock time, text) of every break-glass notice the Slack stand-in received."""
    import time

    offset = time.time() - time.monotonic()
    out = []
    for c in api.calls_to("chat.postMessage"):
        said = str(c.params.get("text", "")) + str(c.params.get("blocks", ""))
        if "BREAK-GLASS" in said and request_id in said:
            out.append((str(c.params.get("channel")), c.at + offset, said))
    return out


def posts(handle: SandboxHandle) -> list[dict[str, Any]]:
    return [r for r in handle.admin.requests() if r.get("method") == "POST"]


@pytest.mark.parametrize("hosts", [("eu-1",), ("eu-1", "us-1")], indirect=True, ids=["one", "two"])
def test_break_glass_confirmed_posts_its_notice_in_the_installations_channel_then_sends(
    hosts: dict[str, SandboxHandle], slack_api: SlackStandIn, slack_harness: Any, tmp_path: Path
) -> None:
    settings = load_settings({}, dotenv=None).model_copy(
        update={
            "db_path": tmp_path / "recover.db",
            "approvers": (APPROVER,),
            "channels": tuple(CHANNELS.values()),
            "installations_file": installations_file(
                tmp_path, {n: (h.url, h.api_key, f"[{CHANNELS[n]}]") for n, h in hosts.items()}
            ),
            "slack_bot_token": SecretStr(BOT_TOKEN),
            "slack_api_url": slack_api.base_url,
        }
    )
    clock = ManualClock(datetime.now(UTC))
    router = slack_compose(settings, make_client(settings), clock=clock).router
    h = slack_harness(router)
    name = list(hosts)[-1]  # with two, the second: its notice must not land in the first's channel
    channel, host = CHANNELS[name], hosts[name]
    stopped(host, SESSION)
    h.send.command(f'decide {SESSION} close --reason "stuck since the outage"', user=REQUESTER, channel=channel)
    h.settle()
    (request,) = router.fleet.core(name).decisions.requests.find(session_id=SESSION)
    rid = request.id
    clock.advance(LADDER_END + 5)

    h.send.command(f'break-glass {rid} --incident INC-4711 --reason "nobody answers"', user=REQUESTER, channel=channel)
    h.settle()
    shown = [m for m in slack_api.messages.values() if f"/recover confirm {rid}" in m.all_text()]
    assert shown and f"POST /v1/sessions/{SESSION}/recovery-decisions" in shown[0].all_text()
    assert not posts(host) and not notices(slack_api, rid)

    h.send.command(f"confirm {rid}", user=REQUESTER, channel=channel)
    h.settle()
    sent, told = posts(host), notices(slack_api, rid)
    said = " ".join(str(c.params) for c in slack_api.calls_to("chat.postMessage"))
    assert "the loud notice cannot be posted from here" not in said
    assert len(sent) == 1 and SESSION in sent[0]["path"], (sent, said)
    assert sorted(where for where, _, _ in told) == sorted([channel, APPROVER]), told
    assert all(f"[{name}]" in text for _, _, text in told), told  # each notice names its installation
    assert max(at for _, at, _ in told) < min(post_times(sent)), (told, sent)
    for other, handle in hosts.items():
        if other != name:
            assert posts(handle) == []  # the other installation's control host received nothing
