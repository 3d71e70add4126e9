"""Parsing of each setting's raw text: every message names the setting and what to put there.

Pure functions from what the environment, ``.env`` or a test passed (text, or an already parsed
value) to the typed value, raising ``ValueError`` with one actionable line; the model
(:mod:`bot.settings._model`) calls them from its validators. A secret's value is never quoted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path

from pydantic import SecretStr

from bot.dburl import is_pg_url, looks_like_url, refused_url

DEFAULT_SLACK_API_URL = "https://slack.com/api/"
DEFAULT_PAGERDUTY_URL = "https://api.pagerduty.com"
DEFAULT_DB = Path("./recover.db")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 3000
RUNBOOKS_PACKAGE = "bot.runbooks_data"
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_GROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")
_TEAM_ID = re.compile(r"^[TE][A-Z0-9]{2,}$")
_PAGERDUTY_ID = re.compile(r"^[A-Z0-9]{2,}$")
_LOGIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?$")
_URL = re.compile(r"^https?://[^\s/]+")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def packaged_runbooks() -> Path:
    """The runbooks shipped in the package: the repository's top-level ``runbooks/`` folder.

    An editable install made before the folder was packaged cannot import it: the checkout's folder
    is the same files.
    """
    try:
        return Path(str(resources.files(RUNBOOKS_PACKAGE)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "runbooks"


def read_secret_file(path: Path, name: str) -> str:
    """A secret's ``_FILE`` form: the file's text with its trailing newline stripped (``echo`` adds one).

    Raises ``ValueError`` with one line naming the setting and the file, never the content.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(f"{name}: cannot read {path} ({reason}); give a readable file holding the secret") from None
    value = text.rstrip("\r\n")
    if not value.strip():
        raise ValueError(f"{name}: {path} is empty; the file's text is the secret")
    return value


def blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def split(value: object) -> tuple[str, ...]:
    """A comma list from the environment (``"U1, U2"``) or an already parsed sequence."""
    if blank(value):
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, Iterable):
        return tuple(str(part).strip() for part in value)
    raise ValueError(f"expected a comma-separated list (got a {type(value).__name__})")


def optional_text(value: object) -> object:
    """Blank is unset; text is stripped (anything else is left to the field's type check)."""
    return None if blank(value) else value.strip() if isinstance(value, str) else value


def optional(value: object) -> object:
    """Blank is unset."""
    return None if blank(value) else value


def db_path(value: object) -> object:
    """``RECOVER_DB`` as a SQLite file: a path. A postgresql:// URL is ``db_url``'s (the file keeps
    its default, where local companions go); any other URL is refused in one line."""
    if blank(value):
        return DEFAULT_DB
    if isinstance(value, str) and looks_like_url(value):
        if is_pg_url(value):
            return DEFAULT_DB
        raise ValueError(refused_url(value))
    return value


