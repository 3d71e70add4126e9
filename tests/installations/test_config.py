"""The installations file: every problem named at its FILE:LINE in one run, a key never echoed, and
today's single-installation settings still one installation named `default`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import SettingsError
from bot.ids import DEFAULT_INSTALLATION
from bot.installations import (
    DockerTLS,
    InstallationsError,
    check_installations,
    installations_from_settings,
    load_installations,
    resolve_installations,
)
from bot.redact import redact
from bot.settings import load_settings

GOOD = """\
installations:
  - name: eu-1
    control_host_url: https://control.eu-1.example.internal/
    api_key_file: eu-1.key
    compose_project: controlhost-eu1
    channels: [C0EU1INCD]
    docker_host: tcp://docker.eu-1:2376
    docker_tls: {ca: tls/ca.pem, cert: tls/cert.pem, key: tls/key.pem}
    watch_channel: C0EU1INCD
  - name: us-1
    control_host_url: https://control.us-1.example.internal
    api_key_env: TEST_US1_KEY
    channels: []
    approvers: [U012ABC, S034ONCALL]
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "eu-1.key").write_text("key-of-eu-1-abcdef\n")
    (tmp_path / "tls").mkdir()
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / "tls" / name).write_text("-----BEGIN TEST-----\n")
    monkeypatch.setenv("TEST_US1_KEY", "key-of-us-1-abcdef")
    return tmp_path


def _write(folder: Path, text: str) -> Path:
    path = folder / "installations.yaml"
    path.write_text(text)
    return path


def _problems(folder: Path, text: str) -> list[str]:
    path = _write(folder, text)
    with pytest.raises(InstallationsError) as caught:
        load_installations(path)
    prefix = f"{path}:"
    assert all(p.startswith(prefix) for p in caught.value.problems), caught.value.problems
    return [p.removeprefix(prefix) for p in caught.value.problems]


def _entry(**lines: str) -> str:
    body = "\n".join(f"    {k}: {v}" for k, v in lines.items())
    return f"installations:\n  - name: eu-1\n{body}\n"


def test_a_good_file_gives_every_field(folder: Path) -> None:
    eu, us = load_installations(_write(folder, GOOD))
    assert eu.name == "eu-1" and eu.control_host_url == "https://control.eu-1.example.internal"
    assert eu.api_key is not None and eu.api_key.get_secret_value() == "key-of-eu-1-abcdef"
    assert (eu.compose_project, eu.channels, eu.watch_channel) == (
        "controlhost-eu1",
        ("C0EU1INCD",),
        "C0EU1INCD",
    )
    assert eu.docker_host == "tcp://docker.eu-1:2376"
    assert eu.docker_tls == DockerTLS(
        cert=folder / "tls" / "cert.pem", key=folder / "tls" / "key.pem", ca=folder / "tls" / "ca.pem"
    )
    assert eu.approvers is None  # the global approvers
    assert eu.origin == f"{folder / 'installations.yaml'}:2"
    assert us.api_key is not None and us.api_key.get_secret_value() == "key-of-us-1-abcdef"
    assert us.channels == () and us.approvers == ("U012ABC", "S034ONCALL") and us.docker_tls is None
    assert "key-of" not in repr(eu) + repr(us)
    # Registered as secrets: masked wherever text leaves the process (logs, errors).
    assert "key-of" not in redact("sent key-of-eu-1-abcdef, then key-of-us-1-abcdef")


def test_every_problem_at_once_each_at_its_line(folder: Path) -> None:
    text = """\
installations:
  - name: EU_1
    api_key: inline-secret-value
    chanels: [C1]
  - name: us-1
    control_host_url: ftp://control.us-1
    api_key_env: TEST_NOT_SET_ANYWHERE
    docker_host: http://docker.us-1:2375
  - name: us-1
    control_host_url: https://control.us-2.example.internal
    api_key_file: missing.key
extra: true
"""
    found = _problems(folder, text)
    assert found == [
        "2: name 'EU_1': lower-case letters, digits and '-', starting with a letter, at most 31",
        "2: control_host_url is missing",
        "3: api_key: never inline; use api_key_file or api_key_env",
        "4: unknown key 'chanels' (known: name, control_host_url, api_key_file, api_key_env, compose_project, "
        "channels, docker_host, docker_tls, watch_channel, approvers)",
        "6: control_host_url must start with http:// or https:// (got 'ftp://control.us-1')",
        "7: api_key_env: TEST_NOT_SET_ANYWHERE is not set (or empty) in the bot's environment",
        "8: docker_host must start with unix://, tcp://, ssh:// (got 'http://docker.us-1:2375')",
        f"9: name 'us-1' is already used ({folder / 'installations.yaml'}:5)",
        f"11: api_key_file: cannot read {folder / 'missing.key'} (No such file or directory); "
        "give a readable file holding the secret",
        "12: unknown key 'extra' (the file has one key: installations)",
    ]
    assert "inline-secret-value" not in "\n".join(found)


