"""The deployment files, checked statically (no image registry here): they name what the code uses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# Every Web API method the Slack front end may call, and the bot scope(s) it needs (None: no scope;
# a tuple: one per kind of channel, e.g. public and private).
METHOD_SCOPES: dict[str, str | tuple[str, ...] | None] = {
    "auth.test": None,
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.postEphemeral": "chat:write",
    "chat.getPermalink": None,  # the hand-off digest links each case thread; Slack asks no scope for it
    "views.open": None,
    "views.update": None,
    "views.publish": None,
    "users.info": "users:read",
    "bots.info": "users:read",
    "apps.connections.open": None,  # the app-level token's connections:write, not a bot scope
    "usergroups.users.list": "usergroups:read",
    "users.lookupByEmail": "users:read.email",  # the PagerDuty on-call source's people, by email
    "files.getUploadURLExternal": "files:write",
    "files.completeUploadExternal": "files:write",
    "conversations.history": ("channels:history", "groups:history"),  # watch mode reads its channel back
    "conversations.replies": ("channels:history", "groups:history"),
    "conversations.members": ("channels:read", "groups:read"),  # who may pause watch mode
}


def _scopes(method: str) -> set[str]:
    needed = METHOD_SCOPES[method]
    return set() if needed is None else {needed} if isinstance(needed, str) else set(needed)


# slack_sdk convenience methods the code uses → the Web API methods behind them.
SDK_METHODS = {
    "files_upload_v2": {"files.getUploadURLExternal", "files.completeUploadExternal"},
    "usergroups_users_list": {"usergroups.users.list"},
    "users_lookupByEmail": {"users.lookupByEmail"},
    "users_info": {"users.info"},
    "auth_test": {"auth.test"},
    "bots_info": {"bots.info"},
    "apps_connections_open": {"apps.connections.open"},
    "conversations_history": {"conversations.history"},
    "conversations_replies": {"conversations.replies"},
    "conversations_members": {"conversations.members"},
}


def _methods_called_by_code() -> set[str]:
    methods: set[str] = {"auth.test"}  # Bolt calls it at start
    for path in (ROOT / "bot" / "slack").glob("*.py"):
        source = path.read_text()
        methods |= set(re.findall(r'_call\(\s*"([a-zA-Z]+\.[a-zA-Z.]+)"', source))
        for name in re.findall(r"client\.([a-z]+_[a-zA-Z0-9_]+)\(", source):
            if name == "api_call":
                continue  # its method names are found by the _call pattern above
            assert name in SDK_METHODS, f"client.{name}: add the Web API methods behind it to SDK_METHODS"
            methods |= SDK_METHODS[name]
    return methods


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "slack-app-manifest.yaml").read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_code_scan_finds_the_methods_we_know_we_call() -> None:
    found = _methods_called_by_code()
    assert {
        "chat.postMessage",
        "chat.update",
        "views.open",
        "views.publish",
        "usergroups.users.list",
        "files.getUploadURLExternal",
    } <= found


def test_every_called_method_has_its_scope(manifest) -> None:
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    for method in _methods_called_by_code():
        assert method in METHOD_SCOPES, f"{method} is called: add it (and its scope) to the manifest check"
        assert _scopes(method) <= scopes, f"{method} needs {_scopes(method) - scopes}"
    assert "commands" in scopes


def test_the_manifest_asks_for_no_scope_the_code_does_not_use(manifest) -> None:
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    needed = {s for m in _methods_called_by_code() if m in METHOD_SCOPES for s in _scopes(m)} | {"commands"}
    assert scopes == needed  # chat:write.public is not asked for: the bot is invited where it posts
    # Every scope's comment names only methods the code calls.
    text = (DEPLOY / "slack-app-manifest.yaml").read_text()
    named = set(
        re.findall(
            r"(?<![:\w])([a-z]+\.[a-zA-Z]+(?:\.[a-zA-Z]+)?)\b", text.split("oauth_config:")[1].split("settings:")[0]
        )
    )
    assert named <= _methods_called_by_code() | {"chat.postEphemeral"}, named - _methods_called_by_code()


def test_manifest_command_interactivity_home_events_socket_mode(manifest) -> None:
    from urllib.parse import urlparse

    from bot.slack import COMMAND, EVENTS_PATH

    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == COMMAND == "/recover"
    settings = manifest["settings"]
    for url in (
        command["url"],
        settings["interactivity"]["request_url"],
        settings["event_subscriptions"]["request_url"],
    ):
        assert urlparse(url).path == EVENTS_PATH == "/slack/events"
    assert settings["interactivity"]["is_enabled"] is True
    assert "app_home_opened" in settings["event_subscriptions"]["bot_events"]
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
    assert "socket_mode_enabled" in settings


def test_compose_bot_reaches_docker_only_through_the_proxy(compose) -> None:
    services = compose["services"]
    bot = services["recover-bot"]
    env = bot["environment"]
    assert env["HOST"] == "0.0.0.0"
    assert not any("docker.sock" in str(v) for v in bot.get("volumes", []))
    proxy_host = re.match(r"tcp://([^:]+):(\d+)$", env["DOCKER_HOST"])
    assert proxy_host and proxy_host.group(1) in services
    proxy = services[proxy_host.group(1)]
    assert "socket-proxy" in proxy["image"]
    assert any(str(v).startswith("/var/run/docker.sock:") and str(v).endswith(":ro") for v in proxy["volumes"])
    flags = proxy["command"]
    assert f"-proxyport={proxy_host.group(2)}" in flags
    # Nothing that creates containers or pulls images gets through.
    post = next(f for f in flags if f.startswith("-allowPOST="))
    pattern = re.compile(post.split("=", 1)[1].replace("${RECOVER_INSTALLATION}", "inst"))
    assert pattern.match("/v1.41/containers/inst-reconciler-1/exec")
    for path in (
        "/v1.41/containers/create",
        "/v1.41/images/create",
        "/v1.41/containers/other/exec",
        "/v1.41/containers/inst-reconciler-1/kill",
    ):
        assert not pattern.match(path), path


def test_compose_keeps_the_store_on_a_volume(compose) -> None:
    bot = compose["services"]["recover-bot"]
    db = Path(bot["environment"]["RECOVER_DB"])
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in bot["volumes"]}
    assert str(db.parent) in mounts and mounts[str(db.parent)] in compose["volumes"]


# The compose proxy flags against allowlist.yaml and the recorded calls: tests/docker/test_allowlist.py.


def test_dockerfile_is_small_and_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11(\.\d+)?-slim", text, re.M)
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    assert "/healthz" in text and "HOST=0.0.0.0" in text
    assert "docker.sock" not in text
    # The runbooks ship inside the package: no hand copy, no RECOVER_RUNBOOKS pointing at one.
    assert "RECOVER_RUNBOOKS" not in text and "cp -r runbooks" not in text
    assert re.search(r"^COPY pyproject\.toml setup\.py ", text, re.M)
