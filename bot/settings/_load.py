"""Reading the settings: the process environment (or a mapping) over an optional ``.env`` file.

Each subcommand asks only for the groups of settings it uses, so a typo in ``PORT`` never stops
``audit verify``; within those groups every problem is named in one run, one line each, and a
secret's value is never printed (pydantic's input is left out of every message).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, DotEnvSettingsSource, EnvSettingsSource

from bot.dburl import is_pg_url
from bot.errors import SettingsError
from bot.redact import register_secret
from bot.settings._model import (
    ALL_GROUPS,
    GROUPS,
    NO_AUDIT_KEY,
    SECRET_FILES,
    SECRET_NAMES,
    Settings,
    audit_key_missing,
)
from bot.settings._parse import blank, read_secret_file


def _alias(name: str) -> str:
    return str(Settings.model_fields[name].validation_alias)


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
    values: dict[str, Any] = {}  # raw text (or parsed values) per name: the fields parse them
    if dotenv is not None and dotenv.is_file():
        values.update(DotEnvSettingsSource(Settings, env_file=dotenv)())
    source = EnvSettingsSource(Settings) if env is None else _MappingSource(Settings, env)
    values.update(source())  # the environment wins over .env
    return values


def _value(values: dict[str, Any], name: str) -> Any:
    return values.get(_alias(name), values.get(name))


def _read_secret_files(values: dict[str, Any]) -> tuple[list[str], set[str]]:
    """Put each ``NAME_FILE``'s content in place of ``NAME`` (problems, and the fields that failed).

    Setting both forms is a mistake (which one wins would be a guess), reported like any other.
    """
    problems: list[str] = []
    failed: set[str] = set()
    for secret, file_field in SECRET_FILES.items():
        path = _value(values, file_field)
        if blank(path):
            continue
        if not blank(_value(values, secret)):
            problems.append(f"{_alias(secret)} and {_alias(file_field)} are both set: keep one")
            failed |= {secret, file_field}
            continue
        try:
            values[_alias(secret)] = read_secret_file(Path(str(path)), _alias(file_field))
        except ValueError as exc:
            problems.append(str(exc))
            failed |= {secret, file_field}
    return problems, failed


def _read_db_url(values: dict[str, Any]) -> tuple[list[str], set[str]]:
    """RECOVER_DB as a postgresql:// URL, or RECOVER_DB_FILE's URL, into ``db_url`` (one name, two
    fields: ``db_path`` keeps the SQLite default). Both set, or a file without a URL: one line each."""
    raw, file = values.get("RECOVER_DB"), values.get("RECOVER_DB_FILE")
    if not blank(file):
        if not blank(raw):
            return ["RECOVER_DB and RECOVER_DB_FILE are both set: keep one"], {"db_path", "db_url_file"}
        try:
            text = read_secret_file(Path(str(file)), "RECOVER_DB_FILE").strip()
        except ValueError as exc:
            return [str(exc)], {"db_url_file"}
        if not is_pg_url(text):
            return [
                f"RECOVER_DB_FILE: {file} does not hold a postgresql:// URL; "
                "a SQLite file path goes in RECOVER_DB itself"
            ], {"db_url_file"}
        values["db_url"] = text
    elif isinstance(raw, str) and is_pg_url(raw):
        values["db_url"] = raw.strip()
        del values["RECOVER_DB"]  # the file path keeps its default (where local companions go)
    return [], set()


def _problem_line(error: ErrorDetails) -> tuple[str, str]:
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
    # Every configured secret is masked, also one this command does not read: it is in this
    # process's environment, so a traceback or a library's record could still carry it.
    for name in SECRET_NAMES:
        raw = values.get(name)
        register_secret(None if raw is None or (name == "RECOVER_AUDIT_KEY" and raw == NO_AUDIT_KEY) else raw)
    by_field = {n: _alias(n) for n in Settings.model_fields}
    # Only what the caller uses is read at all: the rest keeps its default.
    values = {k: v for k, v in values.items() if any(k in (n, a) for n, a in by_field.items() if n in wanted_fields)}
    problems, failed = _read_secret_files(values)
    if "db_path" in wanted_fields:
        db_problems, db_failed = _read_db_url(values)
        problems += db_problems
        failed |= db_failed
    values = {k: v for k, v in values.items() if not any(k in (n, by_field[n]) for n in failed)}
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
        text = value.get_secret_value() if isinstance(value, SecretStr) else None
        register_secret(None if name == "RECOVER_AUDIT_KEY" and text == NO_AUDIT_KEY else text)
    if settings.db_url is not None:  # RECOVER_DB is not a secret name (a path is not), its URL's password is
        register_secret(urlsplit(settings.db_url.get_secret_value()).password)
    failed_names = tuple(by_field[n] for n in failed)
    # A setting already reported as invalid is not reported again as missing. Requiring "audit" (serve)
    # means a key, or RECOVER_AUDIT_KEY=none said on purpose.
    found = settings.problems_for(sorted((wanted & {"audit"}) | required))
    if "audit" in required:
        found += audit_key_missing(settings)
    problems.extend(p for p in found if not p.startswith(failed_names))
    if problems:
        raise SettingsError(problems)
    return settings


def environ_names() -> tuple[str, ...]:
    """Every setting's name, as documented in .env.example and the README."""
    return tuple(_alias(n) for n, f in Settings.model_fields.items() if f.validation_alias is not None)
