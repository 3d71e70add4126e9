"""Forgiving input: a mistyped subcommand, flag or decision gets the runbook's own word back, in a
few lines, with the whole corrected command to copy; an unclosed quote says where it opened."""

from __future__ import annotations

import pytest

from bot.errors import CommandError
from bot.runbook import RunbookSet, parse_command
from bot.runbook.suggest import closest, distance

MAX_LINES = 5  # the headline and what follows it


def _refusal(runbooks: RunbookSet, text: str) -> tuple[str, list[str]]:
    with pytest.raises(CommandError) as info:
        parse_command(text, runbooks)
    usage = (info.value.usage or "").splitlines()
    assert 1 + len(usage) <= MAX_LINES, usage
    return info.value.message, usage


@pytest.mark.parametrize(
    ("typed", "corrected"),
    [
        ("diagnoes ses_1", "/recover diagnose ses_1"),
        ("aprove req_7f3a", "/recover approve req_7f3a"),
        ("/recover histroy ses_1", "/recover history ses_1"),
        ("confrim req_1", "/recover confirm req_1"),
        ("decide ses_1 retry-restore --reason x", "/recover decide ses_1 retry_restore --reason x"),
        ("decide ses_1 close --reasn x", "/recover decide ses_1 close --reason x"),
        ('decide ses_1 close --reasn="a b"', '/recover decide ses_1 close --reason="a b"'),
        ("decide ses_1 start_fresh --reason x --yse", "/recover decide ses_1 start_fresh --reason x --yes"),
        # several typos in one line: every one corrected in the line to copy
        ("desicde ses_1 retry-restore --reasn x --yse", "/recover decide ses_1 retry_restore --reason x --yes"),
        ("dryrun decied ses_1 close --reason x", "/recover dryrun decide ses_1 close --reason x"),
        ("help diagnos", "/recover help diagnose"),
        (
            "batch decide t1.g1 retry_restore --reason x --cause-fixd y",
            "/recover batch decide t1.g1 retry_restore --reason x --cause-fixed y",
        ),
    ],
)
def test_a_typo_gets_the_corrected_command_to_copy(runbooks: RunbookSet, typed: str, corrected: str) -> None:
    message, usage = _refusal(runbooks, typed)
    assert message.startswith("unknown ")
    assert usage[:2] == ["Did you mean:", f"  {corrected}"]
    assert parse_command(corrected, runbooks).name  # what we suggest parses


def test_a_correction_that_still_lacks_something_says_what(runbooks: RunbookSet) -> None:
    message, usage = _refusal(runbooks, "decide ses_1 abandn --reason x")
    assert message == "unknown decision 'abandn'"
    assert usage[1] == "  /recover decide ses_1 abandon --reason x"
    assert usage[2] == "(then still: --turn is required for abandon)"


def test_an_unclosed_quote_says_where_and_closes_it(runbooks: RunbookSet) -> None:
    message, usage = _refusal(runbooks, 'decide ses_1 retry_restore --reason "store fixed at 10:40')
    assert 'the " at character 37' in message and "no closing quote" in message
    assert usage[1] == '  /recover decide ses_1 retry_restore --reason "store fixed at 10:40"'


def test_a_word_far_from_every_subcommand_gets_the_short_list(runbooks: RunbookSet) -> None:
    message, usage = _refusal(runbooks, "frobnicate ses_1")
    assert message == "unknown subcommand 'frobnicate'"
    assert usage[0].startswith("Subcommands: ") and "diagnose" in usage[0]
    assert usage[1] == "More: /recover help"


def test_an_unknown_flag_far_from_every_flag_lists_the_flags(runbooks: RunbookSet) -> None:
    message, _ = _refusal(runbooks, "decide ses_1 close --reason x --force")
    assert "unknown flag --force" in message and "--reason" in message


def test_distance_counts_a_swap_as_one_edit() -> None:
    assert distance("diagnoes", "diagnose") == 1
    assert distance("aprove", "approve") == 1
    assert distance("retry-restore", "retry_restore") == 0
    assert distance("kitten", "sitting") == 3


def test_closest_refuses_ties_and_far_words() -> None:
    assert closest("clos", ["close", "cases"]) == "close"
    assert closest("xyz", ["close", "cases"]) is None
    assert closest("cat", ["car", "cap"]) is None  # two equally near: no guess


def test_a_word_longer_than_any_runbook_word_gets_no_suggestion(runbooks: RunbookSet) -> None:
    # (a distance costs len(word) x len(choice): a 7,000-character word is not compared at all)
    assert closest("d" * 65, ["diagnose"]) is None
    message, usage = _refusal(runbooks, "x" * 7000 + " ses_1")
    assert message.startswith("unknown subcommand") and usage[0].startswith("Subcommands: ")