def db_url(value: object) -> object:
    """``RECOVER_DB`` as a PostgreSQL URL (from ``RECOVER_DB`` or ``RECOVER_DB_FILE``); None for a path."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, str) and is_pg_url(value):
        return value.strip()
    return None


def control_host_url(value: str | None) -> str | None:
    if value is None:
        return None
    if not _URL.match(value):
        raise ValueError(f"CONTROL_HOST_URL must start with http:// or https:// (got {value!r})")
    return value.rstrip("/")


def secret(value: object) -> str | None:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return None if blank(value) else str(value).strip()


def token(value: SecretStr | None, name: str, prefix: str, kind: str) -> SecretStr | None:
    if value is not None and not value.get_secret_value().startswith(prefix):
        raise ValueError(f"{name} does not look like {kind} (it should start with {prefix})")
    return value


def slack_api_url(value: object) -> str:
    text = DEFAULT_SLACK_API_URL if blank(value) else str(value).strip()
    if not _URL.match(text):
        raise ValueError(f"SLACK_API_URL must be an http(s) URL ending in /api/ (got {text!r})")
    return text if text.endswith("/") else text + "/"


def approvers(value: object) -> tuple[str, ...]:
    ids = split(value)
    bad = [a for a in ids if not (_USER_ID.match(a) or _GROUP_ID.match(a))]
    if bad:
        raise ValueError(
            f"RECOVER_APPROVERS: {', '.join(map(repr, bad))} "
            f"{'is not a Slack user id' if len(bad) == 1 else 'are not Slack user ids'} "
            "(U…/W…) or user-group id (S…); comma-separated, e.g. U012ABC,S034ONCALL"
        )
    return ids


def channels(value: object) -> tuple[str, ...]:
    ids = split(value)
    # The terminal console is a channel of its own, named `console` (docs/commands.md).
    bad = [c for c in ids if not _CHANNEL_ID.match(c) and c != "console"]
    if bad:
        raise ValueError(
            f"RECOVER_CHANNELS: {', '.join(map(repr, bad))} is not a Slack channel id (C…/G…) "
            "or `console`; use the id from the channel's details, not its #name"
        )
    return ids


def teams(value: object) -> tuple[str, ...]:
    ids = split(value)
    bad = [t for t in ids if not _TEAM_ID.match(t)]
    if bad:
        raise ValueError(
            f"RECOVER_SLACK_TEAMS: {', '.join(map(repr, bad))} is not a Slack workspace id (T…) or enterprise id (E…)"
        )
    return ids


def pair_map(value: object, key: re.Pattern[str], val: re.Pattern[str]) -> tuple[dict[str, str], list[str]]:
    """``key:value`` pairs from a comma list (or an already parsed mapping): the mapping, and the
    pairs that do not match the patterns or repeat a key (to be named in one error)."""
    if isinstance(value, Mapping):
        pairs = [(str(k).strip(), str(v).strip()) for k, v in value.items()]
    else:
        pairs = []
        for item in split(value):
            left, sep, right = item.partition(":")
            pairs.append((left.strip(), right.strip() if sep else ""))
    mapping: dict[str, str] = {}
    bad: list[str] = []
    for left, right in pairs:
        if not key.match(left) or not val.match(right):
            bad.append(f"{left}:{right}" if right else left)
        elif left in mapping:
            bad.append(f"{left} (listed twice)")
        else:
            mapping[left] = right
    return mapping, bad


def console_users(value: object) -> dict[str, str]:
    """``login:SlackUserId`` pairs (the console's people, compared by their Slack id)."""
    mapping, bad = pair_map(value, _LOGIN, _USER_ID)
    if bad:
        raise ValueError(
            f"RECOVER_CONSOLE_USERS: {', '.join(map(repr, bad))} is not login:SlackUserId; "
            "write e.g. alice:U012ABC,bob:W034DEF (user ids U…/W…, each login once)"
        )
    return mapping


def host(value: object) -> str:
    return DEFAULT_HOST if blank(value) else str(value).strip()


def port(value: object) -> int:
    if blank(value):
        return DEFAULT_PORT
    try:
        number = int(str(value).strip())
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ValueError(f"PORT must be a number from 0 to 65535 (got {str(value)!r}; 0 = any free port)")
    return number


def runbooks_dir(value: object) -> Path:
    path = packaged_runbooks() if blank(value) else Path(str(value).strip())
    if not path.is_dir():
        raise ValueError(f"RECOVER_RUNBOOKS: {path} is not a directory of runbook YAML files")
    return path


def log_level(value: object) -> str:
    level = "INFO" if blank(value) else str(value).strip().upper()
    if level not in _LOG_LEVELS:
        raise ValueError(f"RECOVER_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR (got {level!r})")
    return level


def watch_channel(value: object) -> str | None:
    """RECOVER_WATCH_CHANNEL: the one Slack channel id watch mode posts to (unset: no watcher)."""
    if blank(value):
        return None
    text = str(value).strip()
    if not _CHANNEL_ID.match(text):
        raise ValueError(
            f"RECOVER_WATCH_CHANNEL: {text!r} is not a Slack channel id (C…/G…); use the id from the "
            "channel's details, not its #name"
        )
    return text


def watch_interval(value: object) -> float | None:
    """RECOVER_WATCH_INTERVAL: seconds between polls, overriding the runbook's ``watch.poll_interval``."""
    if blank(value):
        return None
    try:
        seconds = float(str(value).strip())
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"RECOVER_WATCH_INTERVAL must be a number of seconds above 0 (got {str(value)!r})")
    return seconds


