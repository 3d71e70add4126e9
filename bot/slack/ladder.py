"""The escalation ladder's voice in Slack: posts in the request's thread, the live line edited in place.

Its own Web API client, with no retry at all: a ladder post is one HTTP attempt that ends within the
claim's lease (bot/escalation/runner.py, the ordering argument), and a 429 on a live edit is answered
by editing later (its Retry-After), never by sleeping on a thread decisions share. Decisions use the
front's client; nothing here waits for them or makes them wait.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from bot.controlhost import parse_retry_after
from bot.decisions import DecisionRequest
from bot.decisions._text import APPROVAL_KIND
from bot.ids import DEFAULT_INSTALLATION, ScopedId
from bot.installations.tags import name_lead, tag_message
from bot.messages import Message
from bot.slack.blocks import message_payload
from bot.slack.state import SlackState
from bot.slack.watching import find_message
from bot.slack.web import SlackOut

log = logging.getLogger("recover_bot.slack.ladder")

#: One attempt's timeout: well inside the claim's POST_MARGIN.
POST_TIMEOUT = 8


#: The wait when a 429 carries no readable Retry-After (no header, or neither seconds nor a date).
UNREADABLE_WAIT = 60.0


def _retry_after(exc: SlackApiError) -> float:
    """The wait a 429 asks for, read by the one Retry-After parser (seconds or an HTTP date)."""
    headers = exc.response.headers if exc.response is not None else {}
    value = next((v for k, v in (headers or {}).items() if k.lower() == "retry-after"), None)
    if isinstance(value, list):
        value = value[0] if value else None
    wait = parse_retry_after(value if isinstance(value, str) else None, datetime.now(UTC))
    return UNREADABLE_WAIT if wait is None else wait


class SlackLadderPoster:
    """The runner's :class:`bot.escalation.runner.LadderPoster` over Slack, for one installation's core:
    its threads and messages are looked up by the same installation-qualified keys the front wrote
    them under (:class:`bot.ids.ScopedId`), and with ``named`` (a fleet that is not the
    single default) what it says names the installation and its buttons carry it, as the replies do."""

    def __init__(
        self, client: WebClient, state: SlackState, installation: str = DEFAULT_INSTALLATION, *, named: bool = False
    ) -> None:
        self.client = client
        self.state = state
        self.installation = installation
        self.named = named

    @classmethod
    def beside(
        cls, out: SlackOut, state: SlackState, installation: str = DEFAULT_INSTALLATION, *, named: bool = False
    ) -> SlackLadderPoster:
        """A no-retry client on the front's workspace and API URL (the same token, never logged)."""
        base = out.client
        client = WebClient(token=base.token, base_url=base.base_url, timeout=POST_TIMEOUT, retry_handlers=[])
        return cls(client, state, installation, named=named)

    def _scoped(self, raw: str) -> ScopedId:
        return ScopedId(self.installation, raw)

    def _said(self, message: Message) -> Message:
        return name_lead(tag_message(message, self.installation), self.installation) if self.named else message

    def thread_of(self, request: DecisionRequest) -> tuple[str, str | None] | None:
        where = self.state.thread_of(self._scoped(request.session_id))
        if where is not None:
            return where.channel, where.thread_ts
        shown = self.state.ref_location(APPROVAL_KIND, self._scoped(request.id))
        return (shown[0], shown[1]) if shown else None

    def request_message(self, request_id: str) -> tuple[str, str] | None:
        return self.state.ref_location(APPROVAL_KIND, self._scoped(request_id))

    def post(self, channel: str, message: Message, thread_ts: str | None) -> str | None:
        args: dict[str, Any] = {"channel": channel, **({"thread_ts": thread_ts} if thread_ts else {})}
        payload = message_payload(self._said(message))
        try:
            data = self.client.api_call("chat.postMessage", json={**args, **payload}).data
        except (SlackClientError, OSError, ValueError) as exc:
            log.warning("ladder post failed: %s", type(exc).__name__)
            return None
        return str(data["ts"]) if isinstance(data, dict) and data.get("ts") else None

    def update(self, channel: str, ts: str, message: Message) -> float | None:
        try:
            payload = message_payload(self._said(message))  # the live line keeps the request's tagged buttons
            self.client.api_call("chat.update", json={"channel": channel, "ts": ts, **payload})
            return None
        except SlackApiError as exc:
            if exc.response is not None and exc.response.status_code == 429:
                return _retry_after(exc)  # slows the live line, nothing else
            log.warning("live line edit failed: %s", exc.response.get("error") if exc.response is not None else exc)
        except (SlackClientError, OSError, ValueError) as exc:
            log.warning("live line edit failed: %s", type(exc).__name__)
        return UNREADABLE_WAIT

    def find(self, channel: str, text: str, thread_ts: str | None) -> str | None:
        """The thread's message carrying ``text`` (a step's key line); a Slack error raises."""
        return find_message(self.client, channel, text, thread_ts)


__all__ = ["SlackLadderPoster"]
