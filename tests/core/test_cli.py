"""The recover-bot command: every subcommand's help carries an example; errors are clear, exit 2."""

from __future__ import annotations

import argparse
import subprocess
import sys

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
