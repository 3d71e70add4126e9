"""Every example the help shows parses and passes the runbook's validation (R5.1: say exactly what
to type); every decision's required flags are in its usage, from the YAML."""

from __future__ import annotations

import argparse
import re
import shlex

from bot.cli import build_parser
from bot.runbook import help_text, parse_command
from bot.runbook.usage import decide_form, decision_flags


def _examples(text: str) -> list[str]:
    return [line.split("Example:", 1)[1].strip() for line in text.splitlines() if "Example:" in line]


def test_every_subcommand_example_in_help_parses_and_validates(runbooks) -> None:
    seen = 0
    for name, spec in runbooks.commands.items():
        examples = _examples(help_text(runbooks, name))
        assert examples == [spec.example], name
        for example in examples:
            parsed = parse_command(example, runbooks)  # raises CommandError with the reason otherwise
            assert parsed.name == name, example
            decision = parsed.arg("decision") if any(a.choices == "decisions" for a in spec.args) else None
            if decision:
                # The example gives every field its decision's form would require, valid as typed.
                fields = decide_form(runbooks, decision)
                values = {f.name: str(parsed.flags[f.name]) for f in fields if f.name in parsed.flags}
                assert {f.name: f.problem(values.get(f.name)) for f in fields if f.problem(values.get(f.name))} == {}
            seen += 1
    assert seen == len(runbooks.commands) >= 15


def test_each_decision_usage_line_names_its_required_flags(runbooks) -> None:
    spec = runbooks.commands["decide"]
    text = help_text(runbooks, "decide")
    for decision in runbooks.decidable:
        line = next(x for x in text.splitlines() if f"decide <session_id> {decision} " in x)
        for flag, required in decision_flags(runbooks, spec, decision):
            assert f"--{flag.name} " in line, (decision, flag.name)
            assert (f"[--{flag.name} " not in line) == required
    abandon = next(x for x in text.splitlines() if "decide <session_id> abandon " in x)
    assert "--turn <turn_id>" in abandon and "--effects" in abandon and "--evidence" not in abandon
    assert "a second person approves" in abandon
    # The error for a missing flag shows the same lines up front.
    from bot.errors import CommandError

    try:
        parse_command("/recover decide ses_1 abandon --reason x", runbooks)
    except CommandError as exc:
        assert exc.usage is not None and abandon.strip() in exc.usage
    else:
        raise AssertionError("abandon without --turn parsed")


def _cli_examples(parser: argparse.ArgumentParser) -> list[str]:
    lines = [line.strip() for line in (parser.epilog or "").splitlines()]
    found = [line for line in lines if re.match(r"^([A-Z_]+=\S+ )*recover-bot ", line)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_cli_examples(sub))
    return found


def test_every_command_line_example_parses() -> None:
    examples = _cli_examples(build_parser())
    assert len(examples) >= 8
    for example in examples:
        words = shlex.split(example.split("#", 1)[0])
        while re.match(r"^[A-Z_]+=", words[0]):  # leading VAR=value settings
            words.pop(0)
        assert words[0] == "recover-bot", example
        build_parser().parse_args(words[1:])  # SystemExit(2) on a bad example
