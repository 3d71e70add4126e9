"""A decision button's value is built once and parsed strictly: what the bot did not build is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.app.router import Router
from bot.buttons import SEPARATOR, BadButtonValue, DecisionChoice
from bot.errors import CommandError
from bot.messages import ListReporter
from bot.runbook import load_runbooks
from bot.settings import load_settings
from tests.fixtures.composing import default_router
from tests.fixtures.runbook import REPO_RUNBOOKS


def _parse(value: str, runbooks) -> DecisionChoice:
    return DecisionChoice.parse(value, ids=runbooks.id_pattern, decisions=runbooks.decisions)


def test_a_built_choice_parses_back_to_itself(runbooks) -> None:
    for decision in runbooks.decisions:
        choice = DecisionChoice("ses_restore_backoff", decision)
        assert choice.encode() == f"ses_restore_backoff|{decision}"
        assert _parse(choice.encode(), runbooks) == choice


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "one session and one decision"),
        ("ses_a", "one session and one decision"),
        ("ses_a|close|abandon", "one session and one decision"),  # an extra separator
        ("ses_a||close", "one session and one decision"),
        ("|close", "'' is not a valid session id"),
        ("ses a|close", "'ses a' is not a valid session id"),
        ("../etc|close", "'../etc' is not a valid session id"),
        ("<!channel>|close", "'<!channel>' is not a valid session id"),
        ("ses_a|drop_tables", "'drop_tables' is not a decision of the runbook"),
        ("ses_a|", "'' is not a decision of the runbook"),
        ("ses_a|Close", "'Close' is not a decision of the runbook"),
        ("ses_a|close ", "'close ' is not a decision of the runbook"),
    ],
)
def test_a_malformed_or_forged_value_is_refused_in_one_line(runbooks, value: str, why: str) -> None:
    with pytest.raises(BadButtonValue) as refused:
        _parse(value, runbooks)
    text = str(refused.value)
    assert "\n" not in text and why in text and "nothing was done" in text
    assert isinstance(refused.value, CommandError)  # every front shows it as a refusal, never a crash


def test_without_an_id_pattern_no_session_is_accepted(runbooks) -> None:
    with pytest.raises(BadButtonValue, match="not a valid session id"):
        DecisionChoice.parse("ses_a|close", ids=None, decisions=runbooks.decisions)


_RUNBOOKS = load_runbooks(REPO_RUNBOOKS)


@given(st.text(max_size=60), st.sampled_from(sorted(_RUNBOOKS.decisions)))
def test_only_a_value_with_one_separator_can_parse(value: str, decision: str) -> None:
    if value.count(SEPARATOR) != 1:
        with pytest.raises(BadButtonValue):
            _parse(value, _RUNBOOKS)
    # Text around a real choice never makes it valid.
    with pytest.raises(BadButtonValue):
        _parse(f"ses_a|{decision}|{value}", _RUNBOOKS)


def test_the_router_refuses_a_forged_decide_form_click(sandbox, tmp_path: Path) -> None:
    """The router's own decide_form action parses with the same parser: a refusal, nothing recorded."""
    settings = load_settings({}, dotenv=None).model_copy(update={"db_path": tmp_path / "recover.db"})
    router = default_router(settings, sandbox=sandbox, startup=False)
    assert isinstance(router, Router)
    store = router.services.store
    before = len(store.steps())
    refused = router.handle_action(
        "decide_form", "ses_restore_backoff|close|abandon", actor="UALICE", channel="CINC", reporter=ListReporter()
    )
    assert not refused.ok and "one session and one decision; nothing was done" in refused.messages[0].plain_text()
    assert len(store.steps()) == before
    ok = router.handle_action(
        "decide_form", "ses_restore_backoff|close", actor="UALICE", channel="CINC", reporter=ListReporter()
    )
    assert ok.ok and "/recover decide ses_restore_backoff close" in ok.messages[0].plain_text()
