"""The validated settings, the groups each part of the bot reads, and what each group requires.

Secrets are ``SecretStr``: ``repr`` and errors never show them. The parsing of each value lives in
:mod:`bot.settings._parse`; reading the environment and ``.env`` in :mod:`bot.settings._load`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from bot.errors import SettingsError
from bot.settings import _parse
from bot.settings._parse import (
    DEFAULT_DB,
    DEFAULT_HOST,
    DEFAULT_PAGERDUTY_URL,
    DEFAULT_PORT,
    DEFAULT_SLACK_API_URL,
    packaged_runbooks,
)

SECRET_NAMES = (
    "CONTROL_HOST_API_KEY",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "RECOVER_AUDIT_KEY",
    "RECOVER_ONCALL_PAGERDUTY_TOKEN",
)

# A secret's file form (a mounted secret, /run/secrets/…): the file's text, its trailing newline
# stripped, is the value (bot/settings/_load.py reads it). RECOVER_AUDIT_KEY_FILE is read where it is
# used (Settings.audit_key_bytes), so a rotated key file is picked up by the next `audit verify`.
SECRET_FILES: dict[str, str] = {
    "control_host_api_key": "control_host_api_key_file",
    "slack_bot_token": "slack_bot_token_file",
    "slack_signing_secret": "slack_signing_secret_file",
    "slack_app_token": "slack_app_token_file",
    "oncall_pagerduty_token": "oncall_pagerduty_token_file",
}
# RECOVER_AUDIT_KEY=none: the deployer runs unkeyed on purpose (serve refuses to start with no key).
NO_AUDIT_KEY = "none"

# Which settings each part of the bot reads; a subcommand names the groups it uses (bot/cli.py).
GROUPS: dict[str, tuple[str, ...]] = {
    "control_host": ("control_host_url", "control_host_api_key", "control_host_api_key_file", "installations_file"),
    "store": ("db_path", "db_url", "db_url_file"),
    "audit": ("audit_key", "audit_key_file"),
    "slack": (
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "slack_bot_token_file",
        "slack_signing_secret_file",
        "slack_app_token_file",
        "slack_api_url",
        "slack_teams",
    ),  # fmt: skip
    "people": ("approvers", "channels", "console_users"),
    "docker": (
        "compose_project",
        "docker_host",
        "docker_tls_verify",
        "docker_cert_path",
        "docker_plain_tcp",
        "log_files",
    ),
    "http": ("host", "port", "worker_stale_seconds"),
    "runbooks": ("runbooks_dir",),
    "logging": ("log_level",),
    "watch": ("watch_channel", "watch_interval"),
    "oncall": (
        "oncall_pagerduty_token",
        "oncall_pagerduty_token_file",
        "oncall_pagerduty_url",
        "oncall_pagerduty_policies",
        "oncall_pagerduty_schedules",
    ),  # fmt: skip
}
ALL_GROUPS = frozenset(GROUPS)


class Settings(BaseSettings):
    """Validated settings. Secrets are ``SecretStr``: ``repr`` and errors never show them.

    Tests may build one directly (``Settings(db_path=...)``) and derive variants with ``model_copy``.
    """

    model_config = SettingsConfigDict(
        frozen=True,
        extra="ignore",
        case_sensitive=True,
        env_ignore_empty=True,
        populate_by_name=True,
        hide_input_in_errors=True,
        env_file=None,
    )

    control_host_url: str | None = Field(None, validation_alias="CONTROL_HOST_URL")
    control_host_api_key: SecretStr | None = Field(None, validation_alias="CONTROL_HOST_API_KEY")
    control_host_api_key_file: Path | None = Field(None, validation_alias="CONTROL_HOST_API_KEY_FILE")
    # Several installations (bot/installations/loader.py): each names its control host and key there.
    installations_file: Path | None = Field(None, validation_alias="RECOVER_INSTALLATIONS_FILE")
    db_path: Path = Field(DEFAULT_DB, validation_alias="RECOVER_DB")
    # RECOVER_DB when it is a postgresql:// URL (a secret: it may carry a password), or the URL that
    # RECOVER_DB_FILE holds (a mounted secret); bot/settings/_load.py puts it here. Read with
    # store_target, never printed. No variable of its own: RECOVER_DB is the one name.
    db_url: SecretStr | None = Field(None)
    db_url_file: Path | None = Field(None, validation_alias="RECOVER_DB_FILE")
    audit_key: SecretStr | None = Field(None, validation_alias="RECOVER_AUDIT_KEY")
    audit_key_file: Path | None = Field(None, validation_alias="RECOVER_AUDIT_KEY_FILE")
    slack_bot_token: SecretStr | None = Field(None, validation_alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(None, validation_alias="SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = Field(None, validation_alias="SLACK_APP_TOKEN")
    slack_bot_token_file: Path | None = Field(None, validation_alias="SLACK_BOT_TOKEN_FILE")
    slack_signing_secret_file: Path | None = Field(None, validation_alias="SLACK_SIGNING_SECRET_FILE")
    slack_app_token_file: Path | None = Field(None, validation_alias="SLACK_APP_TOKEN_FILE")
    slack_api_url: str = Field(DEFAULT_SLACK_API_URL, validation_alias="SLACK_API_URL")
    # NoDecode: pydantic-settings would otherwise parse list-typed values as JSON; these are comma lists.
    slack_teams: Annotated[tuple[str, ...], NoDecode] = Field((), validation_alias="RECOVER_SLACK_TEAMS")
    approvers: Annotated[tuple[str, ...], NoDecode] = Field((), validation_alias="RECOVER_APPROVERS")
    channels: Annotated[tuple[str, ...], NoDecode] = Field((), validation_alias="RECOVER_CHANNELS")
    console_users: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias="RECOVER_CONSOLE_USERS"
    )
    # The control host's compose project (labels find its reconciler and workers); the variable keeps its
    # old name, the attribute says what it is (an "installation" is an entry of RECOVER_INSTALLATIONS_FILE).
    compose_project: str | None = Field(None, validation_alias="RECOVER_INSTALLATION")
    docker_host: str | None = Field(None, validation_alias="DOCKER_HOST")
    docker_tls_verify: bool = Field(False, validation_alias="DOCKER_TLS_VERIFY")
    docker_cert_path: Path | None = Field(None, validation_alias="DOCKER_CERT_PATH")
    docker_plain_tcp: bool = Field(False, validation_alias="RECOVER_DOCKER_PLAIN_TCP")
    host: str = Field(DEFAULT_HOST, validation_alias="HOST")
    port: int = Field(DEFAULT_PORT, validation_alias="PORT")
    runbooks_dir: Path = Field(default_factory=packaged_runbooks, validation_alias="RECOVER_RUNBOOKS")
    log_files: str | None = Field(None, validation_alias="RECOVER_LOG_FILES")
    log_level: str = Field("INFO", validation_alias="RECOVER_LOG_LEVEL")
    watch_channel: str | None = Field(None, validation_alias="RECOVER_WATCH_CHANNEL")
    watch_interval: float | None = Field(None, validation_alias="RECOVER_WATCH_INTERVAL")
    # serve: how long a worker (of this bot or another on one PostgreSQL store) may go without a beat
    # before the deliveries it claimed are taken for interrupted (bot/slack/inbox.py, R0.3).
    worker_stale_seconds: float = Field(30.0, validation_alias="RECOVER_WORKER_STALE_SECONDS")
    # The optional PagerDuty on-call source (bot/oncall): tier id (S…) → escalation policy id.
    oncall_pagerduty_token: SecretStr | None = Field(None, validation_alias="RECOVER_ONCALL_PAGERDUTY_TOKEN")
    oncall_pagerduty_token_file: Path | None = Field(None, validation_alias="RECOVER_ONCALL_PAGERDUTY_TOKEN_FILE")
    oncall_pagerduty_url: str = Field(DEFAULT_PAGERDUTY_URL, validation_alias="RECOVER_ONCALL_PAGERDUTY_URL")
    oncall_pagerduty_policies: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias="RECOVER_ONCALL_PAGERDUTY_POLICIES"
    )
    # Optionally, within a tier's policy, the one schedule its on-call users must come from.
    oncall_pagerduty_schedules: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias="RECOVER_ONCALL_PAGERDUTY_SCHEDULES"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what the caller passes: :func:`bot.settings.load_settings` reads the environment and
        ``.env``. So ``Settings(db_path=...)`` in a test is exactly its defaults plus what it names.
        """
        return (init_settings,)

    # --- parsing (bot/settings/_parse.py): "before" validators see the raw value, of any type ---

    _optional_text = field_validator("control_host_url", "compose_project", "docker_host", "log_files", mode="before")(
        _parse.optional_text
    )
    _control_host_url = field_validator("control_host_url", mode="after")(_parse.control_host_url)
    _secret = field_validator(
        "control_host_api_key", "slack_signing_secret", "audit_key", "slack_bot_token", "slack_app_token",
        "oncall_pagerduty_token", mode="before",
    )(_parse.secret)  # fmt: skip
    _db_path = field_validator("db_path", mode="before")(_parse.db_path)
    _db_url = field_validator("db_url", mode="before")(_parse.db_url)
    _files = field_validator(
        "audit_key_file", "control_host_api_key_file", "slack_bot_token_file", "slack_signing_secret_file",
        "slack_app_token_file", "installations_file", "oncall_pagerduty_token_file", "db_url_file", mode="before",
    )(_parse.optional)  # fmt: skip
    _slack_api_url = field_validator("slack_api_url", mode="before")(_parse.slack_api_url)
    _approvers = field_validator("approvers", mode="before")(_parse.approvers)
    _channels = field_validator("channels", mode="before")(_parse.channels)
    _teams = field_validator("slack_teams", mode="before")(_parse.teams)
    _console_users = field_validator("console_users", mode="before")(_parse.console_users)
    _host = field_validator("host", mode="before")(_parse.host)
    _port = field_validator("port", mode="before")(_parse.port)
    _runbooks_dir = field_validator("runbooks_dir", mode="before")(_parse.runbooks_dir)
    _log_level = field_validator("log_level", mode="before")(_parse.log_level)
    _watch_channel = field_validator("watch_channel", mode="before")(_parse.watch_channel)
    _watch_interval = field_validator("watch_interval", mode="before")(_parse.watch_interval)
    _worker_stale = field_validator("worker_stale_seconds", mode="before")(_parse.worker_stale_seconds)
    _pagerduty_url = field_validator("oncall_pagerduty_url", mode="before")(_parse.pagerduty_url)
    _pagerduty_policies = field_validator("oncall_pagerduty_policies", mode="before")(_parse.pagerduty_policies)
    _pagerduty_schedules = field_validator("oncall_pagerduty_schedules", mode="before")(_parse.pagerduty_schedules)
    _docker_tls_verify = field_validator("docker_tls_verify", mode="before")(_parse.docker_tls_verify)
    _docker_cert_path = field_validator("docker_cert_path", mode="before")(_parse.optional)
    _docker_plain_tcp = field_validator("docker_plain_tcp", mode="before")(_parse.docker_plain_tcp)

    @field_validator("slack_bot_token", mode="after")
    @classmethod
    def _bot_token(cls, value: SecretStr | None) -> SecretStr | None:
        return _parse.token(value, "SLACK_BOT_TOKEN", "xoxb-", "a bot token")

    @field_validator("slack_app_token", mode="after")
    @classmethod
    def _app_token(cls, value: SecretStr | None) -> SecretStr | None:
        return _parse.token(value, "SLACK_APP_TOKEN", "xapp-", "an app-level token")

    # --- accessors ---

    @property
    def store_target(self) -> str | Path:
        """What the step store opens (bot/store/_engine.py): the PostgreSQL URL, or the SQLite file."""
        return self.db_url.get_secret_value() if self.db_url is not None else self.db_path

    @property
    def audit_unkeyed_on_purpose(self) -> bool:
        """``RECOVER_AUDIT_KEY=none``: the deployer chose an unkeyed chain (accidental damage only)."""
        return self.audit_key is not None and self.audit_key.get_secret_value() == NO_AUDIT_KEY

    def audit_key_bytes(self) -> bytes | None:
        """The audit chain's key: ``RECOVER_AUDIT_KEY``, or the first line of ``RECOVER_AUDIT_KEY_FILE``."""
        if self.audit_unkeyed_on_purpose:
            return None
        if self.audit_key is not None:
            return self.audit_key.get_secret_value().encode()
        if self.audit_key_file is not None:
            try:
                text = self.audit_key_file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SettingsError([_key_file_problem(self.audit_key_file, exc)]) from None
            lines = text.splitlines()
            return lines[0].strip().encode() if lines and lines[0].strip() else None
        return None

    def problems_for(self, groups: Iterable[str]) -> list[str]:
        """What is missing for these groups to be usable (empty: ready)."""
        problems: list[str] = []
        for group in groups:
            check = _REQUIREMENTS.get(group)
            if check is not None:
                problems.extend(check(self))
        return problems

    def require_control_host(self) -> None:
        """Commands that talk to the control host call this: a clear message instead of a crash."""
        problems = self.problems_for(["control_host"])
        if problems:
            raise SettingsError(problems)

    def require_slack(self) -> None:
        problems = self.problems_for(["slack"])
        if problems:
            raise SettingsError(problems)


