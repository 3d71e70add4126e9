"""The /recover grammar (docs/commands.md) and the parser's robustness on arbitrary text."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.errors import CommandError
from bot.runbook import RunbookSet, decode_slack, help_text, parse_command


def test_decide_with_flags_in_any_order(runbooks: RunbookSet) -> None:
    a = parse_command(
        '/recover decide ses_1 abandon --turn turn_9 --effects "pushed a branch" --reason "checked" --yes',
        runbooks,
    )
    b = parse_command('decide ses_1 abandon --yes --reason=checked --effects="pushed a branch" --turn=turn_9', runbooks)
    assert a.kind == b.kind == "decide" and a.channel_restricted
    assert a.args == b.args == {"session_id": "ses_1", "decision": "abandon"}
    assert a.flags == b.flags == {"turn": "turn_9", "effects": "pushed a branch", "reason": "checked", "yes": True}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("decide ses_1 close --reason “curly double”", "curly double"),
        ("decide ses_1 close --reason ‘curly single’", "curly single"),
        ("decide ses_1 close --reason 'straight single'", "straight single"),
        ("decide ses_1 close --reason=“it’s done”", "it’s done"),
        ('decide ses_1 close --reason "don\'t panic"', "don't panic"),
        ("decide ses_1 close --reason it's", "it's"),
        ("decide ses_1 close —reason dash", "dash"),
        ("decide ses_1 close --reason a&amp;b&lt;c&gt;", "a&b<c>"),
        ("decide ses_1 close --reason &amp;lt;", "&lt;"),
        ("decide ses_1 close --reason <@U123|alice>", "@alice"),
        ("decide ses_1 close --reason <@U123>", "@U123"),
        ("decide ses_1 close --reason <#C123|ops>", "#ops"),
        ("decide ses_1 close --reason <https://x.example/a?b=1&amp;c=2|x.example/a>", "x.example/a"),
        ("decide ses_1 close --reason <https://x.example/a>", "https://x.example/a"),
        ("decide ses_1 close --reason <!here>", "@here"),
    ],
)
def test_quotes_and_slack_escapes(runbooks: RunbookSet, text: str, reason: str) -> None:
    assert parse_command(text, runbooks).flags["reason"] == reason


def test_decode_slack() -> None:
    assert decode_slack("<@U1|bob> &lt;b&gt; <#C9|chan> <!subteam^S1|@oncall>") == "@bob <b> #chan @oncall"


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("diagnose ses_01J9ZK3", "diagnose", {"session_id": "ses_01J9ZK3"}),
        ("/recover DIAGNOSE ses:1.a-b_c", "diagnose", {"session_id": "ses:1.a-b_c"}),
        ("status", "status", {}),
        ("dryrun", "dryrun", {}),
        (
            "dryrun decide ses_1 retry_restore --reason x",
            "dryrun decide",
            {"session_id": "ses_1", "decision": "retry_restore"},
        ),
        ("approve req_1", "approve", {"request_id": "req_1"}),
        ("reject req_1", "reject", {"request_id": "req_1"}),
        ("resume ses_1", "resume", {"session_id": "ses_1"}),
        ("cases", "cases", {}),
        ("history ses_1", "history", {"session_id": "ses_1"}),
        ("take ses_1", "take", {"session_id": "ses_1"}),
        (
            "note ses_1 store team on it --really",
            "note",
            {"session_id": "ses_1", "text": "store team on it --really"},
        ),
        ("handoff", "handoff", {}),
        ("preflight", "preflight", {}),
        ("upgrade-order", "upgrade-order", {}),
        ("help", "help", {}),
        ("help dryrun decide", "help", {"subcommand": "dryrun decide"}),
        ("", "help", {}),
        ("/recover", "help", {}),
    ],
)
def test_every_subcommand_parses(runbooks: RunbookSet, text: str, name: str, args: dict[str, str]) -> None:
    parsed = parse_command(text, runbooks)
    assert (parsed.name, parsed.args) == (name, args)


def test_reconcile_needs_a_reviewed_dry_run(runbooks: RunbookSet) -> None:
    assert parse_command("reconcile --reviewed dry_1", runbooks).flags == {"reviewed": "dry_1"}
    with pytest.raises(CommandError, match="--reviewed is required") as info:
        parse_command("reconcile", runbooks)
    assert "Usage: /recover reconcile --reviewed <dryrun_id>" in (info.value.usage or "")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("frobnicate ses_1", "unknown subcommand 'frobnicate'"),
        ("diagnose", "missing <session_id>"),
        ("diagnose ../../etc/passwd", "is not a valid id"),
        ("diagnose ses_1/../x", "is not a valid id"),
        ("diagnose ses_1?x=1", "is not a valid id"),
        ("diagnose " + "a" * 129, "is not a valid id"),
        ("diagnose ses_1 extra", "unexpected argument 'extra'"),
        ("decide ses_1 close", "--reason is required"),
        ("decide ses_1 nuke --reason x", "unknown decision 'nuke'"),
        ("decide ses_1 resume --reason x", "unknown decision 'resume'"),
        ("decide ses_1 abandon --reason x", "--turn is required for abandon"),
        ("decide ses_1 abandon --turn t1 --reason x", "--effects is required for abandon"),
        ("decide ses_1 confirm_completed --turn t1 --effects e --reason x", "--evidence is required"),
        ("decide ses_1 close --reason x --reason y", "--reason given twice"),
        ("decide ses_1 close --reason x --force", "unknown flag --force"),
        ("decide ses_1 close --reason", "--reason needs a value"),
        ("decide ses_1 close --reason x --yes=no", "--yes takes no value"),
        ("decide ses_1 close --turn ../x --reason x", "is not a valid id"),
        ('decide ses_1 close --reason "unterminated', "unterminated quote"),
        ("help nope", "unknown subcommand 'nope'"),
    ],
)
def test_bad_commands_get_usage_help(runbooks: RunbookSet, text: str, message: str) -> None:
    with pytest.raises(CommandError) as info:
        parse_command(text, runbooks)
    assert message in info.value.message
    assert info.value.usage and "/recover" in info.value.usage


def test_help_is_generated_from_the_yaml(runbooks: RunbookSet) -> None:
    overview = help_text(runbooks)
    for name in runbooks.commands:
        assert f"\n  {name}" in overview
    detail = help_text(runbooks, "decide")
    assert "--turn <value>" in detail and "required for abandon, confirm_completed" in detail
    assert "Refused outside RECOVER_CHANNELS" in detail
    assert runbooks.commands["decide"].example in detail
    assert "Refused outside" not in help_text(runbooks, "diagnose")
    with pytest.raises(CommandError):
        help_text(runbooks, "nope")


def test_too_long_command_is_refused(runbooks: RunbookSet) -> None:
    with pytest.raises(CommandError, match="too long"):
        parse_command("diagnose " + "x" * 1_000_000, runbooks)


def test_one_megabyte_without_a_length_limit(runbooks: RunbookSet) -> None:
    # The tokenizer itself must cope with huge input (a runbook may drop the limit).
    unlimited = dataclasses.replace(
        runbooks, limits={k: v for k, v in runbooks.limits.items() if k != "command_max_chars"}
    )
    chunk = "note ses_1 “a” <@U1|x> &amp; " + "é" * 100 + " --x "
    text = (chunk * (1_000_000 // len(chunk)))[:1_000_000]
    started = time.monotonic()
    with pytest.raises(CommandError, match=r"<text> \(the note\): .* is not valid"):
        parse_command(text, unlimited)
    assert time.monotonic() - started < 10
    with pytest.raises(CommandError):
        parse_command("diagnose " + "a" * 1_000_000, unlimited)
    with pytest.raises(CommandError):
        parse_command('decide ses_1 close --reason "' + "b" * 1_000_000, unlimited)


FRAGMENTS = [
    "/recover",
    "diagnose",
    "decide",
    "dryrun",
    "dryrun decide",
    "note",
    "help",
    "approve",
    "reconcile",
    "ses_1",
    "turn_9",
    "abandon",
    "close",
    "confirm_completed",
    "--turn",
    "--reason",
    "--reason=",
    "--yes",
    "--evidence=",
    "--",
    "—reason",
    '"',
    "'",
    "“",
    "”",
    "‘",
    "’",
    "„",
    "<@U123|bob>",
    "<@U1>",
    "<#C1|c>",
    "<https://x.y/z|lbl>",
    "<!here>",
    "&amp;",
    "&lt;",
    "&gt;",
    "<",
    ">",
    "|",
    "=",
    "\n",
    "\t",
    "\u00a0",
    "\u200b",
    "é",
    "日本",
    "🙂",
    "\x00",
    "\ud7ff",
]


@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=30).map(" ".join))
def test_arbitrary_fragments_only_raise_command_error(text: str) -> None:
    from bot.runbook import load_runbooks
    from tests.fixtures.runbook import REPO_RUNBOOKS

    runbooks = _cached(REPO_RUNBOOKS, load_runbooks)
    try:
        parsed = parse_command(text, runbooks)
    except CommandError as exc:
        assert exc.usage
    else:
        assert parsed.name in runbooks.commands
        for arg in parsed.spec.args if parsed.spec else []:
            if arg.pattern == "{ids}" and arg.name in parsed.args:
                assert runbooks.id_pattern is not None and runbooks.id_pattern.fullmatch(parsed.args[arg.name])


@given(st.text(max_size=400))
def test_arbitrary_text_only_raises_command_error(text: str) -> None:
    from bot.runbook import load_runbooks
    from tests.fixtures.runbook import REPO_RUNBOOKS

    runbooks = _cached(REPO_RUNBOOKS, load_runbooks)
    try:
        parsed = parse_command(text, runbooks)
    except CommandError as exc:
        assert exc.usage and "/recover" in exc.usage
    else:
        assert parsed.name in runbooks.commands


_CACHE: dict[object, RunbookSet] = {}


def _cached(key: object, load: object) -> RunbookSet:
    if key not in _CACHE:
        _CACHE[key] = load(key)  # type: ignore[operator]
    return _CACHE[key]
