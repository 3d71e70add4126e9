"""Which workspace and which app a request must come from; everything else is refused before a listener.

Why: the signing secret belongs to the app, not to a workspace, so a correctly signed request can come
from another workspace the app is installed in (or, in Socket Mode, from any app sharing the token's
connection). Without this check a user of another workspace could approve a request here.

- Workspaces: ``RECOVER_SLACK_TEAMS`` (team ids ``T…`` and, for Enterprise Grid, ``E…``) when set,
  otherwise exactly the team of the bot token (``team_id`` from ``auth.test`` at start). An Enterprise
  Grid org is served only when ``RECOVER_SLACK_TEAMS`` names its ``E…`` id: by default another
  workspace of the same org is refused, whoever signs its requests.
- App: ``bots.info`` for the token's bot at start; when Slack will not say, the app id is not
  checked (logged once), the workspace still is.

Commands are checked by ``team_id`` / ``enterprise_id`` and ``api_app_id``; interactions by
``team.id`` / ``enterprise.id``, ``user.team_id`` and ``api_app_id``; events by ``team_id`` and
``api_app_id``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from slack_bolt import BoltResponse
from slack_sdk import WebClient
from slack_sdk.errors import SlackClientError

from bot.redact import redact

log = logging.getLogger("recover_bot.slack")


@dataclass(frozen=True)
class Tenancy:
    """The workspaces (team or enterprise ids) and the app id requests must carry."""

    teams: frozenset[str]
    app_id: str | None

    @classmethod
    def discover(cls, client: WebClient, configured: Iterable[str] = ()) -> Tenancy:
        """From the settings, else from ``auth.test``; the app id from ``bots.info``.

        Raises when neither the settings nor ``auth.test`` name a workspace: serving without knowing
        whose requests to accept would accept everyone's.
        """
        teams = {t for t in configured if t}
        bot_id: str | None = None
        try:
            auth = client.auth_test()
            bot_id = auth.get("bot_id")
            if not teams:
                teams = {str(auth["team_id"])} if auth.get("team_id") else set()
                if auth.get("enterprise_id"):
                    log.info(
                        "serving workspace %s only; its Enterprise Grid org %s is served when RECOVER_SLACK_TEAMS "
                        "names it",
                        auth.get("team_id"),
                        auth.get("enterprise_id"),
                    )
        except (SlackClientError, OSError, ValueError) as exc:
            if not teams:
                raise RuntimeError(
                    f"auth.test failed ({redact(str(exc))[:200]}): cannot tell which workspace to serve; "
                    "set RECOVER_SLACK_TEAMS"
                ) from exc
        if not teams:
            raise RuntimeError("auth.test named no workspace: set RECOVER_SLACK_TEAMS")
        app_id: str | None = None
        if bot_id:
            try:
                app_id = (client.bots_info(bot=bot_id).get("bot") or {}).get("app_id")
            except (SlackClientError, OSError, ValueError) as exc:
                log.warning("bots.info unavailable (%s): the app id of requests is not checked", str(exc)[:200])
        return cls(frozenset(teams), str(app_id) if app_id else None)

    def refusal(self, body: dict[str, Any]) -> str | None:
        """Why this request is not ours, or None when it is."""
        team = body.get("team")
        enterprise = body.get("enterprise")
        user = body.get("user")
        teams = {
            body.get("team_id"),
            body.get("enterprise_id"),
            team.get("id") if isinstance(team, dict) else None,
            enterprise.get("id") if isinstance(enterprise, dict) else None,
        } - {None, ""}
        if not teams & self.teams:
            return f"workspace {sorted(map(str, teams)) or 'unknown'} is not served here"
        # In an Enterprise Grid org a user's home team may differ from the channel's: the org id decides.
        orgs = {body.get("enterprise_id"), enterprise.get("id") if isinstance(enterprise, dict) else None}
        user_team = user.get("team_id") if isinstance(user, dict) else None
        if user_team and user_team not in self.teams and not (orgs & self.teams):
            return f"user of workspace {user_team} is not served here"
        if self.app_id is not None and body.get("api_app_id") != self.app_id:
            return f"app {body.get('api_app_id')!r} is not this app"
        return None


def tenancy_middleware(tenancy: Tenancy) -> Callable[..., Any]:
    """A Bolt global middleware refusing (403, nothing run) what :meth:`Tenancy.refusal` refuses."""

    def check(body: dict[str, Any], next: Callable[[], Any]) -> Any:  # noqa: A002 - Bolt's argument name
        why = tenancy.refusal(body)
        if why is None:
            return next()
        log.warning("refused a request from outside: %s", why)
        return BoltResponse(status=403, body="this workspace or app is not served by this bot")

    return check
