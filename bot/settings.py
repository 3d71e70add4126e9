"""Settings, read once at start from the environment and an optional ``.env`` file.

Names are fixed (tools and deployments rely on them). Validation reports every problem at once, one
line each, and never prints a secret's value. Further settings use the ``RECOVER_`` prefix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bot.errors import SettingsError
from bot.redact import register_secret

DEFAULT_SLACK_API_URL = "https://slack.com/api/"
_REPO_RUNBOOKS = Path(__file__).resolve().parent.parent / "runbooks"
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_GROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")

SECRET_NAMES = ("CONTROL_HOST_API_KEY", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN")


@dataclass(frozen=True)
class Settings:
    """Validated settings. Secrets are kept out of ``repr`` so they never reach a log."""

    control_host_url: str | None = None
    control_host_api_key: str | None = field(default=None, repr=False)
    db_path: Path = Path("./recover.db")
    slack_bot_token: str | None = field(default=None, repr=False)
    slack_signing_secret: str | None = field(default=None, repr=False)
    slack_app_token: str | None = field(default=None, repr=False)
    slack_api_url: str = DEFAULT_SLACK_API_URL
    approvers: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    installation: str | None = None
    docker_host: str | None = None
    host: str = "127.0.0.1"
    port: int = 3000
    runbooks_dir: Path = _REPO_RUNBOOKS
    log_files: str | None = None
    log_level: str = "INFO"

    @property
    def approver_users(self) -> tuple[str, ...]:
        return tuple(a for a in self.approvers if not a.startswith("S"))

    @property
    def approver_groups(self) -> tuple[str, ...]:
        return tuple(a for a in self.approvers if a.startswith("S"))

    def require_control_host(self) -> None:
        """Commands that talk to the control host call this: a clear message instead of a crash."""
        problems = []
        if not self.control_host_url:
            problems.append(
                "CONTROL_HOST_URL is not set: the control host's API base URL, e.g. https://control.example.internal"
            )
        if not self.control_host_api_key:
            problems.append(
                "CONTROL_HOST_API_KEY is not set: an API key with the sessions:recover scope (R0.1)"
            )
        if problems:
            raise SettingsError(problems)

    def require_slack(self) -> None:
        problems = []
        if not self.slack_bot_token:
            problems.append(
                "SLACK_BOT_TOKEN is not set: the bot token (xoxb-…) from the Slack app's OAuth page"
            )
        if not self.slack_signing_secret and not self.slack_app_token:
            problems.append(
                "SLACK_SIGNING_SECRET is not set: needed to verify requests in HTTP mode "
                "(or set SLACK_APP_TOKEN for Socket Mode)"
            )
        if problems:
            raise SettingsError(problems)


def read_dotenv(path: Path) -> dict[str, str]:
    """Parse a simple ``.env`` file: ``NAME=value`` lines, ``#`` comments, optional quotes."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :]
        name, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def _split_ids(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def load_settings(env: Mapping[str, str] | None = None, dotenv: Path | None = Path(".env")) -> Settings:
    """Read and validate settings; the process environment wins over ``.env``.

    Raises :class:`SettingsError` listing every problem (never a secret's value).
    """
    merged: dict[str, str] = {}
    if dotenv is not None:
        merged.update(read_dotenv(dotenv))
    merged.update(os.environ if env is None else env)
    problems: list[str] = []

    def get(name: str) -> str | None:
        value = merged.get(name)
        return value.strip() if value and value.strip() else None

    url = get("CONTROL_HOST_URL")
    if url and not re.match(r"^https?://[^\s/]+", url):
        problems.append(f"CONTROL_HOST_URL must start with http:// or https:// (got {url!r})")
    if url:
        url = url.rstrip("/")

    slack_api_url = get("SLACK_API_URL") or DEFAULT_SLACK_API_URL
    if not re.match(r"^https?://[^\s/]+", slack_api_url):
        problems.append(f"SLACK_API_URL must be an http(s) URL ending in /api/ (got {slack_api_url!r})")
    if not slack_api_url.endswith("/"):
        slack_api_url += "/"

    approvers = _split_ids(get("RECOVER_APPROVERS") or "")
    for a in approvers:
        if not (_USER_ID.match(a) or _GROUP_ID.match(a)):
            problems.append(f"RECOVER_APPROVERS: {a!r} is not a Slack user id (U…/W…) or user-group id (S…)")
    channels = _split_ids(get("RECOVER_CHANNELS") or "")
    for c in channels:
        if not _CHANNEL_ID.match(c):
            problems.append(f"RECOVER_CHANNELS: {c!r} is not a Slack channel id (C…/G…)")

    port_text = get("PORT") or "3000"
    port = 3000
    try:
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        problems.append(f"PORT must be a number from 0 to 65535 (got {port_text!r}; 0 = any free port)")

    bot_token = get("SLACK_BOT_TOKEN")
    if bot_token and not bot_token.startswith("xoxb-"):
        problems.append("SLACK_BOT_TOKEN does not look like a bot token (it should start with xoxb-)")
    app_token = get("SLACK_APP_TOKEN")
    if app_token and not app_token.startswith("xapp-"):
        problems.append("SLACK_APP_TOKEN does not look like an app-level token (it should start with xapp-)")

    runbooks_dir = Path(get("RECOVER_RUNBOOKS") or _REPO_RUNBOOKS)
    if not runbooks_dir.is_dir():
        problems.append(f"RECOVER_RUNBOOKS: {runbooks_dir} is not a directory of runbook YAML files")

    log_level = (get("RECOVER_LOG_LEVEL") or "INFO").upper()
    if log_level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        problems.append(f"RECOVER_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR (got {log_level!r})")

    for name in SECRET_NAMES:
        register_secret(get(name))

    if problems:
        raise SettingsError(problems)

    return Settings(
        control_host_url=url,
        control_host_api_key=get("CONTROL_HOST_API_KEY"),
        db_path=Path(get("RECOVER_DB") or "./recover.db"),
        slack_bot_token=bot_token,
        slack_signing_secret=get("SLACK_SIGNING_SECRET"),
        slack_app_token=app_token,
        slack_api_url=slack_api_url,
        approvers=approvers,
        channels=channels,
        installation=get("RECOVER_INSTALLATION"),
        docker_host=get("DOCKER_HOST"),
        host=get("HOST") or "127.0.0.1",
        port=port,
        runbooks_dir=runbooks_dir,
        log_files=get("RECOVER_LOG_FILES"),
        log_level=log_level,
    )
