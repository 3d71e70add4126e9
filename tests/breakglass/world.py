"""A bot "process" for break-glass tests: the real router over the sandbox control host (HTTP), a real
SQLite file, a manual clock (the ladder's 20 minutes pass in a call) and the loud notice posted through
the Slack front's own Web API wrapper to the Slack stand-in."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bot.app.compose import FrontPorts
from bot.app.router import Router
from bot.clock import ManualClock, parse_time
from bot.messages import ListReporter, Reply
from bot.sandbox import SandboxHandle
from bot.settings import load_settings
from bot.slack.notice import SlackNotice
from bot.slack.web import SlackOut, make_client
from tests.fixtures.composing import default_router
from tests.fixtures.slack import BOT_TOKEN, SlackStandIn

REQUESTER = "UREQ000001"
APPROVER = "UAPP000002"
OTHER = "UOTH000003"
CHANNEL = "CRECOVER01"
LADDER_END = 20 * 60  # the shipped runbook: remind 10m, mention 15m, widen 20m; expiry 30m
EXPIRY = 30 * 60


def text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def stopped(sbx: SandboxHandle, sid: str) -> None:
    """A session stopped at the restore-failure limit: `close` (two-person) is valid at once."""
    sbx.admin.create_session(
        {
            "session": {
                "id": sid,
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 4,
                "resumable": False,
                "attention": {
                    "code": "RESTORE_FAILED",
                    "reason": "restore_unavailable",
                    "failures": 3,
                    "retry_at": None,
                },
                "checkpoint": {"id": "ckpt_7", "covers_turn_id": None},
                "execution": {"state": "gone", "alive": False},
            }
        }
    )


@dataclass
class World:
    sbx: SandboxHandle
    api: SlackStandIn
    router: Router
    clock: ManualClock
    db: Path

    def run(self, line: str, actor: str, channel: str | None = CHANNEL) -> Reply:
        reply: Reply = self.router.handle_text(line, actor=actor, channel=channel, reporter=ListReporter())
        return reply

    def request(self, sid: str, decision: str = "close", actor: str = REQUESTER, extra: str = "") -> str:
        reply = self.run(f'/recover decide {sid} {decision} {extra} --reason "stuck since the outage"', actor)
        found = self.router.services.decisions.requests.find(session_id=sid)
        assert found, text(reply)
        return str(found[-1].id)

    def posts(self, sid: str) -> list[dict[str, Any]]:
        return [r for r in self.sbx.admin.requests(sid) if r.get("method") == "POST"]

    def notices(self, request_id: str) -> list[tuple[str, float]]:
        """(where, wall-clock time) of every break-glass notice the Slack stand-in received."""
        offset = time.time() - time.monotonic()
        return [
            (str(c.params.get("channel")), c.at + offset)
            for c in self.api.calls_to("chat.postMessage")
            if "BREAK-GLASS" in str(c.params.get("text", "")) + str(c.params.get("blocks", ""))
            and request_id in str(c.params.get("text", "")) + str(c.params.get("blocks", ""))
        ]

    def break_glass(self, request_id: str, actor: str = REQUESTER) -> Reply:
        return self.run(f'/recover break-glass {request_id} --incident INC-4711 --reason "nobody answers"', actor)


def post_times(posts: list[dict[str, Any]]) -> list[float]:
    out = []
    for p in posts:
        when = parse_time(p["at"])
        assert when is not None
        out.append(when.timestamp())
    return out


def make_world(sbx: SandboxHandle, api: SlackStandIn, db: Path, **overrides: Any) -> World:
    values: dict[str, Any] = {
        "db_path": db,
        "approvers": (APPROVER,),
        "channels": (CHANNEL,),
        "slack_bot_token": SecretStr(BOT_TOKEN),
        "slack_api_url": api.base_url,
    }
    values.update(overrides)
    settings = load_settings({}, dotenv=None).model_copy(update=values)
    clock = ManualClock(datetime.now(UTC))
    # The Slack front's notice poster, handed in at composition as the Slack worker does.
    ports = FrontPorts(notice=SlackNotice(SlackOut(make_client(settings))))
    router = default_router(settings, sandbox=sbx, clock=clock, startup=False, ports=ports)
    return World(sbx, api, router, clock, db)
