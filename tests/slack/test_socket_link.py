"""Socket Mode reconnection against a stand-in that follows Slack's protocol (hello, envelope acks,
disconnect refresh_requested), over a real loopback WebSocket and apps.connections.open on the Web API
stand-in: a refresh, a server close frame and a dropped connection each reconnect within 2 s, the
command sent on the new link is acked within Slack's 3 s, and the CPU stays idle meanwhile."""

from __future__ import annotations

import asyncio
import json
import resource
import threading
import time
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from bot.slack import build_bot
from bot.slack.socket_link import SocketLink
from bot.store import Store
from tests.fixtures.slack import slack_settings
from tests.fixtures.waiting import eventually
from tests.slack.fake_router import FakeRouter

APP_TOKEN = "xapp-1-test-link"


class SocketStandIn:
    """Slack's Socket Mode side: one server, a hello per connection, acks recorded with their time."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: list[ServerConnection] = []
        self.connected_at: list[float] = []
        self.acks: dict[str, float] = {}
        self.connected = threading.Condition()
        ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None

        async def handler(ws: ServerConnection) -> None:
            with self.connected:
                self.links.append(ws)
                self.connected_at.append(time.monotonic())
                self.connected.notify_all()
            await ws.send(json.dumps({"type": "hello", "num_connections": 1}))
            try:
                async for raw in ws:
                    data = json.loads(raw)
                    if data.get("envelope_id"):
                        self.acks[data["envelope_id"]] = time.monotonic()
            except Exception:  # noqa: BLE001 - a dropped link ends here
                return

        async def main() -> None:
            self._stop = self.loop.create_future()
            async with serve(handler, "127.0.0.1", 0, ping_interval=None) as server:
                self.port = server.sockets[0].getsockname()[1]
                ready.set()
                await self._stop

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/link"

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def wait_links(self, n: int, timeout: float = 10) -> None:
        with self.connected:
            assert self.connected.wait_for(lambda: len(self.links) >= n, timeout), f"{len(self.links)} links"

    def envelope(self, envelope_id: str, text: str) -> float:
        payload = {
            "command": "/recover",
            "text": text,
            "user_id": "UALICE",
            "channel_id": "CINC",
            "team_id": "T1",
            "api_app_id": "A1",
            "response_url": "http://127.0.0.1:9/none",
            "trigger_id": f"trig-{envelope_id}",
        }
        msg = {
            "envelope_id": envelope_id,
            "type": "slash_commands",
            "accepts_response_payload": True,
            "payload": payload,
        }
        self.call(self.links[-1].send(json.dumps(msg)))
        return time.monotonic()

    def send_raw(self, text: str) -> None:
        """Any text frame on the latest link, as Slack (or something between) might send."""
        self.call(self.links[-1].send(text))

    def silence(self, n: int = 0) -> None:
        """Link ``n`` goes silent: nothing more is read from it (so no pong), and it is not closed
        (no FIN, no RST), as when a NAT or a proxy drops the flow."""
        self.loop.call_soon_threadsafe(self.links[n].transport.pause_reading)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(
            lambda: self._stop is not None and not self._stop.done() and self._stop.set_result(None)
        )
        self.thread.join(10)


async def _refresh(ws: ServerConnection) -> None:
    await ws.send(json.dumps({"type": "disconnect", "reason": "refresh_requested"}))


async def _close_frame(ws: ServerConnection) -> None:
    await ws.close(1001, "going away")


async def _drop(ws: ServerConnection) -> None:
    ws.transport.abort()  # no close frame: the TCP connection just ends


@pytest.mark.parametrize("fault", [_refresh, _close_frame, _drop], ids=["refresh_requested", "close_frame", "dropped"])
def test_reconnects_within_2s_and_acks_within_3s_with_the_cpu_idle(slack_api, tmp_path, fault) -> None:
    stand_in = SocketStandIn()
    slack_api.socket_url = stand_in.url
    settings = slack_settings(slack_api, tmp_path / "s.db", slack_signing_secret=None, slack_app_token=APP_TOKEN)
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    link = SocketLink(bot.app, APP_TOKEN, api_url=slack_api.base_url).start()
    try:
        stand_in.wait_links(1)
        sent = stand_in.envelope("env-before", "cases")
        eventually(lambda: "env-before" in stand_in.acks, 5, "the ack of env-before")
        assert stand_in.acks["env-before"] - sent < 3.0
        assert link.health()[0]

        t0 = time.monotonic()
        stand_in.call(fault(stand_in.links[0]))
        stand_in.wait_links(2, timeout=5)
        reconnect = stand_in.connected_at[1] - t0
        assert reconnect < 2.0, reconnect
        sent = stand_in.envelope("env-after", "cases")
        eventually(lambda: "env-after" in stand_in.acks, 5, "the ack of env-after")
        assert "env-after" in stand_in.acks, "the command on the new link was never acked"
        assert stand_in.acks["env-after"] - sent < 3.0
        # No busy loop: a second of quiet costs the whole process well under a tenth of a CPU second.
        before = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(1.0)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert cpu < 0.1, cpu
        assert len(stand_in.links) == 2  # one reconnection, not a storm
        assert link.health()[0] and "connected" in link.health()[1][0]
        assert len(slack_api.calls_to("apps.connections.open")) == 2
    finally:
        link.close()
        bot.close()
        stand_in.stop()


def test_healthz_reports_the_links_state(slack_api, tmp_path) -> None:
    import httpx

    from bot.slack import HttpServer, SlackFront

    stand_in = SocketStandIn()
    slack_api.socket_url = stand_in.url
    settings = slack_settings(slack_api, tmp_path / "h.db", slack_signing_secret=None, slack_app_token=APP_TOKEN)
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    link = SocketLink(bot.app, APP_TOKEN, api_url=slack_api.base_url)
    server = HttpServer(SlackFront(bot.app, events=False, health=link.health), "127.0.0.1", 0).start()
    try:
        r = httpx.get(server.url + "/healthz")
        assert r.status_code == 503 and "socket_mode: starting" in r.text
        link.start()
        stand_in.wait_links(1)
        eventually(lambda: httpx.get(server.url + "/healthz").status_code == 200, 5, "a healthy /healthz")
        assert "socket_mode: connected" in httpx.get(server.url + "/healthz").text
        assert httpx.post(server.url + "/slack/events", content=b"x").status_code == 404  # no HTTP events here
        slack_api.socket_url = None  # apps.connections.open now refuses: the link cannot come back
        stand_in.call(_drop(stand_in.links[0]))
        eventually(
            lambda: httpx.get(server.url + "/healthz").status_code != 200, 5, "/healthz unhealthy without a link"
        )
        assert "socket_mode: reconnecting" in httpx.get(server.url + "/healthz").text
    finally:
        server.stop()
        link.close()
        bot.close()
        stand_in.stop()
