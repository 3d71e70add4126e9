"""The recover-bot command: every subcommand's help carries an example; errors are clear, exit 2."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import build_parser, main


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, sub in _subparsers(parser).items():
        found.extend(_all_commands(sub, (*prefix, name)))
    return found


def test_every_command_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _all_commands(build_parser())
    assert ("demo",) in commands and ("audit", "verify") in commands and ("runbook", "check") in commands
    for command in commands:
        with pytest.raises(SystemExit) as info:
            main([*command, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert "example:" in out.lower(), f"`recover-bot {' '.join(command)} --help` shows no example"
        assert "recover-bot" in out.lower().split("example:")[1]


@pytest.mark.subprocess
def test_console_without_control_host_is_a_clear_error_not_a_sandbox(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "console"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "CONTROL_HOST_URL is not set" in proc.stderr
    assert "sandbox" not in proc.stdout.lower()


@pytest.mark.subprocess
def test_invalid_settings_are_listed_without_secrets(tmp_path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PORT": "x",
        "SLACK_BOT_TOKEN": "oops-supersecretvalue",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "serve"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 2
    assert "PORT must be a number" in proc.stderr
    assert "SLACK_BOT_TOKEN does not look like a bot token" in proc.stderr
    assert "supersecretvalue" not in proc.stderr + proc.stdout


@pytest.mark.subprocess
def test_the_bot_refuses_to_start_with_an_invalid_runbook(tmp_path) -> None:
    from tests.runbook.helpers import copy_runbooks, edit

    directory = copy_runbooks(tmp_path)
    path, line = edit(directory, "kind: diagnose", "kind: diagnoze")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RECOVER_RUNBOOKS": str(directory)}
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "demo"], input="/recover cases\n", capture_output=True, text=True,
        env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"{path}:{line}:" in proc.stderr and "diagnoze" in proc.stderr
    assert "alice>" not in proc.stdout  # nothing ran


def _serve_env(tmp_path, **extra: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CONTROL_HOST_URL": "http://127.0.0.1:9",
        "CONTROL_HOST_API_KEY": "k-serve-secret",
        "SLACK_BOT_TOKEN": "xoxb-serve-secret",
        "SLACK_SIGNING_SECRET": "sig-serve-secret",
        "RECOVER_DB": str(tmp_path / "serve.db"),
        "RECOVER_AUDIT_KEY": "none",  # unkeyed on purpose: these tests are about start-up errors
        **extra,
    }


def _serve(tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "serve"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )


def _only_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.mark.subprocess
def test_serve_on_a_busy_port_is_one_line_before_slack_is_called(tmp_path, slack_api) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _serve(tmp_path, _serve_env(tmp_path, PORT=str(port), SLACK_API_URL=slack_api.base_url))
    assert proc.returncode == 2
    assert _only_line(proc.stderr) == (
        f"cannot listen on 127.0.0.1:{port}: the port is already in use; choose another PORT (0 = any free port)"
    )
    assert slack_api.calls_to("auth.test") == []  # the port is checked first


@pytest.mark.subprocess
def test_serve_names_auth_test_when_slack_is_unreachable_or_refuses_the_token(tmp_path, slack_api) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/api/"
    proc = _serve(tmp_path, _serve_env(tmp_path, PORT="0", SLACK_API_URL=dead))
    assert proc.returncode == 2
    line = _only_line(proc.stderr)
    assert line.startswith(f"cannot reach Slack: calling auth.test at {dead}auth.test failed (")
    assert "check SLACK_API_URL" in line

    slack_api.fail("auth.test", "invalid_auth")
    proc = _serve(tmp_path, _serve_env(tmp_path, PORT="0", SLACK_API_URL=slack_api.base_url))
    assert proc.returncode == 2
    assert _only_line(proc.stderr).startswith("Slack refused SLACK_BOT_TOKEN at auth.test (invalid_auth)")
    for secret in ("k-serve-secret", "xoxb-serve-secret", "sig-serve-secret"):
        assert secret not in proc.stderr + proc.stdout


@pytest.mark.subprocess
def test_an_unreadable_store_is_one_line(tmp_path) -> None:
    (tmp_path / "not.db").write_text("this is not sqlite, just text that is long enough" * 40)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RECOVER_DB": str(tmp_path / "not.db")}
    proc = subprocess.run(
        [sys.executable, "-m", "bot.cli", "demo"], input="", capture_output=True, text=True, env=env,
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert _only_line(proc.stderr).startswith(f"RECOVER_DB: cannot open the step store {tmp_path / 'not.db'} (")


def test_a_usage_error_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["sandbox", "--port", "99999"])
    assert info.value.code == 2
    assert _only_line(capsys.readouterr().err) == (
        "recover-bot sandbox: argument --port: '99999' is not a port: use a number from 0 to 65535 "
        "(0 = any free port) (see recover-bot sandbox --help)"
    )


def test_an_unexpected_error_is_one_line_exit_70(monkeypatch, capsys, tmp_path) -> None:
    # The only stand-in of this file: a handler that raises what no code path should, to see the
    # last-resort report (one line, exit 70) rather than a traceback.
    import bot.cli as cli

    def broken(args, settings):
        raise ZeroDivisionError("boom")

    monkeypatch.chdir(tmp_path)
    parser = cli.build_parser()
    _subparsers(_subparsers(parser)["runbook"])["check"].set_defaults(handler=broken)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main(["runbook", "check"]) == 70
    assert "unexpected error (ZeroDivisionError: boom)" in _only_line(capsys.readouterr().err)


def _console_script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed ``recover-bot``, from a folder of its own, as a person types it."""
    script = Path(sys.executable).parent / "recover-bot"
    return subprocess.run([str(script), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_bare_recover_bot_prints_its_help_not_an_error(tmp_path: Path) -> None:
    bare = _console_script(cwd=tmp_path)
    assert bare.returncode == 0 and bare.stderr == "", bare.stderr
    assert bare.stdout.startswith("usage: recover-bot") and "demo" in bare.stdout and "Exit status" in bare.stdout


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (("dmeo",), "recover-bot demo"),
        (("sandbx",), "recover-bot sandbox"),
        (("audit", "verfy"), "recover-bot audit verify"),
    ],
)
def test_a_mistyped_command_gets_did_you_mean(tmp_path: Path, typed: tuple[str, ...], meant: str) -> None:
    wrong = _console_script(*typed, cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert _only_line(wrong.stderr) == (
        f"{' '.join(('recover-bot', *typed[:-1]))}: no command {typed[-1]!r}: did you mean `{meant}`? "
        f"(see {' '.join(('recover-bot', *typed[:-1]))} --help)"
    )


def test_a_command_far_from_any_lists_them_all(tmp_path: Path) -> None:
    far = _console_script("zzzzzz", cwd=tmp_path)
    assert far.returncode == 2 and "no command 'zzzzzz': one of: demo, console, serve" in far.stderr
