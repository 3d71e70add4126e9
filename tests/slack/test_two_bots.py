"""Two bots, one PostgreSQL store: real `recover-bot serve` processes sharing the Slack inbox and the chain.

Real parts: two `recover-bot serve` processes (each with its supervised worker) on one PostgreSQL schema
(``pg_url``), the sandbox control host over HTTP, the Slack Web API stand-in, signed HTTP deliveries or
a Socket Mode stand-in that hands each envelope to one of the open connections. What is counted: the
decision POSTs that reached the sandbox, the steps of the one chain, the posts in the case's thread,
the inbox's rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bot.slack.inbox import Inbox
from bot.slack.state import slack_migrations
from bot.store import Store
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, Posted, SlackSender, SlackStandIn
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess

SESSION = "ses_restore_transient"
FORM = "application/x-www-form-urlencoded"
STALE = 6  # RECOVER_WORKER_STALE_SECONDS: the least there is (three of a worker's beats)


@dataclass
class Bot:
    """One `recover-bot serve` process (its own session: a SIGKILL takes its worker with it, as a host's death)."""

    proc: subprocess.Popen[str]
    url: str  # HTTP: the request URL's base; Socket Mode: the /healthz server's
    send: SlackSender

    def health(self) -> tuple[int, str]:
        r = httpx.get(self.url + "/healthz", timeout=5)
        return r.status_code, r.text

    def worker_pid(self) -> int | None:
        code, text = self.health()
        m = re.search(r"worker: alive \(pid (\d+)", text)
        return int(m.group(1)) if code == 200 and m else None

    def kill(self) -> None:
        """SIGKILL the bot and its worker at once: nothing of it runs on, nothing is marked dead."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.send.close()


def _start(slack_api: SlackStandIn, sandbox, pg_url: str, cwd: Path, *, app_token: str | None = None) -> Bot:
    cwd.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_API_URL": slack_api.base_url,
        "CONTROL_HOST_URL": sandbox.url,
        "CONTROL_HOST_API_KEY": sandbox.api_key,
        "RECOVER_DB": pg_url,
        "RECOVER_AUDIT_KEY": "none",
        "RECOVER_WORKER_STALE_SECONDS": str(STALE),
        "HOST": "127.0.0.1",
        "PORT": "0",
    }
    if app_token is None:
        env["SLACK_SIGNING_SECRET"] = SIGNING_SECRET
        env.pop("SLACK_APP_TOKEN", None)
    else:
        env["SLACK_APP_TOKEN"] = app_token
        env.pop("SLACK_SIGNING_SECRET", None)
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("recover-bot")), "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=(cwd / "serve.log").open("a"),
        text=True,
        cwd=str(cwd),
        start_new_session=True,
    )
    assert proc.stdout is not None
    pattern = r"listening on (http://127\.0\.0\.1:\d+)" if app_token is None else r"health on (http://127\.0\.0\.1:\d+)"
    lines = []
    for _ in range(3):
        lines.append(proc.stdout.readline())
        m = re.search(pattern, lines[-1])
        if m:
            break
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"serve did not start: {lines} {(cwd / 'serve.log').read_text()[-2000:]}")
    bot = Bot(proc, m.group(1), SlackSender(m.group(1) + "/slack/events", stand_in=slack_api))
    eventually(lambda: bot.worker_pid() is not None, 60, "a healthy worker")
    return bot


@contextmanager
def _two_bots(slack_api, sandbox, pg_url: str, tmp_path: Path, *, app_token: str | None = None) -> Iterator[list[Bot]]:
    """Bots A and B on one PostgreSQL store, each in a folder of its own (two hosts); stopped after."""
    with ExitStack() as stack:
        bots = []
        for name in ("a", "b"):
            bot = _start(slack_api, sandbox, pg_url, tmp_path / name, app_token=app_token)
            stack.callback(bot.stop)
            bots.append(bot)
        yield bots


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
    with _two_bots(slack_api, sandbox, pg_url, tmp_path) as (a, b):
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
