"""One entry of the installations file: every problem as ``FILE:LINE: …``, or the InstallationSpec.

The values that also exist as settings (a control host URL, channel, approver and watch channel ids, a
secret's file) are judged by the settings' own parsers (bot/settings/_parse.py), so a value valid in
``RECOVER_CHANNELS`` is valid in ``channels:`` and the two can never drift apart. A key's content is
never echoed: a problem names the file or the variable, never what it holds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bot.ids import NAME_PATTERN
from bot.installations.spec import DockerTLS, InstallationSpec
from bot.redact import register_secret
from bot.runbook.yamlio import LineMap
from bot.settings import _parse

KEYS = (
    "name", "control_host_url", "api_key_file", "api_key_env", "compose_project", "channels",
    "docker_host", "docker_tls", "watch_channel", "approvers",
)  # fmt: skip
TLS_KEYS = ("ca", "cert", "key")
DOCKER_SCHEMES = ("unix://", "tcp://", "ssh://")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class EntryCheck:
    """Collects one entry's problems, each at the line of the key it is about."""

    entry: Mapping[str, Any]
    index: int
    lines: LineMap
    base: Path  # relative file paths are read from the installations file's folder
    problems: list[str] = field(default_factory=list)

    def where(self, *path: str) -> str:
        return self.lines.where(("installations", self.index, *path))

    def problem(self, key: str | None, text: str) -> None:
        self.problems.append(f"{self.where(*((key,) if key else ()))}: {text}")

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self.entry.get(key)
        if value is None:
            if required:
                self.problem(None, f"{key} is missing")
            return None
        if not isinstance(value, str) or not value.strip():
            self.problem(key, f"{key} must be a non-empty text")
            return None
        return value.strip()

    def parsed(self, key: str, setting: str, parse: Callable[[Any], Any], value: Any) -> Any:
        """The settings' parser's verdict, its message speaking of ``key`` instead of the setting."""
        try:
            return parse(value)
        except ValueError as exc:
            message = str(exc)
            if message.startswith(setting):
                message = key + message[len(setting) :]
            self.problem(key, message)
            return None

    def path(self, text: str) -> Path:
        path = Path(text).expanduser()
        return path if path.is_absolute() else self.base / path


def _id_list(ck: EntryCheck, key: str, setting: str, parse: Callable[[Any], tuple[str, ...]]) -> tuple[str, ...]:
    value = ck.entry.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        ck.problem(
            key,
            f"{key} must be a list of ids, e.g. {key}: [{'C0EU1INCD' if key == 'channels' else 'U012ABC'}]",
        )
        return ()
    result: tuple[str, ...] | None = ck.parsed(key, setting, parse, value)
    return result or ()


def _api_key(ck: EntryCheck) -> SecretStr | None:
    """``api_key_file`` (a mounted secret) or ``api_key_env`` (a variable's name); never the key itself."""
    if "api_key" in ck.entry:
        ck.problem("api_key", "api_key: never inline; use api_key_file or api_key_env")
    file_text, env_name = ck.text("api_key_file"), ck.text("api_key_env")
    if file_text and env_name:
        ck.problem("api_key_env", "api_key_file and api_key_env are both set: keep one")
        return None
    if file_text:
        path = ck.path(file_text)
        value = ck.parsed("api_key_file", "api_key_file", lambda p: _parse.read_secret_file(p, "api_key_file"), path)
        if value is None:
            return None
        register_secret(value)  # masked wherever text leaves the process
        return SecretStr(value)
    if env_name:
        if not _ENV_NAME.match(env_name):
            ck.problem("api_key_env", f"api_key_env: {env_name!r} is not an environment variable name")
            return None
        value = (os.environ.get(env_name) or "").strip()
        if not value:
            ck.problem("api_key_env", f"api_key_env: {env_name} is not set (or empty) in the bot's environment")
            return None
        register_secret(value)
        return SecretStr(value)
    if "api_key" not in ck.entry:
        ck.problem(None, "no API key: give api_key_file (a mounted secret) or api_key_env (a variable's name)")
    return None


