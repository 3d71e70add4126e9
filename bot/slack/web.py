"""Slack Web API calls, each one degrading instead of crashing.

Why a wrapper: a workspace may install the app without a scope (``missing_scope``), an Enterprise
grid or a stand-in may not know a method (``unknown_method``), and Slack answers 429 under load. None
of that may stop a recovery: blocks fall back to plain text, a failed update becomes a new post, a
failed file upload becomes a truncated preview. 429 is retried after Retry-After by slack_sdk's
``RateLimitErrorRetryHandler``; every call here runs off the ack path (background threads), so the
sleep never delays an acknowledgement.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from typing import Any

import httpx
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.models.views import View

from bot.messages import Attachment, Message, thread_refs
from bot.oncall import OnCall, OnCallDirectory, OnCallUnavailable, oncall_directory
from bot.redact import redact
from bot.settings import Settings, reveal
from bot.slack.blocks import message_payload, notification_text, permalinks
from bot.slack.state import Location

log = logging.getLogger("recover_bot.slack")

# Errors after which plain text is worth a try (the blocks, not the call, were refused).
_BLOCK_ERRORS = {"invalid_blocks", "invalid_blocks_format", "msg_too_long", "too_many_attachments"}


def make_client(settings: Settings, *, timeout: int = 15) -> WebClient:
    """The one Web API client, honouring ``SLACK_API_URL``.

    Only the 429 retry handler is installed: slack_sdk's default connection-error retry could post a
    message twice, and the front end prefers updating one message in place.

    One TLS context for all calls: without it every HTTPS call builds a new one and loads the CA
    bundle (~30 ms of CPU with the interpreter lock held), which delays the acks of every request
    arriving meanwhile.
    """
    return WebClient(
        token=reveal(settings.slack_bot_token),
        base_url=settings.slack_api_url,
        timeout=timeout,
        ssl=ssl.create_default_context(),
        retry_handlers=[NotingRateLimitHandler(max_retry_count=3)],
    )


class NotingRateLimitHandler(RateLimitErrorRetryHandler):
    """slack_sdk's 429 retry (sleeps Retry-After), remembering when Slack last asked to slow down:
    a long job's progress line says that its updates, not its work, were slowed."""

    def __init__(self, max_retry_count: int = 3) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.last: tuple[float, float] | None = None  # (monotonic time, Retry-After seconds)

    def prepare_for_next_attempt(self, **kwargs: Any) -> None:
        response = kwargs.get("response")
        if response is not None and response.status_code == 429:
            value = next((v[0] for k, v in response.headers.items() if k.lower() == "retry-after" and v), "1")
            try:
                seconds = float(value)
            except ValueError:
                seconds = 1.0
            self.last = (time.monotonic(), seconds)
        super().prepare_for_next_attempt(**kwargs)


def _error_code(exc: SlackClientError) -> str:
    if isinstance(exc, SlackApiError):
        data = exc.response.data if exc.response is not None else None
        if isinstance(data, dict):
            return str(data.get("error") or "unknown_error")
        return f"http_{exc.response.status_code}" if exc.response is not None else "unknown_error"
    return type(exc).__name__


