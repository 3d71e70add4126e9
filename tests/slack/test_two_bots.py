"""Two bots, one PostgreSQL store: real `recover-bot serve` processes sharing the Slack inbox and the chain.

Real parts: two `recover-bot serve` processes (each with its supervised worker) on one PostgreSQL schema
(``pg_url``), the sandbox control host over HTTP, the Slack Web API stand-in, signed HTTP deliveries or
a Socket Mode stand-in that hands each envelope to one of the open connections. What is counted: the
decision POSTs that reached the sandbox, the steps of the one chain, the posts in the case's thread,
the inbox's rows.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from pathlib import Path

import httpx
import psycopg
import pytest

from bot.slack.inbox import Inbox
from bot.slack.state import slack_migrations
from bot.store import Store
from tests.fixtures.runbook import runbooks_with_limits
from tests.fixtures.slack import Posted, SlackStandIn
from tests.fixtures.two_bots import STALE, Bot, run_pair, two_bots
from tests.fixtures.two_bots import start as _start
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess

SESSION = "ses_restore_transient"
FORM = "application/x-www-form-urlencoded"


def _quick_leases(folder: Path) -> dict[str, str]:
    """The shipped runbooks with a test's pace for the send lease and the periodic job (3 s, 1 s)."""
    runbooks = runbooks_with_limits(folder / "runbooks", send_lease="3s", replay_every="1s", batch_lease="3s")
    return {"RECOVER_RUNBOOKS": str(runbooks)}


def _decision_posts(sandbox, session: str = SESSION) -> list[dict]:
    return [r for r in sandbox.admin.requests(session) if r["method"] == "POST" and "decision" in r["path"]]


def _approval(slack_api: SlackStandIn, session: str = SESSION) -> Posted:
    """The approval request in the case's thread (the message with the approve button)."""
    for m in slack_api.messages.copy().values():
        if session in m.all_text() and any(a.startswith("rb:approve:") for a, _ in m.action_ids()):
            return m
    raise AssertionError("no approval request yet")


def _chain(pg_url: str, session: str = SESSION) -> list[str]:
    return [step.step for step in Store(pg_url).steps(session_id=session)]


def _inbox(pg_url: str) -> Inbox:
    return Inbox(Store(pg_url, migrations=[slack_migrations]))


def _results(slack_api: SlackStandIn, request: Posted) -> list[Posted]:
    """The result posts in the request's thread (the verification after the send)."""
    return [m for m in slack_api.thread(request.channel, request.thread_ts or request.ts) if "Verified" in m.all_text()]


def _answers(slack_api: SlackStandIn, body: str, text: str) -> list[dict]:
    """What reached a command's own response_url with ``text`` in it."""
    path = httpx.URL(urllib.parse.parse_qs(body)["response_url"][0]).path
    return [b for p, b in list(slack_api.responses) if p == path and text in json.dumps(b)]


