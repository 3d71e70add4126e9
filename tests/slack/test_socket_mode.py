"""Socket Mode: the same app, driven through Bolt's socket-mode adapter and over a real WebSocket."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from slack_bolt import BoltRequest
from slack_bolt.adapter.socket_mode import SocketModeHandler

from bot.slack import build_bot
from bot.store import Store
from tests.fixtures.slack import slack_settings
from tests.fixtures.waiting import eventually
from tests.slack.fake_router import FakeRouter

APP_TOKEN = "xapp-1-test-socket"


def _command_payload(text: str) -> dict[str, Any]:
    return {
        "command": "/recover",
        "text": text,
        "user_id": "UALICE",
        "channel_id": "CINC",
        "team_id": "T1",
        "api_app_id": "A1",
        "response_url": "http://127.0.0.1:9/none",
        "trigger_id": "trig-1",
    }


def test_dispatch_in_socket_mode_skips_signatures_and_runs_the_listener(slack_api, tmp_path) -> None:
    settings = slack_settings(slack_api, tmp_path / "s.db", slack_signing_secret=None, slack_app_token=APP_TOKEN)
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    try:
        r = bot.app.dispatch(BoltRequest(body=_command_payload("diagnose sess_s"), mode="socket_mode"))
        assert r.status == 200 and "received" in r.body
        assert bot.wait_idle(30)
        (root,) = slack_api.roots("CINC")
        assert "sess_s" in root.text
        assert any("restore failed" in m.text for m in slack_api.thread("CINC", root.ts))
    finally:
        bot.close()


def test_over_a_real_websocket(slack_api, tmp_path) -> None:
    import websockets
    from websockets.asyncio.server import serve

    acks: list[dict[str, Any]] = []
    got_ack = threading.Event()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Future[None] | None = None
    port_box: list[int] = []

    async def handler(ws: Any) -> None:
        await ws.send(json.dumps({"type": "hello", "num_connections": 1}))
        await ws.send(
            json.dumps(
                {
                    "envelope_id": "env-1",
                    "type": "slash_commands",
                    "accepts_response_payload": True,
                    "payload": _command_payload("diagnose sess_ws"),
                }
            )
        )
        try:
            async for raw in ws:
                data = json.loads(raw)
                if data.get("envelope_id") == "env-1":
                    acks.append(data)
                    got_ack.set()
        except websockets.ConnectionClosed:
            return

    async def main() -> None:
        nonlocal stop
        stop = loop.create_future()
        async with serve(handler, "127.0.0.1", 0) as server:
            port_box.append(server.sockets[0].getsockname()[1])
            ready.set()
            await stop

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    slack_api.socket_url = f"ws://127.0.0.1:{port_box[0]}/link"

    settings = slack_settings(slack_api, tmp_path / "ws.db", slack_signing_secret=None, slack_app_token=APP_TOKEN)
    bot = build_bot(settings, FakeRouter(), store=Store(settings.db_path))
    handler_ = SocketModeHandler(bot.app, APP_TOKEN)
    try:
        handler_.connect()
        assert got_ack.wait(15), "the envelope was never acknowledged"
        assert "received" in json.dumps(acks[0].get("payload"))
        eventually(lambda: any("sess_ws" in m.text for m in slack_api.roots("CINC")), 30, "the sess_ws case thread")
        assert bot.wait_idle(30)
        (root,) = slack_api.roots("CINC")
        assert any("restore failed" in m.text for m in slack_api.thread("CINC", root.ts))
        assert slack_api.calls_to("apps.connections.open")
    finally:
        handler_.close()
        bot.close()
        loop.call_soon_threadsafe(lambda: stop is not None and not stop.done() and stop.set_result(None))
        thread.join(10)