class SlackOut:
    """Posting, updating and uploading, never raising: failures are logged and reported as values."""

    def __init__(self, client: WebClient) -> None:
        self.client = client
        self._uploads_work = True
        self._permalinks: dict[str, str] = {}  # "channel/ts" → its permalink (it never changes)
        # One client (one TLS context, pooled connections) for response_url posts: ``httpx.post``
        # would build a client and load the CA bundle on every call, holding the interpreter lock
        # for ~30 ms each time: measured as the main cost competing with acks under load.
        self._responder = httpx.Client(timeout=10.0)

    def rate_limited_since(self, since: float) -> float | None:
        """The Retry-After of a 429 Slack answered after ``since`` (monotonic), if any."""
        for handler in self.client.retry_handlers or []:
            if not isinstance(handler, NotingRateLimitHandler):
                continue
            last = handler.last
            if last is not None and last[0] >= since:
                return last[1]
        return None

    def _call(self, method: str, **kwargs: Any) -> dict[str, Any] | None:
        try:
            response = self.client.api_call(method, json=kwargs)
        except SlackClientError as exc:
            code = _error_code(exc)
            log.warning("Slack %s failed: %s", method, code)
            raise _CallFailed(code) from exc
        except (OSError, ValueError) as exc:
            log.warning("Slack %s failed: %s", method, exc)
            raise _CallFailed("connection_error") from exc
        data = response.data
        return data if isinstance(data, dict) else None

    def permalink(self, channel: str, ts: str) -> str | None:
        """chat.getPermalink of a message (a case's thread root), remembered; None when Slack has none."""
        key = f"{channel}/{ts}"
        if key not in self._permalinks:
            try:
                data = self._call("chat.getPermalink", channel=channel, message_ts=ts)
            except _CallFailed:
                return None  # said as "its thread"; asked again next time
            link = (data or {}).get("permalink")
            if not isinstance(link, str):
                return None
            self._permalinks[key] = link
        return self._permalinks[key]

    def _links(self, message: Message) -> dict[str, str]:
        found = ((f"{c}/{t}", self.permalink(c, t)) for c, t in thread_refs(message))
        return {key: link for key, link in found if link is not None}

    def post(self, where: Location, message: Message, *, attachment_uploaded: bool = False) -> str | None:
        """chat.postMessage; returns the new message's ts (None if Slack refused even plain text)."""
        with permalinks(self._links(message)):
            return self._post(where, message, attachment_uploaded=attachment_uploaded)

    def _post(self, where: Location, message: Message, *, attachment_uploaded: bool) -> str | None:
        base: dict[str, Any] = {"channel": where.channel}
        if where.thread_ts:
            base["thread_ts"] = where.thread_ts
        try:
            data = self._call(
                "chat.postMessage",
                **base,
                **message_payload(message, attachment_uploaded=attachment_uploaded),
            )
            return str(data["ts"]) if data and data.get("ts") else None
        except _CallFailed as failed:
            if failed.code not in _BLOCK_ERRORS and failed.code not in {"missing_scope", "unknown_method"}:
                return None
        try:
            data = self._call("chat.postMessage", **base, text=notification_text(message))
            return str(data["ts"]) if data and data.get("ts") else None
        except _CallFailed:
            return None

    def update(self, channel: str, ts: str, message: Message, *, attachment_uploaded: bool = False) -> bool:
        """chat.update in place; False tells the caller to post instead."""
        with permalinks(self._links(message)):
            return self._update(channel, ts, message, attachment_uploaded=attachment_uploaded)

    def _update(self, channel: str, ts: str, message: Message, *, attachment_uploaded: bool) -> bool:
        try:
            self._call(
                "chat.update",
                channel=channel,
                ts=ts,
                **message_payload(message, attachment_uploaded=attachment_uploaded),
            )
            return True
        except _CallFailed as failed:
            if failed.code not in _BLOCK_ERRORS:
                return False
        try:
            self._call("chat.update", channel=channel, ts=ts, text=notification_text(message), blocks=[])
            return True
        except _CallFailed:
            return False

    def post_text(self, where: Location, text: str) -> str | None:
        base: dict[str, Any] = {"channel": where.channel, "text": text}
        if where.thread_ts:
            base["thread_ts"] = where.thread_ts
        try:
            data = self._call("chat.postMessage", **base)
        except _CallFailed:
            return None
        return str(data["ts"]) if data and data.get("ts") else None

    def ephemeral(self, channel: str, user: str, message: Message) -> bool:
        try:
            self._call("chat.postEphemeral", channel=channel, user=user, **message_payload(message))
            return True
        except _CallFailed:
            try:
                self._call("chat.postEphemeral", channel=channel, user=user, text=notification_text(message))
                return True
            except _CallFailed:
                return False

    def respond(self, response_url: str, message: Message, *, ephemeral: bool) -> bool:
        """Answer through the command's response_url (works even where the bot is not a member)."""
        with permalinks(self._links(message)):
            payload = {
                "response_type": "ephemeral" if ephemeral else "in_channel",
                "replace_original": False,
                **message_payload(message),
            }
        try:
            r = self._responder.post(response_url, json=payload)
        except httpx.HTTPError as exc:
            log.warning("response_url post failed: %s", exc)
            return False
        return r.status_code < 400

    def upload(self, where: Location, attachment: Attachment) -> bool:
        """files.getUploadURLExternal + completeUploadExternal; False → show a truncated preview."""
        if not self._uploads_work:
            return False
        try:
            self.client.files_upload_v2(
                filename=attachment.filename,
                content=attachment.text.encode("utf-8"),
                title=attachment.filename,
                channel=where.channel,
                thread_ts=where.thread_ts,
                request_file_info=False,
            )
            return True
        except SlackClientError as exc:
            code = _error_code(exc)
            log.warning("file upload failed (%s): showing a truncated preview instead", code)
            if code in {"missing_scope", "unknown_method", "not_allowed_token_type"}:
                self._uploads_work = False  # do not ask again on every message
            return False
        except (OSError, ValueError) as exc:
            log.warning("file upload failed: %s", exc)
            return False

    def open_view(self, trigger_id: str, view: View) -> bool:
        try:
            self._call("views.open", trigger_id=trigger_id, view=view.to_dict())
            return True
        except _CallFailed:
            return False

    def publish_home(self, user_id: str, view: View) -> bool:
        try:
            self._call("views.publish", user_id=user_id, view=view.to_dict())
            return True
        except _CallFailed:
            return False


