"""The README's `recover-bot …` commands, typed as written in a fresh shell of a fresh clone.

The clone is an empty folder holding the checkout's `runbooks/` and a `.venv` that is the installed
wheel's virtualenv; the shell's PATH has nothing of ours until the README's own way onto PATH is run.
A command that needs nothing outside (no store, no file to name, no service left running) runs as
written and must succeed; every other one must at least name a subcommand the installed script has.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.install import REPO, Installed

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text()
# Subcommands whose commands as written need something outside the fresh clone: a server left running,
# a store the bot wrote, or a file the reader names. They are checked through their --help.
NEEDS_OUTSIDE = {
    "demo": "runs until stopped",
    "console": "a control host",
    "serve": "Slack",
    "sandbox": "runs until stopped",
    "browse": "runs until stopped",
    "audit": "a store the bot wrote",
    "backup": "a store the bot wrote",
    "installations": "an installations file",
}
PLACEHOLDER = re.compile(r"[\[…]|\b[A-Z][A-Z_:]+\b")
WORD = re.compile(r"^[a-z][a-z-]*$")


def _readme_commands() -> list[str]:
    """Every `recover-bot …` span of the README after its two set-up commands, whitespace folded."""
    body = README[README.index("```", README.index("```") + 3) + 3 :]
    spans = re.findall(r"`(recover-bot(?: [^`]*)?)`", body)
    return sorted({" ".join(span.split()) for span in spans})


def _path_setup() -> str:
    """The one command the README says puts `recover-bot` on PATH in a new shell."""
    match = re.search(r"`([^`]*activate[^`]*)`[^.]*puts `recover-bot` on PATH", README)
    assert match, "the README never says how `recover-bot` gets on PATH after its set-up commands"
    return match.group(1)


def _shell(installed: Installed, clone: Path, setup: str, command: str) -> subprocess.CompletedProcess[str]:
    env = installed.env(clone)
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # a fresh shell: the virtualenv is not on it
    return subprocess.run(
        ["bash", "-c", f"{setup} && {command}"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _subcommand(command: str) -> list[str]:
    words = []
    for word in command.split()[1:]:
        if not WORD.match(word):
            break
        words.append(word)
    return words


def test_every_readme_command_works_as_written_after_the_path_setup(installed: Installed, workdir: Path) -> None:
    commands = _readme_commands()
    assert len(commands) > 15  # the README's commands were found, not an empty list
    clone = workdir / "clone"
    clone.mkdir()
    shutil.copytree(REPO / "runbooks", clone / "runbooks")
    (clone / ".venv").symlink_to(installed.venv)
    setup = _path_setup()

    ran_as_written = []
    for command in commands:
        words = _subcommand(command)
        as_written = ("--help" in command or "--version" in command) or (
            bool(words) and words[0] not in NEEDS_OUTSIDE and not PLACEHOLDER.search(command)
        )
        line = command if as_written else " ".join(["recover-bot", *words, "--help"])
        res = _shell(installed, clone, setup, line)
        assert res.returncode == 0, f"`{line}` (README: `{command}`) failed:\n{res.stdout}{res.stderr}"
        assert "Traceback" not in res.stderr
        if as_written:
            ran_as_written.append(command)
    # The ones a new user can type at once, with no outside service, did run as written.
    for expected in (
        "recover-bot --version",
        "recover-bot runbook check runbooks/",
        "recover-bot audit verify --help",
        "recover-bot sandbox --help",
    ):
        assert expected in ran_as_written, ran_as_written
    assert sorted(p.name for p in clone.iterdir()) == [".venv", "runbooks"]  # nothing written there
