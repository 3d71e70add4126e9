"""Settings, read once at start from the environment and an optional ``.env`` file (pydantic-settings).

Names are fixed (tools and deployments rely on them); further settings use the ``RECOVER_`` prefix.
Validation reports every problem at once, one line each, and never prints a secret's value (secrets
are ``SecretStr``). Each subcommand asks only for the groups of settings it uses (:data:`GROUPS`), so
a typo in ``PORT`` never stops ``audit verify``; within those groups every problem is named in one run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from bot.errors import SettingsError
from bot.redact import register_secret

DEFAULT_SLACK_API_URL = "https://slack.com/api/"
RUNBOOKS_PACKAGE = "bot.runbooks_data"
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_GROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")
_TEAM_ID = re.compile(r"^[TE][A-Z0-9]{2,}$")
_LOGIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?$")
_URL = re.compile(r"^https?://[^\s/]+")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

SECRET_NAMES = (
    "CONTROL_HOST_API_KEY",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "RECOVER_AUDIT_KEY",
)

# Which settings each part of the bot reads; a subcommand names the groups it uses (bot/cli.py).
GROUPS: dict[str, tuple[str, ...]] = {
    "control_host": ("control_host_url", "control_host_api_key"),
    "store": ("db_path",),
    "audit": ("audit_key", "audit_key_file"),
    "slack": ("slack_bot_token", "slack_signing_secret", "slack_app_token", "slack_api_url", "slack_teams"),
    "people": ("approvers", "channels", "console_users"),
    "docker": ("installation", "docker_host", "log_files"),
    "http": ("host", "port"),
    "runbooks": ("runbooks_dir",),
    "logging": ("log_level",),
}
ALL_GROUPS = frozenset(GROUPS)


def packaged_runbooks() -> Path:
    """The runbooks shipped in the package: the repository's top-level ``runbooks/`` folder.

    An editable install made before the folder was packaged cannot import it: the checkout's folder
    is the same files.
    """
    try:
        return Path(str(resources.files(RUNBOOKS_PACKAGE)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "runbooks"


def reveal(secret: SecretStr | None) -> str | None:
    """A secret's value, for the one call that needs it (a client's constructor); never log it."""
    return secret.get_secret_value() if secret is not None else None


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _split(value: Any) -> tuple[str, ...]:
    """A comma list from the environment (``"U1, U2"``) or an already parsed sequence."""
    if _blank(value):
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return tuple(str(part).strip() for part in value)


def _alias(name: str) -> str:
    return str(Settings.model_fields[name].validation_alias)


def _field(alias: str, default: Any = None, **kwargs: Any) -> Any:
    return Field(default, validation_alias=alias, **kwargs)


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

    control_host_url: str | None = _field("CONTROL_HOST_URL")
    control_host_api_key: SecretStr | None = _field("CONTROL_HOST_API_KEY")
    db_path: Path = _field("RECOVER_DB", Path("./recover.db"))
    audit_key: SecretStr | None = _field("RECOVER_AUDIT_KEY")
    audit_key_file: Path | None = _field("RECOVER_AUDIT_KEY_FILE")
    slack_bot_token: SecretStr | None = _field("SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = _field("SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = _field("SLACK_APP_TOKEN")
    slack_api_url: str = _field("SLACK_API_URL", DEFAULT_SLACK_API_URL)
    # NoDecode: pydantic-settings would otherwise parse list-typed values as JSON; these are comma lists.
    slack_teams: Annotated[tuple[str, ...], NoDecode] = _field("RECOVER_SLACK_TEAMS", ())
    approvers: Annotated[tuple[str, ...], NoDecode] = _field("RECOVER_APPROVERS", ())
    channels: Annotated[tuple[str, ...], NoDecode] = _field("RECOVER_CHANNELS", ())
    console_users: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias="RECOVER_CONSOLE_USERS"
    )
    installation: str | None = _field("RECOVER_INSTALLATION")
    docker_host: str | None = _field("DOCKER_HOST")
    host: str = _field("HOST", "127.0.0.1")
    port: int = _field("PORT", 3000)
    runbooks_dir: Path = Field(default_factory=packaged_runbooks, validation_alias="RECOVER_RUNBOOKS")
    log_files: str | None = _field("RECOVER_LOG_FILES")
    log_level: str = _field("RECOVER_LOG_LEVEL", "INFO")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what the caller passes: :func:`load_settings` reads the environment and ``.env``.

        So ``Settings(db_path=...)`` in a test is exactly its defaults plus what it names.
        """
        return (init_settings,)

    # --- parsing: every message names the setting and what to put there, never a secret's value ---

    @field_validator("control_host_url", "installation", "docker_host", "log_files", mode="before")
    @classmethod
    def _optional_text(cls, value: Any) -> Any:
        return None if _blank(value) else value.strip() if isinstance(value, str) else value

    @field_validator("control_host_url", mode="after")
    @classmethod
    def _control_host_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _URL.match(value):
            raise ValueError(f"CONTROL_HOST_URL must start with http:// or https:// (got {value!r})")
        return value.rstrip("/")

    @field_validator(
        "control_host_api_key", "slack_signing_secret", "audit_key", "slack_bot_token", "slack_app_token",
        mode="before",
    )  # fmt: skip
    @classmethod
    def _secret(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return None if _blank(value) else str(value).strip()

    @field_validator("slack_bot_token", mode="after")
    @classmethod
    def _bot_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("xoxb-"):
            raise ValueError("SLACK_BOT_TOKEN does not look like a bot token (it should start with xoxb-)")
        return value

    @field_validator("slack_app_token", mode="after")
    @classmethod
    def _app_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("xapp-"):
            raise ValueError("SLACK_APP_TOKEN does not look like an app-level token (it should start with xapp-)")
        return value

    @field_validator("db_path", mode="before")
    @classmethod
    def _db_path(cls, value: Any) -> Any:
        return Path("./recover.db") if _blank(value) else value

    @field_validator("audit_key_file", mode="before")
    @classmethod
    def _audit_key_file(cls, value: Any) -> Any:
        return None if _blank(value) else value

    @field_validator("slack_api_url", mode="before")
    @classmethod
    def _slack_api_url(cls, value: Any) -> str:
        text = DEFAULT_SLACK_API_URL if _blank(value) else str(value).strip()
        if not _URL.match(text):
            raise ValueError(f"SLACK_API_URL must be an http(s) URL ending in /api/ (got {text!r})")
        return text if text.endswith("/") else text + "/"

    @field_validator("approvers", mode="before")
    @classmethod
    def _approvers(cls, value: Any) -> tuple[str, ...]:
        ids = _split(value)
        bad = [a for a in ids if not (_USER_ID.match(a) or _GROUP_ID.match(a))]
        if bad:
            raise ValueError(
                f"RECOVER_APPROVERS: {', '.join(map(repr, bad))} "
                f"{'is not a Slack user id' if len(bad) == 1 else 'are not Slack user ids'} "
                "(U…/W…) or user-group id (S…); comma-separated, e.g. U012ABC,S034ONCALL"
            )
        return ids

    @field_validator("channels", mode="before")
    @classmethod
    def _channels(cls, value: Any) -> tuple[str, ...]:
        ids = _split(value)
        # The terminal console is a channel of its own, named `console` (docs/commands.md).
        bad = [c for c in ids if not _CHANNEL_ID.match(c) and c != "console"]
        if bad:
            raise ValueError(
                f"RECOVER_CHANNELS: {', '.join(map(repr, bad))} is not a Slack channel id (C…/G…) "
                "or `console`; use the id from the channel's details, not its #name"
            )
        return ids

    @field_validator("slack_teams", mode="before")
    @classmethod
    def _teams(cls, value: Any) -> tuple[str, ...]:
        ids = _split(value)
        bad = [t for t in ids if not _TEAM_ID.match(t)]
        if bad:
            raise ValueError(
                f"RECOVER_SLACK_TEAMS: {', '.join(map(repr, bad))} is not a Slack workspace id (T…) "
                "or enterprise id (E…)"
            )
        return ids

    @field_validator("console_users", mode="before")
    @classmethod
    def _console_users(cls, value: Any) -> dict[str, str]:
        if isinstance(value, Mapping):
            pairs = [(str(k), str(v)) for k, v in value.items()]
        else:
            pairs = []
            for item in _split(value):
                login, sep, user_id = item.partition(":")
                pairs.append((login.strip(), user_id.strip() if sep else ""))
        mapping: dict[str, str] = {}
        bad: list[str] = []
        for login, user_id in pairs:
            if not _LOGIN.match(login) or not _USER_ID.match(user_id):
                bad.append(f"{login}:{user_id}" if user_id else login)
            elif login in mapping:
                bad.append(f"{login} (listed twice)")
            else:
                mapping[login] = user_id
        if bad:
            raise ValueError(
                f"RECOVER_CONSOLE_USERS: {', '.join(map(repr, bad))} is not login:SlackUserId; "
                "write e.g. alice:U012ABC,bob:W034DEF (user ids U…/W…, each login once)"
            )
        return mapping

    @field_validator("host", mode="before")
    @classmethod
    def _host(cls, value: Any) -> str:
        return "127.0.0.1" if _blank(value) else str(value).strip()

    @field_validator("port", mode="before")
    @classmethod
    def _port(cls, value: Any) -> int:
        if _blank(value):
            return 3000
        try:
            port = int(str(value).strip())
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            raise ValueError(f"PORT must be a number from 0 to 65535 (got {str(value)!r}; 0 = any free port)")
        return port

    @field_validator("runbooks_dir", mode="before")
    @classmethod
    def _runbooks_dir(cls, value: Any) -> Path:
        path = packaged_runbooks() if _blank(value) else Path(str(value).strip())
        if not path.is_dir():
            raise ValueError(f"RECOVER_RUNBOOKS: {path} is not a directory of runbook YAML files")
        return path

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: Any) -> str:
        level = "INFO" if _blank(value) else str(value).strip().upper()
        if level not in _LOG_LEVELS:
            raise ValueError(f"RECOVER_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR (got {level!r})")
        return level

    # --- accessors ---

    @property
    def approver_users(self) -> tuple[str, ...]:
        return tuple(a for a in self.approvers if not a.startswith("S"))

    @property
    def approver_groups(self) -> tuple[str, ...]:
        return tuple(a for a in self.approvers if a.startswith("S"))

    def audit_key_bytes(self) -> bytes | None:
        """The audit chain's key: ``RECOVER_AUDIT_KEY``, or the first line of ``RECOVER_AUDIT_KEY_FILE``."""
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
            problems.extend(_REQUIREMENTS.get(group, _no_requirement)(self))
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