class _CallFailed(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class SlackDirectoryError(OnCallUnavailable):
    """Slack would not tell us who is in a user group (or who has an email address)."""


class SlackDirectory(OnCallDirectory):
    """The core's ApproverDirectory over Slack: user-group members, and Slack ids by email.

    ``on_call`` (``members``) asks ``usergroups.users.list`` each time (membership changes during an
    incident); if Slack refuses (e.g. ``missing_scope``) it raises, and the core refuses the approval
    (fail closed). ``slack_id_for_email`` (``users.lookupByEmail``) maps another source's people to
    Slack ids; its callers cache it.
    """

    def __init__(self, client: WebClient) -> None:
        self.client = client
        self._lock = threading.Lock()

    def on_call(self, group_id: str) -> OnCall:
        try:
            response = self.client.usergroups_users_list(usergroup=group_id)
        except (SlackClientError, OSError, ValueError) as exc:
            code = redact(_error_code(exc) if isinstance(exc, SlackClientError) else str(exc))
            log.warning("cannot list the members of user group %s (%s)", group_id, code)
            # The core refuses (never allows) when a group cannot be read, and says why.
            raise SlackDirectoryError(
                f"Slack could not list user group {group_id}: {code}",
                hint="Add the usergroups:read scope to the Slack app, or list approvers by user id.",
            ) from exc
        users = response.get("users") or []
        return OnCall(group_id, f"Slack user group {group_id}", frozenset(str(u) for u in users))

    def slack_id_for_email(self, email: str) -> str | None:
        """The active Slack user with this email address, or None when Slack has none."""
        try:
            response = self.client.users_lookupByEmail(email=email)
        except (SlackClientError, OSError, ValueError) as exc:
            code = redact(_error_code(exc) if isinstance(exc, SlackClientError) else str(exc))
            if code == "users_not_found":
                return None
            log.warning("cannot look up a Slack user by email (%s)", code)
            raise SlackDirectoryError(
                f"Slack could not look up users by email: {code}",
                hint="Add the users:read.email scope to the Slack app (the PagerDuty on-call source needs it)."
                if code in ("missing_scope", "not_allowed_token_type")
                else "Try again shortly.",
            ) from exc
        user = response.get("user") or {}
        if not isinstance(user, dict) or not user.get("id") or user.get("deleted"):
            return None
        return str(user["id"])


def approver_directory(settings: Settings, client: WebClient) -> OnCallDirectory:
    """The directory approver groups are resolved through: Slack user groups, and the tiers mapped to
    PagerDuty escalation policies (RECOVER_ONCALL_PAGERDUTY_POLICIES) through PagerDuty."""
    return oncall_directory(settings, SlackDirectory(client))