def test_a_channel_bound_to_two_installations(folder: Path) -> None:
    text = GOOD.replace("    channels: []", "    channels: [C0US1INCD, C0EU1INCD]")
    assert _problems(folder, text) == [
        "13: channel C0EU1INCD is already bound to eu-1: a channel belongs to one installation"
    ]


def test_two_installations_cannot_be_one_control_host_or_one_compose_project(folder: Path) -> None:
    text = GOOD.replace("https://control.us-1.example.internal", "https://control.eu-1.example.internal")
    text += "    compose_project: controlhost-eu1\n    docker_host: tcp://docker.eu-1:2376\n"
    assert _problems(folder, text) == [
        "11: control_host_url is also eu-1's: two installations cannot be one control host",
        "15: compose_project 'controlhost-eu1' on this Docker engine is already eu-1's",
    ]


def test_an_empty_key_file_is_named_never_its_content(folder: Path) -> None:
    (folder / "blank.key").write_text("\n")
    found = _problems(folder, _entry(control_host_url="https://c.example", api_key_file="blank.key"))
    assert found == [f"4: api_key_file: {folder / 'blank.key'} is empty; the file's text is the secret"]
    # A folder where the key file should be: unreadable for root too (tests may run as root).
    (folder / "secrets").mkdir()
    found = _problems(folder, _entry(control_host_url="https://c.example", api_key_file="secrets"))
    assert found == [
        f"4: api_key_file: cannot read {folder / 'secrets'} (Is a directory); give a readable file holding the secret"
    ]
    assert "key-of-eu-1" not in "\n".join(found)


def test_a_key_is_needed_and_only_one_form(folder: Path) -> None:
    assert _problems(folder, _entry(control_host_url="https://c.example")) == [
        "2: no API key: give api_key_file (a mounted secret) or api_key_env (a variable's name)"
    ]
    both = _entry(control_host_url="https://c.example", api_key_file="eu-1.key", api_key_env="TEST_US1_KEY")
    assert _problems(folder, both) == ["5: api_key_file and api_key_env are both set: keep one"]
    assert _problems(folder, _entry(control_host_url="https://c.example", api_key_env="'not a name'")) == [
        "4: api_key_env: 'not a name' is not an environment variable name"
    ]


def test_docker_tls_files_must_exist_and_suit_a_tcp_host(folder: Path) -> None:
    base = {"control_host_url": "https://c.example", "api_key_file": "eu-1.key"}
    missing = _entry(**base, docker_host="tcp://d:2376", docker_tls="{cert: tls/cert.pem, key: tls/nope.pem, x: 1}")
    assert _problems(folder, missing) == [
        "6: unknown key docker_tls.x (known: ca, cert, key)",
        f"6: docker_tls.key: {folder / 'tls' / 'nope.pem'} is not a readable file",
    ]
    no_key = _entry(**base, docker_host="tcp://d:2376", docker_tls="{cert: tls/cert.pem}")
    assert _problems(folder, no_key) == ["6: docker_tls.key is missing: the client's private key file"]
    unix = _entry(
        **base, docker_host="unix:///var/run/docker.sock", docker_tls="{cert: tls/cert.pem, key: tls/key.pem}"
    )
    assert _problems(folder, unix) == ["6: docker_tls applies to a tcp:// docker_host only"]
    for scheme in ("unix:///run/docker.sock", "tcp://proxy:2375", "ssh://ops@docker.eu-1"):
        (spec,) = load_installations(_write(folder, _entry(**base, docker_host=scheme)))
        assert spec.docker_host == scheme and spec.docker_tls is None


def test_ids_are_judged_like_the_settings(folder: Path) -> None:
    base = {"control_host_url": "https://c.example", "api_key_file": "eu-1.key"}
    bad = _entry(**base, channels="[C0EU1INCD, '#incidents']", approvers="[U012ABC, alice]", watch_channel="general")
    assert _problems(folder, bad) == [
        "5: channels: '#incidents' is not a Slack channel id (C…/G…) or `console`; use the id from the "
        "channel's details, not its #name",
        "6: approvers: 'alice' is not a Slack user id (U…/W…) or user-group id (S…); comma-separated, "
        "e.g. U012ABC,S034ONCALL",
        "7: watch_channel: 'general' is not a Slack channel id (C…/G…); use the id from the channel's "
        "details, not its #name",
    ]
    assert _problems(folder, _entry(**base, channels="C0EU1INCD", approvers="[]")) == [
        "5: channels must be a list of ids, e.g. channels: [C0EU1INCD]",
        "6: approvers: [] names nobody; leave the key out to use RECOVER_APPROVERS",
    ]


