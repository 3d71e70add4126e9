"""`recover-bot installations check FILE` against real sandbox control hosts over HTTP: the file's
problems at their lines, then one read per installation, one line each, never a key."""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli import main
from bot.installations.cli import check
from bot.sandbox import SandboxHandle, start_sandbox
from tests.fixtures.install import Installed, InstalledSandbox

EU_KEY = "sbx_eu1_check_key_0123456789"
US_KEY = "sbx_us1_check_key_0123456789"


@pytest.fixture
def hosts() -> Iterator[tuple[SandboxHandle, SandboxHandle]]:
    scopes = {"sessions:read", "sessions:recover"}
    with (
        start_sandbox(scenarios="builtin", api_keys={EU_KEY: scopes}) as eu,
        start_sandbox(scenarios="builtin", api_keys={US_KEY: scopes}) as us,
    ):
        yield eu, us


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _file(folder: Path, entries: list[tuple[str, str, str]]) -> Path:
    lines = ["installations:"]
    for name, url, key in entries:
        (folder / f"{name}.key").write_text(key + "\n")
        lines += [f"  - name: {name}", f"    control_host_url: {url}", f"    api_key_file: {name}.key"]
    path = folder / "installations.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = check(str(path), out, err, timeout=3.0)
    return status, out.getvalue(), err.getvalue()


def test_every_host_answers_once(hosts: tuple[SandboxHandle, SandboxHandle], tmp_path: Path) -> None:
    eu, us = hosts
    path = _file(tmp_path, [("eu-1", eu.url, EU_KEY), ("us-1", us.url, US_KEY)])
    status, out, err = _run(path)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        f"eu-1: ok, {eu.url} answered",
        f"us-1: ok, {us.url} answered",
        f"2 installation(s) in {path}: every control host answered",
    ]
    for host in (eu, us):
        (request,) = host.admin.requests()
        assert (request["method"], request["path"], request["query"].get("limit")) == (
            "GET",
            "/v1/sessions",
            "1",
        )


def test_one_line_per_installation_that_does_not_answer(
    hosts: tuple[SandboxHandle, SandboxHandle], tmp_path: Path
) -> None:
    eu, us = hosts
    us.admin.fault("server_error", "/v1/sessions", times=None, status=503)
    down = f"http://127.0.0.1:{_closed_port()}"
    path = _file(
        tmp_path,
        [("eu-1", eu.url, US_KEY), ("us-1", us.url, US_KEY), ("ap-1", down, "sbx_ap1_check_key_0123456789")],
    )
    status, out, err = _run(path)
    assert status == 1
    lines = out.splitlines()
    assert len(lines) == 4
    assert lines[0] == (
        "eu-1: The control host refused listing sessions (HTTP 401): the installation's key "
        "(api_key_file or api_key_env) is wrong or expired."
    )
    assert lines[1].startswith("us-1: ") and "503" in lines[1], lines[1]
    assert lines[2] == "ap-1: No answer from the control host to listing sessions (ConnectError)"
    assert (lines[3], err) == (f"3 installation(s) in {path}: 3 did not answer", "")
    assert US_KEY not in out + err and "sbx_ap1" not in out + err
    # Once: no retry of a failing host (the check says what the host does now).
    assert len(us.admin.requests()) == 1


def test_a_bad_file_reaches_no_host(hosts: tuple[SandboxHandle, SandboxHandle], tmp_path: Path) -> None:
    eu, _ = hosts
    path = _file(tmp_path, [("eu-1", eu.url, EU_KEY), ("eu-1", "https://other.example", EU_KEY)])
    status, out, err = _run(path)
    assert (status, out) == (1, "")
    assert err.splitlines() == [f"{path}:5: name 'eu-1' is already used ({path}:2)", "1 problem(s) found"]
    assert eu.admin.requests() == []


def test_the_cli_exit_status(
    hosts: tuple[SandboxHandle, SandboxHandle], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eu, us = hosts
    good = _file(tmp_path, [("eu-1", eu.url, EU_KEY), ("us-1", us.url, US_KEY)])
    assert main(["installations", "check", str(good)]) == 0
    (tmp_path / "bad.yaml").write_text("installations:\n  - name: eu-1\n    api_key: inline-key-value\n")
    assert main(["installations", "check", str(tmp_path / "bad.yaml")]) == 1
    captured = capsys.readouterr()
    assert f"{tmp_path / 'bad.yaml'}:3: api_key: never inline; use api_key_file or api_key_env" in captured.err
    assert "inline-key-value" not in captured.out + captured.err


def test_without_a_file_the_one_the_bot_loads(
    hosts: tuple[SandboxHandle, SandboxHandle], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    eu, _ = hosts
    monkeypatch.chdir(tmp_path)  # no .env here
    monkeypatch.delenv("RECOVER_INSTALLATIONS_FILE", raising=False)
    assert main(["installations", "check"]) == 2
    assert (
        capsys.readouterr().err == "recover-bot installations check: name a FILE, or set RECOVER_INSTALLATIONS_FILE\n"
    )
    monkeypatch.setenv("RECOVER_INSTALLATIONS_FILE", str(_file(tmp_path, [("eu-1", eu.url, EU_KEY)])))
    assert main(["installations", "check"]) == 0
    assert capsys.readouterr().out.startswith(f"eu-1: ok, {eu.url} answered\n")


def test_without_a_file_the_check_judges_its_channels_against_recover_channels_as_the_start_does(
    hosts: tuple[SandboxHandle, SandboxHandle], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    eu, _ = hosts
    monkeypatch.chdir(tmp_path)  # no .env here
    path = _file(tmp_path, [("eu-1", eu.url, EU_KEY)])
    path.write_text(path.read_text() + "    channels: [C0EU1INCD]\n")
    monkeypatch.setenv("RECOVER_INSTALLATIONS_FILE", str(path))
    monkeypatch.setenv("RECOVER_CHANNELS", "C0OTHER01")
    assert main(["installations", "check"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{path}:5: channel C0EU1INCD is not in RECOVER_CHANNELS (C0OTHER01): an installation's channels narrow "
        "RECOVER_CHANNELS, never widen it; add it to RECOVER_CHANNELS or remove it here"
    )
    monkeypatch.setenv("RECOVER_CHANNELS", "C0OTHER01,C0EU1INCD")
    assert main(["installations", "check"]) == 0


@pytest.mark.subprocess
@pytest.mark.slow
def test_the_installed_command_from_an_unrelated_folder(
    installed: Installed, installed_sandbox: InstalledSandbox, workdir: Path, tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    path = _file(secrets, [("eu-1", installed_sandbox.url, installed_sandbox.api_key)])
    result = installed.run("installations", "check", str(path), cwd=workdir)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.splitlines()[0] == f"eu-1: ok, {installed_sandbox.url} answered"
    assert installed_sandbox.api_key not in result.stdout
    (secrets / "eu-1.key").write_text("wrong-key-for-the-check\n")
    result = installed.run("installations", "check", str(path), cwd=workdir)
    assert result.returncode == 1 and result.stdout.startswith("eu-1: "), result.stdout
    assert "wrong-key-for-the-check" not in result.stdout + result.stderr