#: A worker beats every 2 s (bot/slack/worker.py): a live one is never taken for dead within three beats.
MIN_WORKER_STALE_SECONDS = 6.0


def worker_stale_seconds(value: object) -> float:
    """RECOVER_WORKER_STALE_SECONDS: how long a silent worker's claims are trusted (30 s when unset)."""
    if blank(value):
        return 30.0
    try:
        seconds = float(str(value).strip())
    except ValueError:
        seconds = -1.0
    if not seconds >= MIN_WORKER_STALE_SECONDS:
        raise ValueError(
            f"RECOVER_WORKER_STALE_SECONDS must be a number of seconds of at least {MIN_WORKER_STALE_SECONDS:g} "
            f"(three of the worker's beats; got {str(value)!r})"
        )
    return seconds


def pagerduty_url(value: object) -> str:
    """RECOVER_ONCALL_PAGERDUTY_URL: the REST API's base (a local stand-in in tests)."""
    text = DEFAULT_PAGERDUTY_URL if blank(value) else str(value).strip()
    if not _URL.match(text):
        raise ValueError(f"RECOVER_ONCALL_PAGERDUTY_URL must be an http(s) URL (got {text!r})")
    return text.rstrip("/")


def pagerduty_policies(value: object) -> dict[str, str]:
    """RECOVER_ONCALL_PAGERDUTY_POLICIES: ``S…:P…`` pairs, a tier's user-group id and the PagerDuty
    escalation policy whose on-call users stand for it."""
    mapping, bad = pair_map(value, _GROUP_ID, _PAGERDUTY_ID)
    if bad:
        raise ValueError(
            f"RECOVER_ONCALL_PAGERDUTY_POLICIES: {', '.join(map(repr, bad))} is not GroupId:PolicyId; "
            "write e.g. S0ONCALL2:PABC123 (a user-group id S… as the runbook names it, and the PagerDuty "
            "escalation policy id from its URL), each group once"
        )
    return mapping


def pagerduty_schedules(value: object) -> dict[str, str]:
    """RECOVER_ONCALL_PAGERDUTY_SCHEDULES: ``S…:P…`` pairs, a tier (one mapped to an escalation policy)
    and the PagerDuty schedule its on-call users must come from, within that policy."""
    mapping, bad = pair_map(value, _GROUP_ID, _PAGERDUTY_ID)
    if bad:
        raise ValueError(
            f"RECOVER_ONCALL_PAGERDUTY_SCHEDULES: {', '.join(map(repr, bad))} is not GroupId:ScheduleId; "
            "write e.g. S0ONCALL2:PSCHED1 (a tier mapped in RECOVER_ONCALL_PAGERDUTY_POLICIES, and the PagerDuty "
            "schedule id from its URL), each group once"
        )
    return mapping


def docker_tls_verify(value: object) -> bool:
    """DOCKER_TLS_VERIFY, read as the docker CLI reads it: any non-empty value turns TLS on."""
    return not blank(value) and value is not False


def docker_plain_tcp(value: object) -> bool:
    """RECOVER_DOCKER_PLAIN_TCP: the deployer's explicit yes to a tcp:// DOCKER_HOST without TLS on
    another machine (compose's socket proxy on its private network)."""
    if isinstance(value, bool):
        return value
    text = "" if blank(value) else str(value).strip().lower()
    if text in ("", "false", "0", "no"):
        return False
    if text in ("true", "1", "yes"):
        return True
    raise ValueError(f"RECOVER_DOCKER_PLAIN_TCP must be true or false (got {str(value)!r})")