def test_the_file_itself(folder: Path) -> None:
    assert _problems(folder, "installations: [\n")[0].startswith("2: invalid YAML")
    assert _problems(folder, "installations: []\n") == ["1: installations must be a non-empty list"]
    assert _problems(folder, "- name: eu-1\n")[0].startswith("1: expected a mapping with an installations: list")
    twice = _entry(control_host_url="https://a.example", api_key_file="eu-1.key") + "    name: eu-2\n"
    assert _problems(folder, twice) == ["5: duplicate key 'name' (YAML would silently keep only the last one)"]
    specs, problems = check_installations(folder / "absent.yaml")
    assert specs == [] and problems[0].startswith(f"{folder / 'absent.yaml'}:1: cannot read the file")


def test_an_unsafe_tag_is_refused(folder: Path) -> None:
    text = "installations:\n  - !!python/object/apply:os.system ['true']\n"
    assert "could not determine a constructor" in _problems(folder, text)[0]


def test_todays_settings_are_one_installation_named_default() -> None:
    settings = load_settings(
        {
            "CONTROL_HOST_URL": "https://control.example.internal",
            "CONTROL_HOST_API_KEY": "k-123456789",
            "RECOVER_INSTALLATION": "controlhost",
            "DOCKER_HOST": "tcp://proxy:2375",
            "RECOVER_CHANNELS": "C0INCIDENT,console",
            "RECOVER_WATCH_CHANNEL": "C0WATCH1",
        },
        dotenv=None,
    )
    (spec,) = resolve_installations(settings)
    assert spec == installations_from_settings(settings)[0]
    assert spec.name == DEFAULT_INSTALLATION and spec.is_default
    assert spec.control_host_url == "https://control.example.internal"
    assert spec.api_key is not None and spec.api_key.get_secret_value() == "k-123456789"
    assert (spec.compose_project, spec.docker_host) == ("controlhost", "tcp://proxy:2375")
    assert (spec.channels, spec.watch_channel, spec.approvers) == (
        ("C0INCIDENT", "console"),
        "C0WATCH1",
        None,
    )


def test_the_file_is_enough_for_serve_and_excludes_control_host_url(folder: Path) -> None:
    path = _write(folder, GOOD)
    env = {"RECOVER_INSTALLATIONS_FILE": str(path)}
    settings = load_settings(env, dotenv=None, uses=("control_host",), requires=("control_host",))
    assert settings.installations_file == path
    assert [s.name for s in resolve_installations(settings)] == ["eu-1", "us-1"]
    with pytest.raises(SettingsError) as caught:
        load_settings({**env, "CONTROL_HOST_URL": "https://c.example"}, dotenv=None, requires=("control_host",))
    assert caught.value.problems == [
        "RECOVER_INSTALLATIONS_FILE and CONTROL_HOST_URL are both set: keep one (the file names each "
        "installation's control_host_url)"
    ]
    # Without the file, serve still needs CONTROL_HOST_URL (today's rule, unchanged).
    with pytest.raises(SettingsError) as caught:
        load_settings({}, dotenv=None, uses=("control_host",), requires=("control_host",))
    assert any(p.startswith("CONTROL_HOST_URL is not set") for p in caught.value.problems)


def test_resolve_reports_the_files_problems(folder: Path) -> None:
    path = _write(folder, _entry(control_host_url="https://c.example"))
    settings = load_settings({"RECOVER_INSTALLATIONS_FILE": str(path)}, dotenv=None, uses=("control_host",))
    with pytest.raises(InstallationsError) as caught:
        resolve_installations(settings)
    assert caught.value.problems == [
        f"{path}:2: no API key: give api_key_file (a mounted secret) or api_key_env (a variable's name)"
    ]


def test_the_readmes_example_is_a_valid_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Several installations", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    for name in ("eu-1-key", "eu-1-ca.pem", "eu-1-cert.pem", "eu-1-key.pem"):
        (tmp_path / name).write_text("secret-or-pem-content\n")
    monkeypatch.setenv("CONTROL_HOST_API_KEY_US1", "key-of-us-1-abcdef")
    eu, us = load_installations(_write(tmp_path, example.replace("/run/secrets/", f"{tmp_path}/")))
    assert (eu.name, us.name) == ("eu-1", "us-1") and eu.docker_tls is not None and us.approvers