def _key_file_problem(path: Path, exc: BaseException) -> str:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
    return f"RECOVER_AUDIT_KEY_FILE: cannot read {path} ({reason}); give a readable file holding the key"


def _control_host_missing(s: Settings) -> list[str]:
    if s.installations_file is not None:
        # The file names every installation's control host and key; a URL beside it would be a guess.
        if s.control_host_url:
            return [
                "RECOVER_INSTALLATIONS_FILE and CONTROL_HOST_URL are both set: keep one (the file names "
                "each installation's control_host_url)"
            ]
        return []
    problems = []
    if not s.control_host_url:
        problems.append(
            "CONTROL_HOST_URL is not set: the control host's API base URL, e.g. https://control.example.internal"
        )
    if s.control_host_api_key is None:
        problems.append("CONTROL_HOST_API_KEY is not set: an API key with the sessions:recover scope (R0.1)")
    return problems


def _slack_missing(s: Settings) -> list[str]:
    problems = []
    if s.slack_bot_token is None:
        problems.append("SLACK_BOT_TOKEN is not set: the bot token (xoxb-…) from the Slack app's OAuth page")
    if s.slack_signing_secret is None and s.slack_app_token is None:
        problems.append(
            "SLACK_SIGNING_SECRET is not set: needed to verify requests in HTTP mode "
            "(or set SLACK_APP_TOKEN for Socket Mode)"
        )
    return problems


