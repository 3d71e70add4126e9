"""The README's promises: it opens with exactly two set-up commands, and CI runs the second one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert block is not None, "README has no code block"
    # The first code block comes right after the title.
    assert text.index("```") < text.index("\n## ") if "\n## " in text else True
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands() -> None:
    commands = _setup_commands()
    assert len(commands) == 2
    demo, tests = commands
    assert demo.endswith("recover-bot demo")
    assert "[test]" in tests and "scripts/test.sh" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert _setup_commands()[1] in ci
    assert "start-dockerd.sh" in ci  # a real Docker engine for the Docker tests


def test_ci_runs_the_test_command_in_a_clone_with_nothing_beside_it() -> None:
    """A test that leans on a folder beside the checkout (shared/) must fail in CI, as on a user's clone."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    clone = next(i for i, line in enumerate(ci) if line.startswith("git clone"))
    enter = next(i for i, line in enumerate(ci) if line.startswith('cd "$clone_dir/'))
    run = next(i for i, line in enumerate(ci) if _setup_commands()[1] in line)
    assert any("mktemp -d" in line for line in ci[:clone])
    assert clone < enter < run


def test_test_script_never_skips_docker_silently() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert "SKIPPED" in script  # the loud reason for a new user without root
    fixtures = (ROOT / "tests" / "fixtures" / "docker.py").read_text()
    assert "CI" in fixtures  # under CI=true a Docker test fails instead of skipping


def test_the_readme_and_the_command_page_list_every_subcommand() -> None:
    from bot.runbook import load_runbooks

    readme = (ROOT / "README.md").read_text()
    listing = readme[readme.index("## The commands") :]
    block = listing[listing.index("```") : listing.index("```", listing.index("```") + 3)]
    page = (ROOT / "docs/commands.md").read_text()
    for name in load_runbooks(ROOT / "runbooks").commands:
        words = re.escape(name).replace(r"\ ", r"\s+")
        assert re.search(rf"(/recover|\|)\s+{words}\b", block), f"README's command list lacks `{name}`"
        assert re.search(rf"/recover\s+{words}\b", page), f"docs/commands.md lacks `{name}`"
