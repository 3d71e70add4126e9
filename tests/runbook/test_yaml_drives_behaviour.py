"""Editing only YAML changes behaviour: the runbook is data, Python has no branch, policy or duration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.runbook import evaluate, help_text, load_runbooks, parse_command
from bot.runbook.cli import check
from tests.runbook.helpers import copy_runbooks, edit, facts

INCOMPATIBLE = facts(
    session__found=True,
    session__status="failed",
    session__admission_state="recovery_required",
    attention__present=True,
    attention__code="RESTORE_FAILED",
    attention__reason="incompatible_checkpoint",
    attention__failures=1,
    attention__in_backoff=False,
    unknown_turn__present=False,
)


def test_a_branchs_valid_decisions_come_from_yaml(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    assert evaluate(load_runbooks(directory), INCOMPATIBLE).valid_decisions == [
        "retry_restore",
        "start_fresh",
        "close",
    ]
    edit(
        directory,
        "    rules: [R2.3, R2.4, R5.3]\n    decisions: [retry_restore, start_fresh, close]",
        "    rules: [R2.3, R2.4, R5.3]\n    decisions: [retry_restore, close]",
    )
    ev = evaluate(load_runbooks(directory), INCOMPATIBLE)
    assert ev.valid_decisions == ["retry_restore", "close"]
    assert "start_fresh: not advised in this branch (Incompatible checkpoint)" in ev.invalid_reasons


def test_an_approval_policy_comes_from_yaml(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    edit(
        directory,
        'approval: {policy: confirm, confirm_text: "Retry',
        'approval: {policy: two_person, expires: 5m, confirm_text: "Retry',
    )
    runbooks = load_runbooks(directory)
    assert runbooks.decisions["retry_restore"].approval.policy == "two_person"  # type: ignore[union-attr]
    # A two-person decision expires with the escalation ladder (its steps all come before it); its own
    # `expires` is what it would be without a ladder.
    assert runbooks.escalation is not None
    assert runbooks.approval_expiry("retry_restore") == runbooks.escalation.expiry_seconds
    assert runbooks.decisions["retry_restore"].approval.expires == 300.0  # type: ignore[union-attr]
    assert runbooks.approval_expiry("start_fresh") == 1800.0


def test_a_budget_comes_from_yaml(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    edit(directory, "diagnose_budget: {duration: 10s,", "diagnose_budget: {duration: 2500ms,")
    assert load_runbooks(directory).limit("diagnose_budget") == 2.5


def test_a_precondition_comes_from_yaml(tmp_path: Path) -> None:
    # Dropping the "not in backoff" check for start_fresh (only there) lets it through in backoff.
    in_backoff = dict(
        INCOMPATIBLE,
        **{
            "attention.in_backoff": True,
            "attention.retry_at": "2026-11-29T10:04:30Z",
            "attention.reason": "execution_gone",
        },
    )
    directory = copy_runbooks(tmp_path)
    before = evaluate(load_runbooks(directory), in_backoff)
    assert before.branch_id == "restore_backoff"
    assert "start_fresh: 409 REQUEST_STALE until the backoff ends at 10:04:30Z" in before.invalid_reasons
    text = (directory / "session-recovery.yaml").read_text()
    start = text.index("  start_fresh:\n")
    end = text.index("  abandon:\n", start)
    block = text[start:end].replace("      - *pre_not_in_backoff\n", "", 1)
    (directory / "session-recovery.yaml").write_text(text[:start] + block + text[end:])
    after = evaluate(load_runbooks(directory), in_backoff)
    assert after.verdicts["start_fresh"].code is None  # no API refusal left: only "not advised here"
    assert after.verdicts["retry_restore"].code == "REQUEST_STALE"


def test_branch_precedence_is_yaml_order(tmp_path: Path) -> None:
    # Both outcome_unknown and restore attention hold: moving context_gap/outcome_unknown changes the pick.
    both = dict(INCOMPATIBLE, **{"unknown_turn.present": True, "unknown_turn.id": "turn_9"})
    directory = copy_runbooks(tmp_path)
    assert evaluate(load_runbooks(directory), both).branch_id == "outcome_unknown"
    edit(
        directory,
        "    when: {fact: unknown_turn.present, is_true: true}\n",
        "    when: {all: [{fact: unknown_turn.present, is_true: true}, {fact: attention.code, ne: RESTORE_FAILED}]}\n",
    )
    assert evaluate(load_runbooks(directory), both).branch_id == "restore_incompatible"


THIRD = """\
version: 1
name: store-outage
title: Object store outage
rules:
  R2.6: "Transient store trouble is retried inside the worker."
commands:
  - name: store-outage
    kind: text
    usage: "store-outage"
    help: "What to check during an object store outage."
    example: "/recover store-outage"
    text: "During a store outage:"
    checklist:
      - "Workers retry inside their startup budget (R2.6); do not force new workers."
    rules: [R2.6]
  - name: outage ack
    kind: note
    usage: "outage ack <session_id> <text>"
    help: "Acknowledge an outage on a session's case."
    example: "/recover outage ack ses_1 store team paged"
    args:
      - {name: session_id, pattern: "{ids}"}
      - {name: text, rest: true}
"""


def test_a_third_runbook_adds_subcommands_without_python(tmp_path: Path) -> None:
    directory = copy_runbooks(tmp_path)
    (directory / "store-outage.yaml").write_text(THIRD)
    assert check([str(directory)]) == 0
    runbooks = load_runbooks(directory)
    parsed = parse_command("/recover store-outage", runbooks)
    assert (parsed.name, parsed.kind) == ("store-outage", "text")
    assert parsed.spec is not None and parsed.spec.checklist[0].startswith("Workers retry")
    assert "\n  store-outage" in help_text(runbooks)
    assert "Workers retry" not in help_text(runbooks)
    assert help_text(runbooks, "store-outage").startswith("/recover store-outage\nWhat to check")
    ack = parse_command("outage ack ses_1 store team paged", runbooks)
    assert (ack.kind, ack.args) == ("note", {"session_id": "ses_1", "text": "store team paged"})
    # the repository runbooks alone do not know it
    assert "store-outage" not in load_runbooks(copy_runbooks(tmp_path / "plain")).commands


def test_a_duration_at_the_bound_can_be_scheduled(tmp_path: Path, decision_sandbox: Any, db_path: Path) -> None:
    """The longest duration a runbook check accepts (366d) is one the bot can run: a two-person close
    with that expiry is requested, expiring 366 days after the request."""
    from datetime import timedelta

    from bot.clock import ManualClock, parse_time
    from tests.fixtures.decisions import CHANNEL, REQUESTER, DecisionEnv

    directory = copy_runbooks(tmp_path)
    edit(directory, "  expiry: {duration: 30m,", "  expiry: {duration: 366d,")
    assert check([str(directory)]) == 0
    env = DecisionEnv(decision_sandbox, db_path, ManualClock(), load_runbooks(directory))
    try:
        env.restore_failed("ses_long")
        reply = env.service().decide(REQUESTER, CHANNEL, "ses_long", "close", reason="gone", reporter=env.reporter)
        msg = reply.messages[0]
        assert msg.kind == "approval_request", msg.plain_text()
        request = env.service().requests.get(msg.ref)
        expires, created = parse_time(request.expires_at), parse_time(request.created_at)
        assert expires is not None and created is not None and expires - created == timedelta(days=366)
    finally:
        env.close()