def audit_key_missing(s: Settings) -> list[str]:
    """For ``serve``: a chain without a key detects accidental damage, not a writer; say it on purpose."""
    if s.audit_key is not None or s.audit_key_file is not None:
        return []
    return [
        "RECOVER_AUDIT_KEY is not set: serve keys the audit chain with it (or RECOVER_AUDIT_KEY_FILE, "
        "a mounted secret); set RECOVER_AUDIT_KEY=none to run unkeyed on purpose"
    ]


def _audit_problems(s: Settings) -> list[str]:
    """Not a requirement (an unkeyed store is still verified); a key that is given must be usable."""
    if s.audit_key is not None and s.audit_key_file is not None:
        return ["RECOVER_AUDIT_KEY and RECOVER_AUDIT_KEY_FILE are both set: keep one"]
    if s.audit_key_file is not None:
        if s.audit_key_file.resolve().parent == s.db_path.resolve().parent:
            return [
                f"RECOVER_AUDIT_KEY_FILE: {s.audit_key_file} sits beside the database ({s.db_path}); "
                "keep the key outside the data volume, or whoever can edit the steps can re-key them"
            ]
        try:
            key = s.audit_key_bytes()
        except SettingsError as exc:
            return exc.problems
        if key is None:
            return [f"RECOVER_AUDIT_KEY_FILE: {s.audit_key_file} is empty; its first line is the key"]
    return []


_REQUIREMENTS: dict[str, Callable[[Settings], list[str]]] = {
    "control_host": _control_host_missing,
    "slack": _slack_missing,
    "audit": _audit_problems,
}
