"""Secrets as files (compose ``secrets:``), and the audit key that ``serve`` cannot run without.

Every secret has a ``NAME_FILE`` form whose text, trailing newline stripped, is the value; both forms at
once, an unreadable or an empty file are one line each, never the content. ``serve`` refuses to start
without an audit key unless ``RECOVER_AUDIT_KEY=none`` says so; ``audit verify`` on an unkeyed store
says what that chain can and cannot show, with a status of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.errors import SettingsError
from bot.redact import redact
from bot.settings import load_settings
from bot.store import Store
from bot.store.cli import EXIT_UNAUTHENTICATED, UNKEYED_LINE

SECRETS = {
    "CONTROL_HOST_API_KEY": ("control_host_api_key", "k-from-a-file"),
    "SLACK_BOT_TOKEN": ("slack_bot_token", "xoxb-from-a-file"),
    "SLACK_SIGNING_SECRET": ("slack_signing_secret", "signing-from-a-file"),
    "SLACK_APP_TOKEN": ("slack_app_token", "xapp-from-a-file"),
}
COMPLETE = {
    "CONTROL_HOST_URL": "http://127.0.0.1:9",
    "CONTROL_HOST_API_KEY": "k-complete-1",
    "SLACK_BOT_TOKEN": "xoxb-complete-1",
    "SLACK_SIGNING_SECRET": "sig-complete-1",
}
SERVE = ("control_host", "slack", "audit")


def _secret_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "run-secrets" / name.lower()
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(SECRETS))
@pytest.mark.parametrize("ending", ["\n", "\r\n", ""])
def test_every_secret_can_come_from_a_file_with_its_trailing_newline_stripped(
    tmp_path: Path, name: str, ending: str
) -> None:
    field, value = SECRETS[name]
    path = _secret_file(tmp_path, name, value + ending)
    settings = load_settings({f"{name}_FILE": str(path)}, dotenv=None)
    assert getattr(settings, field).get_secret_value() == value
    assert redact(f"sent {value}") == "sent ***"  # registered like any configured secret


def test_a_secret_file_satisfies_serve_and_compose_names_only_files(tmp_path: Path) -> None:
    env = {"CONTROL_HOST_URL": "http://127.0.0.1:9", "RECOVER_AUDIT_KEY_FILE": str(tmp_path / "keys" / "audit")}
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "audit").write_text("audit-key-from-a-file\n")
    for name in ("CONTROL_HOST_API_KEY", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"):
        env[f"{name}_FILE"] = str(_secret_file(tmp_path, name, SECRETS[name][1] + "\n"))
    settings = load_settings(env, dotenv=None, requires=SERVE)
    assert settings.audit_key_bytes() == b"audit-key-from-a-file"


def test_both_forms_an_unreadable_or_an_empty_file_are_one_line_each_without_the_content(tmp_path: Path) -> None:
    both = _secret_file(tmp_path, "both", "xoxb-the-other-one\n")
    empty = _secret_file(tmp_path, "empty", "\n")
    env = {
        **COMPLETE,
        "SLACK_BOT_TOKEN_FILE": str(both),
        "CONTROL_HOST_API_KEY": "",
        "CONTROL_HOST_API_KEY_FILE": str(tmp_path / "missing"),
        "SLACK_SIGNING_SECRET": "",
        "SLACK_SIGNING_SECRET_FILE": str(empty),
        "RECOVER_AUDIT_KEY": "none",
    }
    with pytest.raises(SettingsError) as info:
        load_settings(env, dotenv=None, requires=SERVE)
    problems = info.value.problems
    assert problems == [
        "CONTROL_HOST_API_KEY_FILE: cannot read "
        f"{tmp_path / 'missing'} (No such file or directory); give a readable file holding the secret",
        "SLACK_BOT_TOKEN and SLACK_BOT_TOKEN_FILE are both set: keep one",
        f"SLACK_SIGNING_SECRET_FILE: {empty} is empty; the file's text is the secret",
    ]  # and none of them is reported again as "not set"
    assert "the-other-one" not in "\n".join(problems)


def test_a_bad_token_in_a_file_is_named_without_its_value(tmp_path: Path) -> None:
    path = _secret_file(tmp_path, "bot", "oops-supersecret-in-file\n")
    with pytest.raises(SettingsError) as info:
        load_settings({"SLACK_BOT_TOKEN_FILE": str(path)}, dotenv=None)
    assert info.value.problems == ["SLACK_BOT_TOKEN does not look like a bot token (it should start with xoxb-)"]


def test_serve_needs_an_audit_key_or_none_said_on_purpose() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(COMPLETE, dotenv=None, requires=SERVE)
    assert info.value.problems == [
        "RECOVER_AUDIT_KEY is not set: serve keys the audit chain with it (or RECOVER_AUDIT_KEY_FILE, "
        "a mounted secret); set RECOVER_AUDIT_KEY=none to run unkeyed on purpose"
    ]
    unkeyed = load_settings({**COMPLETE, "RECOVER_AUDIT_KEY": "none"}, dotenv=None, requires=SERVE)
    assert unkeyed.audit_unkeyed_on_purpose and unkeyed.audit_key_bytes() is None
    assert redact("none of it") == "none of it"  # the word is not a secret
    keyed = load_settings({**COMPLETE, "RECOVER_AUDIT_KEY": "k3y-for-the-chain"}, dotenv=None, requires=SERVE)
    assert keyed.audit_key_bytes() == b"k3y-for-the-chain"
    # Other commands still read an unkeyed store without being told anything.
    assert load_settings({}, dotenv=None, uses=("store", "audit")).audit_key_bytes() is None


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RECOVER_", "SLACK_", "CONTROL_HOST_"))}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, cwd=cwd, env={**base, **env},
        timeout=60,
    )  # fmt: skip


@pytest.mark.subprocess
def test_recover_bot_serve_refuses_to_start_without_an_audit_key(tmp_path: Path) -> None:
    res = _cli("serve", cwd=tmp_path, RECOVER_DB=str(tmp_path / "r.db"), **COMPLETE)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [
        "recover-bot serve: fix these settings (environment or .env):",
        "  RECOVER_AUDIT_KEY is not set: serve keys the audit chain with it (or RECOVER_AUDIT_KEY_FILE, "
        "a mounted secret); set RECOVER_AUDIT_KEY=none to run unkeyed on purpose",
    ]
    assert not (tmp_path / "r.db").exists()  # refused before anything was opened


@pytest.mark.subprocess
def test_audit_verify_says_an_unkeyed_store_is_one_with_a_status_of_its_own(tmp_path: Path) -> None:
    clock = ManualClock()
    plain = Store(tmp_path / "plain.db", clock)
    keyed = Store(tmp_path / "keyed.db", clock, audit_key=b"k3y-for-the-chain")
    for store in (plain, keyed):
        store.record_step("ses_1", "U1", "note", {"text": "checked"}, "ok")
    res = _cli("audit", "verify", "--db", str(plain.path), cwd=tmp_path)
    assert res.returncode == EXIT_UNAUTHENTICATED == 3, res.stdout + res.stderr
    assert res.stdout.splitlines()[-1] == UNKEYED_LINE == "unkeyed: detects accidental damage, not a writer"
    # Keyed steps checked without the key: not authenticated either (the summary says how to give it).
    res = _cli("audit", "verify", "--db", str(keyed.path), cwd=tmp_path)
    assert res.returncode == 3 and "NOT CHECKED" in res.stdout, res.stdout
    res = _cli("audit", "verify", "--db", str(keyed.path), cwd=tmp_path, RECOVER_AUDIT_KEY="k3y-for-the-chain")
    assert res.returncode == 0 and UNKEYED_LINE not in res.stdout, res.stdout + res.stderr


def test_compose_passes_every_secret_as_a_file_never_as_a_value() -> None:

    from bot.settings import SECRET_NAMES
    from tests.install._compose import load_compose

    deploy = Path(__file__).resolve().parents[2] / "deploy"
    base = load_compose(deploy / "docker-compose.yml")
    socket_mode = load_compose(deploy / "docker-compose.socket-mode.yml")
    for data in (base, socket_mode):
        bot = data["services"]["recover-bot"]
        env, declared = bot["environment"], {**base["secrets"], **(data.get("secrets") or {})}
        assert not set(SECRET_NAMES) & set(env), "a secret's value in the environment"
        for name in SECRET_NAMES:
            path = env.get(f"{name}_FILE")
            if path:  # every file given is a compose secret mounted for the bot
                secret = path.removeprefix("/run/secrets/")
                assert path.startswith("/run/secrets/") and secret in bot["secrets"] and declared.get(secret), name
    assert base["services"]["recover-bot"]["environment"]["RECOVER_AUDIT_KEY_FILE"]  # serve needs the key
    assert socket_mode["services"]["recover-bot"]["environment"]["SLACK_APP_TOKEN_FILE"]
