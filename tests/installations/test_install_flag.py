"""``--install <name>`` is parsed once, by the parser, for every subcommand (not command by command)."""

from __future__ import annotations

import pytest

from bot.errors import CommandError
from bot.runbook import load_runbooks, parse_command
from bot.settings import Settings


@pytest.fixture(scope="module")
def runbooks():  # type: ignore[no-untyped-def]
    return load_runbooks(Settings().runbooks_dir)


def test_every_subcommand_accepts_install(runbooks) -> None:  # type: ignore[no-untyped-def]
    for name, spec in runbooks.commands.items():
        line = spec.example.removeprefix("/recover ")
        if spec.args and spec.args[-1].rest and not spec.flags:
            head = name
            line = f"{head} --install eu-1 {line[len(head) :].strip()}".strip()
        else:
            line = f"{line} --install eu-1"
        parsed = parse_command(line, runbooks)
        assert parsed.flag_text("install") == "eu-1", (name, line)


def test_a_bad_installation_name_is_refused_by_the_parser(runbooks) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="--install"):
        parse_command("diagnose ses_1 --install EU_1", runbooks)
    with pytest.raises(CommandError, match="given twice"):
        parse_command("cases --install eu-1 --install us-1", runbooks)


def test_a_note_keeps_every_dash_of_its_text(runbooks) -> None:  # type: ignore[no-untyped-def]
    parsed = parse_command("note --install eu-1 ses_1 retry --install later", runbooks)
    assert parsed.flag_text("install") == "eu-1"
    assert parsed.arg("text") == "retry --install later"
    assert parse_command("note ses_1 --install x", runbooks).flags == {}
