"""A request's result is said once in its case's thread, whoever offers it (R5.1 reported once).

The live reply and the periodic look of every worker (bot/slack/unsaid.py) offer the same result; the
claim in ``slack_refs`` (bot/slack/state.py ``claim_ref``) decides who posts it, on either engine. Real
parts: the store on SQLite and PostgreSQL, the delivery over HTTP to the Slack Web API stand-in.
"""

from __future__ import annotations

import threading
from pathlib import Path

from bot.decisions import RESULT_KIND
from bot.ids import ScopedId
from bot.messages import Message
from bot.slack.delivery import Origin, SlackReporter, ThreadBook
from bot.slack.state import Location, SlackState, slack_migrations
from bot.slack.web import SlackOut, make_client
from bot.store import Store
from tests.fixtures.slack import SlackStandIn, slack_settings

SESSION = "ses_said_1"
REQUEST = "req_said_1"


def _state(target: str | Path) -> SlackState:
    return SlackState(Store(target, migrations=[slack_migrations]))


def _result(installation: str | None = None) -> Message:
    return Message(
        headline=f"Verified `{SESSION}` after `close`",
        level="ok",
        session_id=SESSION,
        kind=RESULT_KIND,
        ref=REQUEST,
        installation=installation,
    )


def _reporter(api: SlackStandIn, state: SlackState, tmp_path: Path) -> SlackReporter:
    out = SlackOut(make_client(slack_settings(api, tmp_path / "unused.db")))
    return SlackReporter(out, ThreadBook(state, out), Origin(actor="recover-bot", channel=None))


def test_eight_claimers_on_two_connections_one_wins_and_a_failed_post_gives_it_back(store_target) -> None:
    """Two processes' stores on one target, eight threads at once: one claim wins; a released claim
    (its post failed) can be won again; a claim whose post was recorded cannot be released."""
    first, second = _state(store_target), _state(store_target)
    ref = ScopedId.of(REQUEST, None)
    won: list[bool] = []
    start = threading.Barrier(8)

    def claim(state: SlackState) -> None:
        start.wait()
        won.append(state.claim_ref(RESULT_KIND, ref, "CINC"))

    threads = [threading.Thread(target=claim, args=(s,)) for s in [first, second] * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]
    first.release_ref(RESULT_KIND, ref)
    assert second.claim_ref(RESULT_KIND, ref, "CINC")
    second.remember_ref(RESULT_KIND, ref, "CINC", "1.0001")
    first.release_ref(RESULT_KIND, ref)  # said: nothing to give back
    assert not first.claim_ref(RESULT_KIND, ref, "CINC")
    # Another installation's request of the same id is its own result.
    assert first.claim_ref(RESULT_KIND, ScopedId.of(REQUEST, "eu-1"), "CINC")


def test_a_result_offered_by_the_reply_and_by_two_looks_is_posted_once(slack_api, tmp_path: Path) -> None:
    state = _state(tmp_path / "recover.db")
    state.remember_thread(ScopedId.of(SESSION, None), Location("CINC", "1.0000"))
    for _ in range(3):  # the live reply, this worker's look, another worker's look
        _reporter(slack_api, state, tmp_path).post(_result())
    said = [m for m in slack_api.thread("CINC", "1.0000") if "Verified" in m.all_text()]
    assert len(said) == 1


def test_a_result_slack_refused_is_said_by_the_next_offer(slack_api, tmp_path: Path) -> None:
    """The reply's post failed (Slack answered an error): its claim is given back, so the next look
    says it; nothing stays claimed and unsaid because Slack said no."""
    state = _state(tmp_path / "recover.db")
    state.remember_thread(ScopedId.of(SESSION, None), Location("CINC", "1.0000"))
    slack_api.fail("chat.postMessage", "internal_error", times=1, when="Verified")
    _reporter(slack_api, state, tmp_path).post(_result())
    assert not [m for m in slack_api.thread("CINC", "1.0000") if "Verified" in m.all_text()]
    _reporter(slack_api, state, tmp_path).post(_result())
    said = [m for m in slack_api.thread("CINC", "1.0000") if "Verified" in m.all_text()]
    assert len(said) == 1
