"""Settings: fixed names, one clear message per problem, secrets never printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.errors import SettingsError
from bot.redact import redact
from bot.settings import (
    ALL_GROUPS,
    DEFAULT_SLACK_API_URL,
    environ_names,
    load_settings,
    packaged_runbooks,
    reveal,
)


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
    assert s.approvers == ("U01ABC", "W02DEF", "S03GRP")  # users and user groups, in the order given
    assert s.channels == ("C0INCIDENT",)
    assert s.port == 0 and s.host == "0.0.0.0"
    assert s.compose_project == "prod" and s.docker_host == "tcp://127.0.0.1:2375"
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
    assert s.compose_project == "fromfile"
    assert s.port == 5000


def test_watch_channel_and_interval_are_read_and_checked() -> None:
    s = load_settings({"RECOVER_WATCH_CHANNEL": " C0WATCH ", "RECOVER_WATCH_INTERVAL": "2.5"}, dotenv=None)
    assert s.watch_channel == "C0WATCH" and s.watch_interval == 2.5
    assert load_settings({}, dotenv=None).watch_channel is None
    with pytest.raises(SettingsError) as info:
        load_settings({"RECOVER_WATCH_CHANNEL": "#incidents", "RECOVER_WATCH_INTERVAL": "0"}, dotenv=None)
    joined = "\n".join(info.value.problems)
    assert "RECOVER_WATCH_CHANNEL" in joined and "RECOVER_WATCH_INTERVAL" in joined and len(info.value.problems) == 2


def test_the_worker_stale_time_is_read_and_never_below_three_beats() -> None:
    assert load_settings({}, dotenv=None).worker_stale_seconds == 30.0
    assert load_settings({"RECOVER_WORKER_STALE_SECONDS": "6"}, dotenv=None).worker_stale_seconds == 6.0
    with pytest.raises(SettingsError) as info:
        load_settings({"RECOVER_WORKER_STALE_SECONDS": "2"}, dotenv=None)
    assert "RECOVER_WORKER_STALE_SECONDS must be a number of seconds of at least 6" in info.value.problems[0]


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


def test_secrets_are_secret_str_and_comma_lists_are_not_json() -> None:
    env = {
        "CONTROL_HOST_API_KEY": "k-abcdef",
        "RECOVER_AUDIT_KEY": "audit-key-value",
        "RECOVER_APPROVERS": "U01ABC,S03GRP",
        "RECOVER_CHANNELS": " C0INCIDENT , G0PRIVATE ",
        "RECOVER_SLACK_TEAMS": "T0WORK,E0ENTERPRISE",
        "RECOVER_CONSOLE_USERS": "alice:U01ABC, bob:W02DEF",
    }
    s = load_settings(env, dotenv=None)
    assert isinstance(s.control_host_api_key, SecretStr) and isinstance(s.audit_key, SecretStr)
    assert reveal(s.control_host_api_key) == "k-abcdef"
    assert s.audit_key_bytes() == b"audit-key-value"
    assert s.approvers == ("U01ABC", "S03GRP") and s.channels == ("C0INCIDENT", "G0PRIVATE")
    assert s.slack_teams == ("T0WORK", "E0ENTERPRISE")
    assert s.console_users == {"alice": "U01ABC", "bob": "W02DEF"}
    assert "audit-key-value" not in repr(s) and "k-abcdef" not in repr(s)
    # A JSON-looking value is text like any other, not decoded into a list.
    with pytest.raises(SettingsError) as info:
        load_settings({"RECOVER_APPROVERS": '["U01ABC"]'}, dotenv=None)
    assert info.value.problems == [
        "RECOVER_APPROVERS: '[\"U01ABC\"]' is not a Slack user id (U…/W…) or user-group id (S…); "
        "comma-separated, e.g. U012ABC,S034ONCALL"
    ]


def test_console_users_and_teams_are_validated_in_one_line_each() -> None:
    env = {
        "RECOVER_CONSOLE_USERS": "alice:U01ABC,bob:C0NOTAUSER,carol,alice:W02DEF",
        "RECOVER_SLACK_TEAMS": "T0OK,#workspace",
        "RECOVER_AUDIT_KEY": "k-abcdef-secret",
        "RECOVER_AUDIT_KEY_FILE": "/nonexistent/key",
    }
    with pytest.raises(SettingsError) as info:
        load_settings(env, dotenv=None)
    problems = info.value.problems
    assert len(problems) == 3, problems
    users = next(p for p in problems if p.startswith("RECOVER_CONSOLE_USERS"))
    assert "'bob:C0NOTAUSER'" in users and "'carol'" in users and "alice (listed twice)" in users
    assert any(p.startswith("RECOVER_SLACK_TEAMS: '#workspace'") for p in problems)
    assert "RECOVER_AUDIT_KEY and RECOVER_AUDIT_KEY_FILE are both set: keep one" in problems
    assert "k-abcdef-secret" not in str(info.value)


def test_audit_key_file_is_read_and_an_unreadable_one_named(tmp_path: Path) -> None:
    key = tmp_path / "audit.key"
    key.write_text("from-a-file\n")
    s = load_settings({"RECOVER_AUDIT_KEY_FILE": str(key)}, dotenv=None)
    assert s.audit_key_bytes() == b"from-a-file"
    with pytest.raises(SettingsError) as info:
        load_settings({"RECOVER_AUDIT_KEY_FILE": str(tmp_path / "missing.key")}, dotenv=None)
    assert info.value.problems[0].startswith("RECOVER_AUDIT_KEY_FILE: cannot read")
    # A key beside the steps it protects protects nothing.
    with pytest.raises(SettingsError) as info:
        load_settings({"RECOVER_AUDIT_KEY_FILE": str(key), "RECOVER_DB": str(tmp_path / "r.db")}, dotenv=None)
    assert "sits beside the database" in info.value.problems[0]


def test_each_caller_reads_only_the_groups_it_uses() -> None:
    env = {"PORT": "http", "SLACK_BOT_TOKEN": "nope", "RECOVER_DB": "/tmp/audit.db"}
    # The store and audit groups only: a bad PORT or token does not stop an audit.
    s = load_settings(env, dotenv=None, uses=("store", "audit"))
    assert s.db_path == Path("/tmp/audit.db") and s.port == 3000 and s.slack_bot_token is None
    # What is required and missing is named together with what is invalid, all in one run.
    with pytest.raises(SettingsError) as info:
        load_settings(env, dotenv=None, uses=ALL_GROUPS, requires=("control_host", "slack"))
    names = [p.split(" ")[0].rstrip(":") for p in info.value.problems]
    assert sorted(names) == sorted(
        ["PORT", "SLACK_BOT_TOKEN", "CONTROL_HOST_URL", "CONTROL_HOST_API_KEY", "SLACK_SIGNING_SECRET"]
    )
    # An invalid token is not also reported as missing.
    assert sum(p.startswith("SLACK_BOT_TOKEN") for p in info.value.problems) == 1


def test_the_packaged_runbooks_are_the_default() -> None:
    s = load_settings({}, dotenv=None)
    assert s.runbooks_dir == packaged_runbooks()
    assert (s.runbooks_dir / "session-recovery.yaml").is_file()


def test_readme_and_env_example_document_every_setting() -> None:
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    example = (root / ".env.example").read_text().splitlines()
    for name in environ_names():
        assert f"| `{name}` |" in readme or f"`{name}` /" in readme or f"/ `{name}`" in readme, name
        index = next((i for i, line in enumerate(example) if line.startswith(f"{name}=")), None)
        assert index is not None and example[index - 1].startswith("#"), f"{name} undocumented in .env.example"


# --- RECOVER_DB: a SQLite path or a postgresql:// URL --------------------------------------------

PG_URL = "postgresql://recover:pg-Secret-9f3@db.internal:5432/recover"


def test_a_postgresql_url_selects_the_server_and_its_password_is_masked() -> None:
    s = load_settings({"RECOVER_DB": PG_URL}, dotenv=None, uses=["store"])
    assert s.store_target == PG_URL and s.db_path == Path("./recover.db")
    assert "pg-Secret-9f3" not in repr(s)
    # Registered: masked in any text, even apart from its URL.
    assert redact(f"connect {PG_URL} failed; password pg-Secret-9f3") == (
        "connect postgresql://recover:***@db.internal:5432/recover failed; password ***"
    )
    assert load_settings({"RECOVER_DB": "/data/r.db"}, dotenv=None).store_target == Path("/data/r.db")
    # A URL nobody configured (an `--db` argument, a library's message) is masked by its shape.
    assert redact("postgres://ops:never-set-pw@10.0.0.5/db") == "postgres://ops:***@10.0.0.5/db"


@pytest.mark.parametrize("value", ["mysql://u:hunter2@h/db", "http://h/x", "sqlite:///x.db"])
def test_another_url_in_recover_db_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"RECOVER_DB": value}, dotenv=None, uses=["store"])
    (line,) = info.value.problems
    scheme = value.split("://")[0]
    assert line.startswith(f"RECOVER_DB: a {scheme}:// URL is not a store recover-bot can use")
    assert "postgresql://" in line and "hunter2" not in str(info.value)


def test_recover_db_file_holds_the_url_and_is_one_of_two(tmp_path: Path) -> None:
    secret = tmp_path / "db-url"
    secret.write_text(PG_URL + "\n")
    s = load_settings({"RECOVER_DB_FILE": str(secret)}, dotenv=None, uses=["store"])
    assert s.store_target == PG_URL
    with pytest.raises(SettingsError) as both:
        load_settings({"RECOVER_DB_FILE": str(secret), "RECOVER_DB": "./x.db"}, dotenv=None, uses=["store"])
    assert both.value.problems == ["RECOVER_DB and RECOVER_DB_FILE are both set: keep one"]
    secret.write_text("/data/recover.db\n")
    with pytest.raises(SettingsError) as path:
        load_settings({"RECOVER_DB_FILE": str(secret)}, dotenv=None, uses=["store"])
    assert path.value.problems == [
        f"RECOVER_DB_FILE: {secret} does not hold a postgresql:// URL; a SQLite file path goes in RECOVER_DB itself"
    ]
