"""Settings: fixed names, one clear message per problem, secrets never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import SettingsError
from bot.redact import redact
from bot.settings import DEFAULT_SLACK_API_URL, load_settings


def test_defaults_without_anything() -> None:
    s = load_settings({}, dotenv=None)
    assert s.db_path == Path("./recover.db")
    assert s.slack_api_url == DEFAULT_SLACK_API_URL
    assert (s.host, s.port) == ("127.0.0.1", 3000)
    assert s.approvers == () and s.channels == ()


def test_every_fixed_name_is_read(tmp_path: Path) -> None:
    env = {
        "CONTROL_HOST_URL": "https://control.example.internal/",
        "CONTROL_HOST_API_KEY": "k-123456",
        "RECOVER_DB": str(tmp_path / "x.db"),
        "SLACK_BOT_TOKEN": "xoxb-1-2-3",
        "SLACK_SIGNING_SECRET": "sig-secret-value",
        "SLACK_APP_TOKEN": "xapp-1-2",
        "SLACK_API_URL": "http://127.0.0.1:9/api",
        "RECOVER_APPROVERS": "U01ABC, W02DEF,S03GRP",
        "RECOVER_CHANNELS": "C0INCIDENT",
        "RECOVER_INSTALLATION": "prod",
        "DOCKER_HOST": "tcp://127.0.0.1:2375",
        "HOST": "0.0.0.0",
        "PORT": "0",
    }
    s = load_settings(env, dotenv=None)
    assert s.control_host_url == "https://control.example.internal"
    assert s.slack_api_url == "http://127.0.0.1:9/api/"  # a missing trailing slash is added
    assert s.approver_users == ("U01ABC", "W02DEF") and s.approver_groups == ("S03GRP",)
    assert s.channels == ("C0INCIDENT",)
    assert s.port == 0 and s.host == "0.0.0.0"
    assert s.installation == "prod" and s.docker_host == "tcp://127.0.0.1:2375"
    # Secrets stay out of repr, so a logged Settings object never shows them.
    text = repr(s)
    for secret in ("k-123456", "xoxb-1-2-3", "sig-secret-value", "xapp-1-2"):
        assert secret not in text
    # ...and once loaded, redact() masks them wherever they appear.
    assert "sig-secret-value" not in redact("error near sig-secret-value")


def test_every_problem_reported_once_without_secret_values() -> None:
    env = {
        "CONTROL_HOST_URL": "control.example.internal",
        "PORT": "http",
        "RECOVER_APPROVERS": "alice,U01OK",
        "RECOVER_CHANNELS": "#incidents",
        "SLACK_BOT_TOKEN": "not-a-token-secret-xyz",
    }
    with pytest.raises(SettingsError) as info:
        load_settings(env, dotenv=None)
    problems = info.value.problems
    assert len(problems) == 5
    joined = "\n".join(problems)
    for name in ("CONTROL_HOST_URL", "PORT", "RECOVER_APPROVERS", "RECOVER_CHANNELS", "SLACK_BOT_TOKEN"):
        assert name in joined
    assert "not-a-token-secret-xyz" not in str(info.value)


def test_dotenv_is_read_and_environment_wins(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        '# comment\nexport CONTROL_HOST_URL="http://127.0.0.1:8700"\nRECOVER_INSTALLATION=fromfile\nPORT=4000\n'
    )
    s = load_settings({"PORT": "5000"}, dotenv=dotenv)
    assert s.control_host_url == "http://127.0.0.1:8700"
    assert s.installation == "fromfile"
    assert s.port == 5000


def test_require_control_host_names_what_is_missing() -> None:
    s = load_settings({}, dotenv=None)
    with pytest.raises(SettingsError) as info:
        s.require_control_host()
    assert "CONTROL_HOST_URL" in str(info.value) and "CONTROL_HOST_API_KEY" in str(info.value)


def test_env_example_documents_every_setting() -> None:
    text = (Path(__file__).resolve().parents[2] / ".env.example").read_text()
    names = [
        "CONTROL_HOST_URL", "CONTROL_HOST_API_KEY", "RECOVER_DB", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET",
        "SLACK_APP_TOKEN", "SLACK_API_URL", "RECOVER_APPROVERS", "RECOVER_CHANNELS", "RECOVER_INSTALLATION",
        "DOCKER_HOST", "HOST", "PORT", "RECOVER_RUNBOOKS", "RECOVER_LOG_FILES", "RECOVER_LOG_LEVEL",
    ]  # fmt: skip
    lines = text.splitlines()
    for name in names:
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{name}="))
        assert lines[index - 1].startswith("#"), f"{name} has no comment above it"
    # The example loads as valid settings (placeholders, not problems).
    load_settings({}, dotenv=Path(__file__).resolve().parents[2] / ".env.example")