def test_http_a_request_through_one_bot_approved_through_the_other_sends_once(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """Behind a load balancer: the command reaches bot A, the approval click bot B; each delivery also
    reaches the other bot (Slack's retry landing elsewhere) and is refused there by the shared inbox."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    with two_bots(slack_api, sandbox, pg_url, tmp_path) as (a, b):
        body = a.send.command_body(f'decide {SESSION} close --reason "two bots"', user="UALICE")
        sent_at = int(time.time())
        assert a.send.post(body, content_type=FORM, timestamp=sent_at).status_code == 200
        assert b.send.post(body, content_type=FORM, timestamp=sent_at).status_code == 200  # the same delivery
        request = eventually(lambda: _approval(slack_api), 30, "the approval request")
        action_id = next(a for a, _ in request.action_ids() if a.startswith("rb:approve:"))
        request_id = re.search(r"req_[A-Za-z0-9]+", request.all_text())
        assert request_id
        click_ts = f"{time.time():.6f}"
        for bot in (b, a):  # the click through B, then the same click (same action_ts) through A
            clicked = bot.send.block_action(
                action_id,
                request_id.group(0),
                user="UBOB",
                channel=request.channel,
                message_ts=request.ts,
                thread_ts=request.thread_ts,
                action_ts=click_ts,
            )
            assert clicked.status_code == 200
        home = {"type": "app_home_opened", "user": "UALICE", "tab": "home", "channel": "DHOME"}
        assert a.send.event("Ev0TWOBOTS", home).status_code == 200
        assert b.send.event("Ev0TWOBOTS", home, retry_num=1).status_code == 200  # Slack's retry, elsewhere
        eventually(lambda: len(_results(slack_api, request)) == 1, 30, "the result post")
        inbox = _inbox(pg_url)
        # Six posts of three deliveries: each queued once (a repeat is refused by the one inbox).
        eventually(lambda: inbox.states() == {"done": 3}, 30, "three deliveries done (each once)")
        assert len(_decision_posts(sandbox)) == 1
        assert "executed" in slack_api.messages[request.ts].text
        chain = _chain(pg_url)
        assert chain.count("decision_requested") == 1 and chain.count("decision_approved") == 1, chain
        texts = [m.all_text() for m in slack_api.thread(request.channel, request.thread_ts or request.ts)]
        assert not any("Already requested" in t for t in texts)
        assert len(_results(slack_api, request)) == 1


def test_sigkill_after_the_request_is_recorded_the_other_bot_takes_the_approval(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """Bot A dies (with its worker, as its host would) right after it recorded the request and posted
    it; bob approves through bot B: one send. A restarted sends and posts nothing again."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    with two_bots(slack_api, sandbox, pg_url, tmp_path) as (a, b):
        assert a.send.command(f'decide {SESSION} close --reason "a dies"', user="UALICE").status_code == 200
        request = eventually(lambda: _approval(slack_api), 30, "the approval request")
        a.kill()
        assert b.send.click(request, "approve", user="UBOB").status_code == 200
        eventually(lambda: len(_results(slack_api, request)) == 1, 30, "the result post")
        assert len(_decision_posts(sandbox)) == 1
        posted = len(slack_api.calls_to("chat.postMessage"))
        again = _start(slack_api, sandbox, pg_url, tmp_path / "a")
        try:
            eventually(lambda: b.worker_pid() and again.worker_pid(), 30, "both bots healthy")
            time.sleep(1.5)  # a while longer: a send or post made again would show
        finally:
            again.stop()
        assert len(_decision_posts(sandbox)) == 1 and len(_results(slack_api, request)) == 1
        assert len(slack_api.calls_to("chat.postMessage")) == posted
        chain = _chain(pg_url)
        assert chain.count("decision_requested") == 1 and chain.count("decision_executed") == 1, chain


def test_sigkill_while_a_delivery_is_claimed_the_other_bot_interrupts_it_and_tells_once(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """The bot whose worker runs a delivery dies (Slack's answer to its post held back): after that
    worker has been silent for RECOVER_WORKER_STALE_SECONDS, the other bot's worker marks the item
    interrupted, never runs it again (R0.3), and tells the person once; the dead bot restarted tells
    nobody again."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    with two_bots(slack_api, sandbox, pg_url, tmp_path) as bots:
        slack_api.slow("chat.postMessage", 60)  # the case's first post is made, its answer never arrives in time
        body = bots[0].send.command_body(f"diagnose {SESSION}", user="UALICE")
        assert bots[0].send.post(body, content_type=FORM).status_code == 200
        eventually(lambda: slack_api.calls_to("chat.postMessage"), 30, "the case's first post made")
        inbox = _inbox(pg_url)
        assert inbox.states() == {"claimed": 1}
        dead, survivor = _claimer_first(bots, pg_url)
        dead.kill()
        killed_at = time.monotonic()
        slack_api.slow("chat.postMessage", 0)
        told = eventually(
            lambda: _answers(slack_api, body, "restarted while working"),
            20,  # the stale time (6 s), a beat and a wide margin: well before the default 30 s
            "the person told of the interruption",
        )
        # Not at once (as for a worker its own supervisor saw exit): only once the dead worker, whose last
        # beat was at most one beat (2 s) before the kill, had been silent for the stale time.
        assert time.monotonic() - killed_at >= STALE - 3
        assert inbox.states() == {"interrupted": 1} and len(told) == 1
        again = _start(slack_api, sandbox, pg_url, dead.log.parent)  # the dead bot restarted
        try:
            time.sleep(1.5)  # a while longer: a second notice or a run again would show
            assert survivor.worker_pid() is not None
        finally:
            again.stop()
        assert len(_answers(slack_api, body, "restarted while working")) == 1
        assert inbox.states() == {"interrupted": 1}
        roots = [m for m in slack_api.roots("CINC") if SESSION in m.all_text()]
        assert len(roots) == 1  # the diagnosis was not run again


def _claimer_first(bots: list[Bot], pg_url: str) -> tuple[Bot, Bot]:
    """(the bot whose worker holds the one claimed item, the other): a worker's id carries its serve
    process's pid (bot/slack/supervisor.py)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        (claimer,) = [r[0] for r in conn.execute("SELECT claimed_by FROM slack_inbox WHERE state = 'claimed'")]
    first, second = bots
    return (first, second) if claimer.split(":")[1] == str(first.proc.pid) else (second, first)


def test_sigkill_after_the_result_is_recorded_before_it_is_said_the_other_bot_says_it_once(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """R5.1 in the thread: the worker running the approval records the close's verification, then waits
    on Slack (its update of the approval request held back) and dies with its bot before posting the
    result. The other bot's worker says the result in the case's thread from the store, once
    (bot/slack/unsaid.py, after twice the stale time); the dead bot restarted says it no second time,
    and nothing is sent twice. Without the look, or with its claim, the thread stays silent or says it twice."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    with two_bots(slack_api, sandbox, pg_url, tmp_path) as bots:
        a = bots[0]
        assert a.send.command(f'decide {SESSION} close --reason "dies unsaid"', user="UALICE").status_code == 200
        request = eventually(lambda: _approval(slack_api), 30, "the approval request")
        slack_api.slow("chat.update", 60, before=True, when="executed")  # the reply's first message, held
        assert a.send.click(request, "approve", user="UBOB").status_code == 200
        eventually(lambda: "verification" in _chain(pg_url), 30, "the verification recorded")
        dead, survivor = _claimer_first(bots, pg_url)
        dead.kill()
        slack_api.slow("chat.update", 0)
        said = eventually(lambda: _results(slack_api, request), 40, "the result said by the other bot")
        assert len(said) == 1 and "Verified" in said[0].all_text()
        assert survivor.worker_pid() is not None
        again = _start(slack_api, sandbox, pg_url, dead.log.parent)  # the dead bot restarted
        try:
            eventually(lambda: again.worker_pid(), 30, "the restarted bot healthy")
            time.sleep(STALE)  # its worker's looks (every STALE / 2 s) offer the result: claimed, not said
        finally:
            again.stop()
        assert len(_results(slack_api, request)) == 1
        assert len(_decision_posts(sandbox)) == 1
        chain = _chain(pg_url)
        assert chain.count("decision_executed") == 1 and chain.count("verification") == 1, chain


def test_an_approval_request_slack_refused_is_shown_once_by_a_look_and_approved_through_it(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """The request is recorded, but Slack refuses its approval request's post: the second person would
    never see it. A worker's look (bot/slack/unsaid.py, after twice the stale time) shows it once, as
    first shown, in the case's thread; approved through the other bot, it is sent once."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    with two_bots(slack_api, sandbox, pg_url, tmp_path) as (a, b):
        for method in ("chat.postMessage", "chat.update"):
            slack_api.fail(method, "internal_error", times=1, when="rb:approve:")
        assert a.send.command(f'decide {SESSION} close --reason "refused"', user="UALICE").status_code == 200
        eventually(lambda: "decision_requested" in _chain(pg_url), 30, "the request recorded")
        request = eventually(lambda: _approval(slack_api), 40, "the approval request shown by a look")
        time.sleep(STALE)  # more looks, on both bots: none shows it again
        asks = [c for c in slack_api.calls_to("chat.postMessage") if "rb:approve:" in json.dumps(c.params)]
        assert len(asks) == 2  # the refused post and the look's
        assert b.send.click(request, "approve", user="UBOB").status_code == 200
        eventually(lambda: len(_results(slack_api, request)) == 1, 30, "the result post")
        assert len(_decision_posts(sandbox)) == 1


def test_sigkill_mid_send_the_other_bot_finishes_the_send_with_its_stored_key(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """Bot A dies after the approval, while its decision POST is unanswered: B (running all along, not
    restarted) finishes the stored request with its Idempotency-Key, once: its periodic job takes the
    send over once A's send lease ran out (bot/decisions/_sendlease.py), here after 3 s."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    with two_bots(slack_api, sandbox, pg_url, tmp_path, env_update=_quick_leases(tmp_path)) as (a, b):
        assert a.send.command(f'decide {SESSION} close --reason "mid-send"', user="UALICE").status_code == 200
        request = eventually(lambda: _approval(slack_api), 30, "the approval request")
        sandbox.admin.fault("latency", "*recovery-decisions*", method="POST", seconds=5, times=1)
        assert a.send.click(request, "approve", user="UBOB").status_code == 200
        store = Store(pg_url)
        eventually(lambda: bool(store.unfinished_requests()), 30, "the stored, unanswered request")
        sender, survivor = _claimer_first([a, b], pg_url)  # whichever bot's worker is sending dies
        sender.kill()
        eventually(lambda: not store.unfinished_requests(), 40, "the request finished by the surviving bot")

        assert survivor.worker_pid() is not None
        assert sandbox.admin.effect_count(SESSION) == 1


def _envelope(stand_in, link: int, envelope_id: str, kind: str, payload: dict) -> None:
    """One Socket Mode envelope on connection ``link`` (Slack picks one of the open connections)."""
    msg = {"envelope_id": envelope_id, "type": kind, "accepts_response_payload": kind == "slash_commands"}
    stand_in.call(stand_in.links[link].send(json.dumps({**msg, "payload": payload})))
    eventually(lambda: envelope_id in stand_in.acks, 10, f"the ack of {envelope_id}")


def test_socket_mode_each_envelope_runs_once_whichever_bot_it_reaches(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """Both bots hold a Socket Mode connection; the command goes down one, the approval click down the
    other, and each envelope is also handed to the other connection (as a redelivery after a lost ack
    would be): one request, one approval, one decision POST, one result post."""
    from tests.slack.test_socket_link import SocketStandIn

    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    stand_in = SocketStandIn()
    slack_api.socket_url = stand_in.url
    try:
        with two_bots(slack_api, sandbox, pg_url, tmp_path, app_token="xapp-1-two-bots") as bots:
            stand_in.wait_links(2, timeout=30)
            command = {
                "command": "/recover",
                "text": f'decide {SESSION} close --reason "socket mode"',
                "user_id": "UALICE",
                "channel_id": "CINC",
                "team_id": "T1",
                "api_app_id": "A1",
                "response_url": slack_api.response_url("cmd"),
                "trigger_id": "trig-socket-two-bots",
            }
            _envelope(stand_in, 0, "env-cmd", "slash_commands", command)
            _envelope(stand_in, 1, "env-cmd-again", "slash_commands", command)  # the same delivery, elsewhere
            request = eventually(lambda: _approval(slack_api), 30, "the approval request")
            action_id = next(a for a, _ in request.action_ids() if a.startswith("rb:approve:"))
            found = re.search(r"req_[A-Za-z0-9]+", request.all_text())
            assert found
            click = {
                "type": "block_actions",
                "team": {"id": "T1"},
                "user": {"id": "UBOB", "name": "ubob", "team_id": "T1"},
                "api_app_id": "A1",
                "token": "legacy",
                "container": {"type": "message", "message_ts": request.ts, "channel_id": "CINC"},
                "trigger_id": "trig-socket-click",
                "channel": {"id": "CINC", "name": "incident"},
                "message": {"type": "message", "ts": request.ts, "thread_ts": request.thread_ts, "text": ""},
                "response_url": slack_api.response_url("act"),
                "actions": [
                    {
                        "action_id": action_id,
                        "block_id": "b0",
                        "value": found.group(0),
                        "type": "button",
                        "action_ts": f"{time.time():.6f}",
                    }
                ],
            }
            _envelope(stand_in, 1, "env-click", "interactive", click)
            _envelope(stand_in, 0, "env-click-again", "interactive", click)
            eventually(lambda: len(_results(slack_api, request)) == 1, 30, "the result post")
            inbox = _inbox(pg_url)
            eventually(lambda: inbox.states() == {"done": 2}, 30, "two deliveries done (each once)")
            assert len(_decision_posts(sandbox)) == 1
            chain = _chain(pg_url)
            assert chain.count("decision_requested") == 1 and chain.count("decision_approved") == 1, chain
            assert len(_results(slack_api, request)) == 1
            # Each bot refused one repeat: the two connections are the two bots' (one each).
            assert [bot.log.read_text().count("dropping a repeated Slack delivery") for bot in bots] == [1, 1]
    finally:
        stand_in.stop()


def test_two_person_requests_through_either_bot_one_bot_sigkilled_mid_run_nothing_lost_or_repeated(
    slack_api, sandbox_factory, pg_url, tmp_path
) -> None:
    """The measured two-bot story, small (bench/two_bots.py runs it at 100 requests, 20 times): requests
    through either bot approved through the other, bot A SIGKILLed with its worker between two waves
    and started again. Every close applied once under one key, no approval request or result posted
    twice, and each result posted."""
    sandbox = sandbox_factory(scenarios=None, clock=None)
    figures = run_pair(slack_api, sandbox, pg_url, tmp_path, n=10, wave=5, timeout=150, env=_quick_leases(tmp_path))
    assert figures.kills == 1 and figures.requested == figures.n
    assert figures.ok, json.dumps(figures.as_json())
