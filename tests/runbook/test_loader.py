"""The loader: the repository runbooks load; a bad runbook is rejected with file:line and what is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.errors import RunbookError
from bot.runbook import RunbookSet, load_runbooks
from bot.runbook.cli import check
from tests.runbook.helpers import ISOLATION, SESSION, copy_runbooks, edit


def _problems(directory: Path) -> list[str]:
    with pytest.raises(RunbookError) as info:
        load_runbooks(directory)
    return info.value.problems


def _assert_problem(directory: Path, path: Path, line: int, fragment: str) -> None:
    problems = _problems(directory)
    wanted = f"{path}:{line}:"
    assert any(p.startswith(wanted) and fragment in p for p in problems), (wanted, fragment, problems)


def test_repository_runbooks_load(runbooks: RunbookSet) -> None:
    assert runbooks.names == ["session-recovery", "isolation-upgrade"]
    assert [b.id for b in runbooks.branches][-1] == "unclassified"
    assert {"diagnose", "decide", "dryrun decide", "preflight", "upgrade-order"} <= set(runbooks.commands)
    # every rule R0.1 … R5.4 of the runbook page is defined
    text = (Path(__file__).resolve().parents[2] / "runbooks" / SESSION).read_text()
    assert set(re.findall(r"^  (R\d+\.\d+):", text, re.M)) == set(runbooks.rules)
    assert len(runbooks.rules) == 47


QUIET_AFTER = '  storm_window: {duration: 5m, help: "the window storm_threshold counts new stops over"}\n'

# Each case: (old text, new text, file, fragment of the expected message, occurrences of old[, marker]).
# The problem is expected on the first changed line, or on the line where ``marker`` starts (a missing
# field is reported at its parent; a multi-line text at its key).
BAD_CASES = {
    "unknown step kind": ("kind: handoff", "kind: hand_off", SESSION, "unknown step kind 'hand_off'", 1),
    "missing field": ('    usage: "cases"\n', "", SESSION, "missing field 'usage'", 1, "  - name: cases\n"),
    "bad regex": ('pattern: "^[a-z_]+$"', 'pattern: "^[a-z_+$"', SESSION, "bad regular expression", 1),
    "unknown decision": (
        'decisions: [start_fresh, close]\n    next:\n      - "Continue',
        'decisions: [start_fresh, clos]\n    next:\n      - "Continue',
        SESSION,
        "unknown decision 'clos' referenced",
        1,
    ),
    "no approval policy": (
        "    approval: {policy: none}\n",
        "",
        SESSION,
        "has no approval policy",
        1,
        "  resume:\n    title: Resume",
    ),
    "unknown approval policy": (
        "approval: {policy: none}",
        "approval: {policy: nobody}",
        SESSION,
        "unknown approval policy 'nobody'",
        1,
    ),
    "rule that does not exist": ("rules: [R2.3, R2.4, R5.3]", "rules: [R2.3, R9.4]", SESSION, "'R9.4'", 1),
    "unknown fact": (
        "{fact: attention.reason, eq: execution_gone}",
        "{fact: attention.reasons, eq: execution_gone}",
        SESSION,
        "unknown fact 'attention.reasons'",
        1,
    ),
    "bad duration": ("duration: 10s,", "duration: 10 seconds,", SESSION, "bad duration '10 seconds'", 1),
    "unknown operator": (
        "{fact: logs.stopping_failed, gt: 0}",
        "{fact: logs.stopping_failed, more_than: 0}",
        SESSION,
        "unknown condition operator 'more_than'",
        1,
    ),
    "unknown template fact": (
        "{attention.failures} consecutive",
        "{attention.failure_count} consecutive",
        SESSION,
        "placeholder {attention.failure_count} names an unknown fact",
        1,
        "    explanation: >-\n      Restore keeps failing",
    ),
    "unknown field": (
        "    channel_restricted: true\n    flags:\n      - {name: reviewed",
        "    channel_restrict: true\n    flags:\n      - {name: reviewed",
        SESSION,
        "unknown field 'channel_restrict'",
        1,
    ),
    "duplicate subcommand": (
        "  - name: take\n",
        "  - name: cases\n",
        SESSION,
        "duplicate subcommand 'cases'",
        1,
    ),
    "duplicate YAML key": (
        '    usage: "handoff"\n',
        '    usage: "handoff"\n    usage: "x"\n',
        SESSION,
        "duplicate key 'usage'",
        1,
    ),
    "invalid YAML": ("    kind: preflight\n", "    kind: preflight: now\n", ISOLATION, "invalid YAML", 1),
    "limit that does not exist": (
        "review_window: dryrun_review_window",
        "review_window: review_window",
        SESSION,
        "not a duration under 'limits:'",
        1,
    ),
    "unknown flag in a body": (
        'reason: "flag:reason"\n    approval: {policy: confirm, confirm_text: "Retry',
        'reason: "flag:why"\n    approval: {policy: confirm, confirm_text: "Retry',
        SESSION,
        "unknown flag 'why'",
        1,
    ),
    "flag required for an unknown decision": (
        "required_for: [confirm_completed]",
        "required_for: [confirm]",
        SESSION,
        "unknown decision 'confirm' referenced",
        1,
    ),
    "bad daemon version": ("min_daemon_major: 28", "min_daemon_major: latest", ISOLATION, "valid integer", 1),
    "watch: a bad duration": (
        "poll_interval: {duration: 30s,",
        "poll_interval: {duration: 30 seconds,",
        SESSION,
        "bad duration '30 seconds'",
        1,
    ),
    "watch: a count where a duration is needed": (
        "flap_window: {duration: 1h,",
        "flap_window: {count: 3,",
        SESSION,
        "must be a {duration: …} value",
        1,
    ),
    "watch: a duration where a count is needed": (
        "storm_threshold: {count: 10,",
        "storm_threshold: {duration: 10s,",
        SESSION,
        "must be a {count: …} value",
        1,
    ),
    "watch: an unknown time zone": (
        QUIET_AFTER,
        QUIET_AFTER + '  quiet_hours: {start: "23:00", end: "07:00", time_zone: Europe/Atlantis}\n',
        SESSION,
        "unknown time zone 'Europe/Atlantis'",
        1,
        "  quiet_hours:",
    ),
    "watch: a bad quiet-hours time": (
        QUIET_AFTER,
        QUIET_AFTER + '  quiet_hours: {start: "11pm", end: "07:00", time_zone: Europe/Berlin}\n',
        SESSION,
        "should match pattern",
        1,
        "  quiet_hours:",
    ),
    "watch: a misspelt value": ("  dedup_window: {", "  dedupe_window: {", SESSION, "unknown field 'dedupe_window'", 1),
    "a duration longer than the bot can schedule": (
        "  expiry: {duration: 30m,",
        "  expiry: {duration: 999999999999d,",
        SESSION,
        "bad duration '999999999999d': must be at most 366d (the longest the bot can schedule)",
        1,
    ),
    "a duration one second past the bound": (
        "  expiry: {duration: 30m,",
        "  expiry: {duration: 31622401s,",
        SESSION,
        "must be at most 366d",
        1,
    ),
    "a number of seconds too large for a float": (
        "  expiry: {duration: 30m,",
        "  expiry: {duration: 1" + "0" * 400 + ",",
        SESSION,
        "must be at most 366d",
        1,
    ),
    "a duration that is not a number": (
        "  expiry: {duration: 30m,",
        "  expiry: {duration: .nan,",
        SESSION,
        "must be at most 366d",
        1,
    ),
    "bad rule id": ('  R2.17: "Deploy order', '  Rule2.17: "Deploy order', ISOLATION, "bad rule id", 1),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_runbook_is_rejected_with_file_and_line(tmp_path: Path, case: str) -> None:
    old, new, name, fragment, count, *marker = BAD_CASES[case]
    directory = copy_runbooks(tmp_path)
    path, line = edit(directory, old, new, name, count)
    if marker:
        text = path.read_text()
        line = text[: text.index(marker[0])].count("\n") + 1
    _assert_problem(directory, path, line, fragment)


def test_irreversible_decision_needs_two_people(tmp_path: Path) -> None:
    """R5.4: close cannot be undone, so a runbook that lets one person close a session is refused, at the
    ``irreversible`` line, naming the policy's line too."""
    directory = copy_runbooks(tmp_path)
    close = '    approval: {policy: two_person}\n    irreversible: true\n    drops: "the whole session'
    path, policy_line = edit(directory, close, close.replace("two_person", "confirm"))
    problems = _problems(directory)
    assert problems == [
        f"{path}:{policy_line + 1}: decisions.close.irreversible: an irreversible decision needs "
        f"'approval: {{policy: two_person}}', not 'confirm' (at {path}:{policy_line}): a second person "
        "approves what cannot be undone; or set 'irreversible: false' if it can be"
    ]
    # The same decision declared reversible loads (the flag, not the decision's name, carries the rule).
    edit(
        directory,
        "    approval: {policy: confirm}\n    irreversible: true\n",
        "    approval: {policy: confirm}\n    irreversible: false\n",
    )
    # (break-glass replaces a second person only, so it no longer names close either)
    edit(directory, "decisions: [close, abandon]", "decisions: [abandon]")
    assert load_runbooks(directory).decisions["close"].policy == "confirm"