def _docker(ck: EntryCheck) -> tuple[str | None, DockerTLS | None]:
    host = ck.text("docker_host")
    if host is not None and not host.startswith(DOCKER_SCHEMES):
        ck.problem("docker_host", f"docker_host must start with {', '.join(DOCKER_SCHEMES)} (got {host!r})")
        return None, None
    tls = ck.entry.get("docker_tls")
    if tls is None:
        return host, None
    if host is None or not host.startswith("tcp://"):
        ck.problem("docker_tls", "docker_tls applies to a tcp:// docker_host only")
        return host, None
    if not isinstance(tls, dict):
        ck.problem("docker_tls", "docker_tls must be a mapping: {ca: FILE, cert: FILE, key: FILE}")
        return host, None
    files: dict[str, Path] = {}
    for key in tls:
        if key not in TLS_KEYS:
            ck.problems.append(
                f"{ck.where('docker_tls', str(key))}: unknown key docker_tls.{key} (known: {', '.join(TLS_KEYS)})"
            )
    for key in TLS_KEYS:
        value = tls.get(key)
        if value is None:
            if key != "ca":
                ck.problem(
                    "docker_tls",
                    f"docker_tls.{key} is missing: the client's {'certificate' if key == 'cert' else 'private key'} "
                    f"file",
                )
            continue
        where = ck.where("docker_tls", key)
        if not isinstance(value, str) or not value.strip():
            ck.problems.append(f"{where}: docker_tls.{key} must be a file path")
            continue
        path = ck.path(value.strip())
        if not path.is_file() or not os.access(path, os.R_OK):
            ck.problems.append(f"{where}: docker_tls.{key}: {path} is not a readable file")
            continue
        files[key] = path
    if "cert" not in files or "key" not in files or (tls.get("ca") is not None and "ca" not in files):
        return host, None
    return host, DockerTLS(cert=files["cert"], key=files["key"], ca=files.get("ca"))


def check_entry(entry: object, index: int, lines: LineMap, base: Path) -> tuple[InstallationSpec | None, list[str]]:
    """One ``installations:`` item: the spec, or None with every problem found in it."""
    if not isinstance(entry, dict):
        return None, [
            f"{lines.where(('installations', index))}: each installation is a mapping (name: …, control_host_url: …)"
        ]
    ck = EntryCheck(entry, index, lines, base)
    for key in entry:
        if key not in KEYS and key != "api_key":
            ck.problem(str(key), f"unknown key {key!r} (known: {', '.join(KEYS)})")
    name = ck.text("name", required=True)
    if name is not None and not NAME_PATTERN.match(name):
        ck.problem("name", f"name {name!r}: lower-case letters, digits and '-', starting with a letter, at most 31")
        name = None
    url_text = ck.text("control_host_url", required=True)
    url = ck.parsed("control_host_url", "CONTROL_HOST_URL", _parse.control_host_url, url_text) if url_text else None
    api_key = _api_key(ck)
    compose_project = ck.text("compose_project")
    channels = _id_list(ck, "channels", "RECOVER_CHANNELS", _parse.channels)
    docker_host, docker_tls = _docker(ck)
    watch = ck.entry.get("watch_channel")
    watch_channel = ck.parsed("watch_channel", "RECOVER_WATCH_CHANNEL", _parse.watch_channel, watch) if watch else None
    approvers: tuple[str, ...] | None = None
    if "approvers" in entry:
        approvers = _id_list(ck, "approvers", "RECOVER_APPROVERS", _parse.approvers)
        if entry["approvers"] == [] or entry["approvers"] is None:
            ck.problem("approvers", "approvers: [] names nobody; leave the key out to use RECOVER_APPROVERS")
    if ck.problems or name is None:
        return None, ck.problems
    spec = InstallationSpec(
        name=name,
        control_host_url=url,
        api_key=api_key,
        compose_project=compose_project,
        channels=channels,
        docker_host=docker_host,
        watch_channel=watch_channel,
        approvers=approvers,
        origin=ck.where(),
        docker_tls=docker_tls,
    )
    return spec, []
