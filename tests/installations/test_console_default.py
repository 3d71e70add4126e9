"""`recover-bot console --install <name>` with several installations: commands that name no
installation act on that one (a command's own --install still chooses another); a near name gets the
chat's did-you-mean, at start and in a command. The CLI in a process of its own, against two sandboxes
over HTTP with the same session ids; their request logs are the ground truth."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.installations.render import write_installations
from bot.sandbox import SandboxHandle

pytestmark = pytest.mark.subprocess

SESSION = "ses_restore_transient"


def _console(tmp_path: Path, hosts: dict[str, SandboxHandle], script: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "conf" / "installations.yaml"
    urls = {name: h.url for name, h in hosts.items()}
    write_installations(path, urls, {name: h.api_key for name, h in hosts.items()}, channels=("console",))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECOVER_", "CONTROL_HOST_", "SLACK_"))}
    env.update(RECOVER_INSTALLATIONS_FILE=str(path), RECOVER_DB=str(tmp_path / "recover.db"), HOME=str(tmp_path))
    code = "from bot.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "console", *args], input=script, capture_output=True, text=True,
        env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip


def _asked(handle: SandboxHandle) -> bool:
    return any(SESSION in r["path"] for r in handle.admin.requests())


def test_the_console_runs_for_its_installation_and_a_near_name_gets_did_you_mean(
    sandboxes: Callable[..., SandboxHandle], tmp_path: Path
) -> None:
    hosts = {"eu-1": sandboxes("eu-1"), "us-1": sandboxes("us-1")}
    run = _console(tmp_path, hosts, f"diagnose {SESSION}\ndiagnose {SESSION} --install eu1\n", "--install", "us-1")
    assert "commands that name none act on us-1" in run.stdout, run.stdout + run.stderr
    assert f"[us-1] {SESSION}: " in run.stdout, run.stdout
    assert _asked(hosts["us-1"]) and not _asked(hosts["eu-1"])  # the default, and a typo reaches no host
    assert "There is no installation `eu1`.\nDid you mean:\n  --install eu-1\n" in run.stdout, run.stdout

    typo = _console(tmp_path, hosts, "", "--install", "us1")
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "There is no installation `us1`.\nDid you mean:\n  recover-bot console --install us-1\n" in typo.stderr