def _no_requirement(settings: Settings) -> list[str]:
    return []


def _control_host_missing(s: Settings) -> list[str]:
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
            s.audit_key_bytes()
        except SettingsError as exc:
            return exc.problems
        if s.audit_key_bytes() is None:
            return [f"RECOVER_AUDIT_KEY_FILE: {s.audit_key_file} is empty; its first line is the key"]
    return []


_REQUIREMENTS = {
    "control_host": _control_host_missing,
    "slack": _slack_missing,
    "audit": _audit_problems,
}


class _MappingSource(EnvSettingsSource):
    """An explicit mapping in place of ``os.environ`` (tests, and callers that pass ``env``)."""

    def __init__(self, settings_cls: type[BaseSettings], values: Mapping[str, str]) -> None:
        self._values = dict(values)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k: v for k, v in self._values.items() if v is not None and (v.strip() if v else v)}


def read_dotenv(path: Path) -> dict[str, str]:
    """The ``NAME=value`` pairs of a ``.env`` file (pydantic-settings' reader: quotes, ``export``)."""
    if not path.is_file():
        return {}
    return {k: v for k, v in DotEnvSettingsSource(Settings, env_file=path).env_vars.items() if v is not None}


def _raw_values(env: Mapping[str, str] | None, dotenv: Path | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if dotenv is not None and dotenv.is_file():
        values.update(DotEnvSettingsSource(Settings, env_file=dotenv)())
    source = EnvSettingsSource(Settings) if env is None else _MappingSource(Settings, env)
    values.update(source())  # the environment wins over .env
    return values


def _problem_line(error: Any) -> tuple[str, str]:
    """(field name, one line) for a pydantic error; the input value is never quoted here."""
    key = str(error["loc"][0]) if error["loc"] else ""
    name = next((n for n, f in Settings.model_fields.items() if key in (n, f.validation_alias)), key)
    message = str(error["msg"]).removeprefix("Value error, ")
    alias = _alias(name) if name in Settings.model_fields else key
    return name, message if message.startswith(alias) else f"{alias}: {message}"


def load_settings(
    env: Mapping[str, str] | None = None,
    dotenv: Path | None = Path(".env"),
    *,
    uses: Iterable[str] | None = None,
    requires: Iterable[str] = (),
) -> Settings:
    """Read and validate settings; the process environment (or ``env``) wins over ``.env``.

    ``uses`` names the groups of :data:`GROUPS` the caller reads (default: all); problems in other
    groups are ignored and those settings keep their defaults. ``requires`` names groups that must be
    complete (``control_host``, ``slack``). Raises :class:`SettingsError` listing every problem of
    those groups at once, one line each, never a secret's value.
    """
    required = set(requires)
    wanted = (set(ALL_GROUPS) if uses is None else set(uses)) | required
    unknown = wanted - ALL_GROUPS
    if unknown:
        raise ValueError(f"unknown settings groups: {sorted(unknown)}")
    wanted_fields = {f for g in wanted for f in GROUPS[g]}
    values = _raw_values(env, dotenv)
    by_field = {n: _alias(n) for n in Settings.model_fields}
    # Only what the caller uses is read at all: the rest keeps its default.
    values = {k: v for k, v in values.items() if any(k in (n, a) for n, a in by_field.items() if n in wanted_fields)}
    problems: list[str] = []
    failed: set[str] = set()
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        for error in exc.errors(include_input=False, include_url=False):
            name, line = _problem_line(error)
            failed.add(name)
            problems.append(line)
        values = {k: v for k, v in values.items() if not any(k in (n, by_field[n]) for n in failed)}
        settings = Settings(**values)
    for name in SECRET_NAMES:
        secret = next((f for f, a in by_field.items() if a == name), None)
        value = getattr(settings, secret) if secret else None
        register_secret(value.get_secret_value() if isinstance(value, SecretStr) else None)
    failed_names = tuple(by_field[n] for n in failed)
    # A setting already reported as invalid is not reported again as missing.
    problems.extend(
        p
        for p in settings.problems_for(sorted(wanted & {"audit"}) + sorted(required))
        if not p.startswith(failed_names)
    )
    if problems:
        raise SettingsError(problems)
    return settings


def environ_names() -> tuple[str, ...]:
    """Every setting's name, as documented in .env.example and the README."""
    return tuple(_alias(n) for n in Settings.model_fields)


__all__ = [
    "ALL_GROUPS",
    "DEFAULT_SLACK_API_URL",
    "GROUPS",
    "SECRET_NAMES",
    "Settings",
    "environ_names",
    "load_settings",
    "packaged_runbooks",
    "read_dotenv",
    "reveal",
]