def test_duplicate_subcommand_across_files(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    extra = directory / "zz-extra.yaml"
    extra.write_text(
        "version: 1\nname: extra\ntitle: Extra\ncommands:\n"
        "  - name: diagnose\n    kind: text\n    usage: diagnose\n    help: h\n    example: e\n    text: t\n"
    )
    problems = _problems(directory)
    assert any(
        p.startswith(f"{extra}:5:") and "duplicate subcommand 'diagnose'" in p and SESSION in p for p in problems
    ), problems


def test_fallback_branch_must_not_have_a_condition(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    path, line = edit(directory, "    fallback: true\n", "    fallback: true\n    when: {always: true}\n")
    _assert_problem(directory, path, line, "the fallback branch has no 'when'")


def test_branch_without_condition_is_rejected(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    old = "    when: {fact: session.found, is_false: true}\n"
    path, line = edit(directory, old, "")
    problems = _problems(directory)
    assert any(p.startswith(f"{path}:{line - 2}:") and "missing field 'when'" in p for p in problems), problems


def test_text_kind_needs_text(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    text = (directory / ISOLATION).read_text()
    start = text.index('    text: "Rolling out')
    end = text.index("    rules: [R1.7, R1.8, R1.9, R2.17]\n", start)
    (directory / ISOLATION).write_text(text[:start] + text[end:])
    line = text[: text.index("  - name: upgrade-order")].count("\n") + 1
    _assert_problem(directory, directory / ISOLATION, line, "missing field 'text'")


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    edit(directory, "rules: [R2.3, R2.4, R5.3]", "rules: [R2.3, R9.4]")
    edit(directory, "{attention.failures} consecutive", "{attention.nope} consecutive")
    problems = _problems(directory)
    assert len(problems) == 2 and all(re.match(r"^.+\.yaml:\d+: ", p) for p in problems), problems


def test_missing_file_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(RunbookError, match="no runbook files"):
        load_runbooks(tmp_path)
    with pytest.raises(RunbookError, match="no such file"):
        load_runbooks(tmp_path / "nope.yaml")


def test_check_command_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = copy_runbooks(tmp_path)
    assert check([str(directory)]) == 0
    out = capsys.readouterr().out
    commands = len(load_runbooks(directory).commands)  # the shipped files add subcommands over time
    assert commands >= 17
    assert out.startswith("ok: 2 file(s)") and f"{commands} subcommand(s)" in out
    path, line = edit(directory, "kind: handoff", "kind: nope")
    assert check([str(path), str(directory / ISOLATION)]) == 1
    err = capsys.readouterr().err
    assert re.search(rf"^{re.escape(str(path))}:{line}: commands\[\d+\]\.kind: unknown step kind 'nope'", err, re.M)


def test_check_command_is_wired_with_an_example() -> None:
    import argparse

    from bot.runbook.cli import register

    parser = argparse.ArgumentParser(prog="recover-bot")
    register(parser.add_subparsers())
    check_parser = parser._subparsers._group_actions[0].choices["runbook"]  # type: ignore[union-attr]
    sub = check_parser._subparsers._group_actions[0].choices["check"]  # type: ignore[union-attr]
    assert "recover-bot runbook check runbooks/" in sub.format_help()
    args = parser.parse_args(["runbook", "check", "a.yaml", "b.yaml"])
    assert args.files == ["a.yaml", "b.yaml"]


def test_check_refuses_a_duration_the_bot_cannot_schedule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What ``runbook check`` passes the bot can run: a duration past 366 days is refused at its line,
    not accepted and then failing at the first request (timedelta overflowing a C int)."""
    directory = copy_runbooks(tmp_path)
    path, line = edit(directory, "  expiry: {duration: 30m,", "  expiry: {duration: 999999999999d,")
    assert check([str(path), str(directory / ISOLATION)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:{line}: escalation.expiry.duration: bad duration '999999999999d': must be at most 366d" in err
    assert "1 problem(s) found" in err
