"""`recover-bot serve` (the installed console script) when its inbox or its Socket Mode link goes wrong:
a row it cannot read back, an inbox write-locked past the busy timeout, text frames that are JSON but
not objects, a link that goes silent.

Real parts: the serving process and its worker process, the sandbox control host over HTTP, the Slack
Web API stand-in, signed HTTP requests, a `websockets` Socket Mode stand-in, the inbox's SQLite file (written and
locked by a second
connection, as another process or a damaged disk would). What is counted: answers on each command's
own response_url, ephemeral posts, inbox rows, `/healthz`, the log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.slack.inbox import Inbox, inbox_path
from bot.slack.state import slack_migrations
from bot.store import Store
from tests.fixtures.waiting import eventually
from tests.slack.test_socket_link import SocketStandIn
from tests.slack.test_worker_process import (
    _answers,
    _health,
    _reply_path,
    _served,
    _start_serve,
    _worker_pid,
)

pytestmark = pytest.mark.subprocess


def _damaged_command(sender, user: str) -> bytes:
    """A stored command whose text holds bytes that are not UTF-8 (the rest still says who sent it)."""
    body = {k: v[0] for k, v in urllib.parse.parse_qs(sender.command_body("help", user=user)).items()}
    body["text"] = "help MARK"
    return json.dumps({"body": body}).encode().replace(b"MARK", b"\xff\xfe")


def test_an_unreadable_inbox_row_is_quarantined_and_reported_and_the_others_run(slack_api, sandbox, tmp_path) -> None:
    db, log = tmp_path / "serve.db", tmp_path / "serve.log"
    with _served(slack_api, sandbox, db, tmp_path, log=log) as (_, url, sender):
        inbox = Inbox(Store(db, migrations=[slack_migrations]))
        pid = _worker_pid(url)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the worker holds still: what follows is claimed in one batch
        try:
            with sqlite3.connect(inbox_path(db)) as conn:
                rows = [
                    ("command", "command:T1:bad-utf8", _damaged_command(sender, "UCAROL")),
                    ("command", "command:T1:bad-json", b'{"body": {"text": "help", "user_id": "UDAN"'),
                    ("command", "command:T1:not-an-object", b'"just a string"'),
                    ("command", "command:T1:bad-shape", b'{"body": "help"}'),
                    ("telepathy", "telepathy:T1:1", b'{"body": {}}'),
                ]
                for kind, key, raw in rows:
                    conn.execute(
                        "INSERT INTO slack_inbox (key, kind, payload, state, created_at) "
                        "VALUES (?, ?, CAST(? AS TEXT), 'queued', ?)",
                        [key, kind, raw, time.time()],
                    )
            paths = []
            for i in range(5):
                body = sender.command_body("help", user=f"UHELP{i}")
                paths.append(_reply_path(body))
                r = sender.post(body, content_type="application/x-www-form-urlencoded")
                assert r.status_code == 200 and "received" in r.text
            assert inbox.states() == {"queued": 10}
        finally:
            os.kill(pid, signal.SIGCONT)
        eventually(lambda: all(_answers(slack_api, p) for p in paths), 60, "the five commands answered")
        eventually(lambda: inbox.states() == {"done": 5, "quarantined": 5}, 30, "the inbox settled")
        # One worker all along: an unreadable row is not a reason to die (and take the others with it).
        assert _worker_pid(url) == pid
        code, text = _health(url)
        assert code == 200 and "inbox: 5 quarantined" in text and "not run" in text, text
        # The author the damaged row still names is told, only them, by Slack's ephemeral post (never
        # through a URL read from a damaged row); the rows that name nobody are in the log only.
        told = [c.params for c in slack_api.calls_to("chat.postEphemeral")]
        assert [(p["channel"], p["user"]) for p in told] == [("CINC", "UCAROL")], told
        assert "nothing was run" in str(told[0])
        assert all(len(_answers(slack_api, p)) == 1 for p in paths)  # each run once
    written = log.read_text()
    assert written.count("quarantined, not run") == 5, written
    for why in [
        "not UTF-8",
        "not JSON",
        "a JSON str, not an object",
        "command payload is not one this bot stores",
        "kind 'telepathy' is not one this bot queues",
    ]:
        assert why in written, why
    assert "Traceback" not in written


def test_a_delivery_whose_commit_failed_is_not_seen_and_slacks_retry_is_queued(slack_api, sandbox, tmp_path) -> None:
    """The inbox write-locked (another connection holds BEGIN IMMEDIATE) past the busy timeout: the put
    fails, the answer is a 503 (not an ack), nothing is remembered; the retry of the same delivery is
    queued and run."""
    db, log = tmp_path / "serve.db", tmp_path / "serve.log"
    with _served(slack_api, sandbox, db, tmp_path, log=log) as (_, _, sender):
        inbox = Inbox(Store(db, migrations=[slack_migrations]))
        body = sender.command_body("help")
        home = {"type": "app_home_opened", "user": "UHOME", "channel": "D1", "tab": "home"}
        lock = sqlite3.connect(inbox_path(db), isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            with ThreadPoolExecutor(2) as pool:
                first = pool.submit(sender.post, body, content_type="application/x-www-form-urlencoded")
                event = pool.submit(sender.event, "Ev-locked-1", home)
                assert first.result(timeout=60).status_code == 503
                assert event.result(timeout=60).status_code == 503
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert inbox.states() == {}
        retry = sender.post(body, content_type="application/x-www-form-urlencoded")
        assert retry.status_code == 200 and "received" in retry.text, (retry.status_code, retry.text)
        assert sender.event("Ev-locked-1", home, retry_num=1).status_code == 200
        eventually(lambda: bool(_answers(slack_api, _reply_path(body))), 30, "the retried command answered")
        eventually(
            lambda: any(c.params.get("user_id") == "UHOME" for c in slack_api.calls_to("views.publish")),
            30,
            "the retried event's App Home",
        )
        eventually(lambda: inbox.states() == {"done": 2}, 30, "both done")
        # Once committed, a repeat is refused as before (in memory, then by the inbox's key).
        again = sender.post(body, content_type="application/x-www-form-urlencoded")
        assert again.status_code == 200 and again.text == ""
        assert inbox.states() == {"done": 2}


@contextmanager
def _socket_served(slack_api, sandbox, tmp_path) -> Iterator[tuple[subprocess.Popen[str], str, SocketStandIn, Path]]:
    """`recover-bot serve` in Socket Mode against the stand-in, until link and worker are healthy."""
    stand_in = SocketStandIn()
    slack_api.socket_url = stand_in.url
    log = tmp_path / "serve.log"
    proc = _start_serve(slack_api, sandbox, tmp_path / "socket.db", tmp_path, app_token="xapp-1-test-faults", log=log)
    try:
        assert proc.stdout is not None
        m = re.search(r"health on (http://127\.0\.0\.1:\d+)", proc.stdout.readline() + proc.stdout.readline())
        assert m, log.read_text()
        stand_in.wait_links(1, timeout=30)
        eventually(lambda: _health(m.group(1))[0] == 200, 60, "a healthy link and worker")
        yield proc, m.group(1), stand_in, log
    finally:
        proc.terminate()
        proc.wait(30)
        stand_in.stop()


def _acked(stand_in: SocketStandIn, envelope_id: str, text: str) -> float:
    sent = stand_in.envelope(envelope_id, text)
    eventually(lambda: envelope_id in stand_in.acks, 5.0, f"the ack of {envelope_id}")
    return stand_in.acks[envelope_id] - sent


def test_socket_frames_that_are_json_but_not_objects_are_logged_and_ignored(slack_api, sandbox, tmp_path) -> None:
    with _socket_served(slack_api, sandbox, tmp_path) as (proc, url, stand_in, log):
        for frame in ['"just a string"', "[1,2]", "null", "42", "[" * 50_000]:
            stand_in.send_raw(frame)
        assert _acked(stand_in, "env-after-junk", "help") < 3.0  # the same link still serves
        assert proc.poll() is None
        code, text = _health(url)
        assert code == 200 and "socket_mode: connected (connections opened: 1)" in text, text
    assert log.read_text().count("ignored a frame that is not a JSON object") == 5, log.read_text()


def test_a_silent_link_is_noticed_within_5s_and_healthz_says_unconfirmed_meanwhile(
    slack_api, sandbox, tmp_path
) -> None:
    """No FIN, no RST, no pong: the link is dropped and a new one opened within 5 s, and until then
    `/healthz` no longer says `connected` once a pong is overdue."""
    with _socket_served(slack_api, sandbox, tmp_path) as (_, url, stand_in, log):
        time.sleep(2.0)  # a pong or two on the healthy link first
        silenced = time.monotonic()
        stand_in.silence(0)
        seen: list[tuple[float, int, str]] = []

        def relinked() -> bool:  # /healthz sampled all the while
            if len(stand_in.links) >= 2:
                return True
            code, text = _health(url)
            seen.append((round(time.monotonic() - silenced, 2), code, text.splitlines()[1]))
            return False

        eventually(relinked, 10, "a new link after the silence")
        noticed = stand_in.connected_at[1] - silenced
        assert noticed < 5.0, noticed
        unconfirmed = [(at, code) for at, code, text in seen if "socket_mode: unconfirmed" in text]
        assert unconfirmed and all(code == 503 for _, code in unconfirmed), seen
        # Once unconfirmed, the old link is never again called connected.
        old = "socket_mode: connected (connections opened: 1)"
        assert all(old not in text for at, _, text in seen if at > unconfirmed[0][0]), seen
        eventually(lambda: _health(url)[0] == 200, 5, "connected again")
        assert _acked(stand_in, "env-new-link", "help") < 3.0
    assert "no pong within" in log.read_text()


def test_a_crash_looping_worker_fails_healthz(slack_api, sandbox, tmp_path) -> None:
    """A worker alive most of the time it is looked at, yet dying again and again, is no healthy worker."""
    with _served(slack_api, sandbox, tmp_path / "serve.db", tmp_path, log=tmp_path / "serve.log") as (_, url, _):
        for _ in range(3):
            pid = _any_worker_pid(url)
            os.kill(pid, signal.SIGKILL)
            eventually(lambda pid=pid: _any_worker_pid(url) not in (pid, None), 30, "a new worker")
        code, text = _health(url)
        assert code == 503 and "worker: crash-looping (exited 3× in 60 s" in text, text


def _any_worker_pid(url: str) -> int | None:
    m = re.search(r"worker: [^(]*(?:\([^)]*\) )?\(pid (\d+)", _health(url)[1])
    return int(m.group(1)) if m else None


def test_a_socket_envelope_whose_commit_failed_is_not_acked_and_its_redelivery_runs(
    slack_api, sandbox, tmp_path
) -> None:
    """Socket Mode: an ack tells Slack the delivery was taken, so an envelope whose put failed is left
    unacked (Slack sends it again); the redelivery, once the inbox is free, is acked and run."""
    with _socket_served(slack_api, sandbox, tmp_path) as (_, url, stand_in, log):
        inbox = Inbox(Store(tmp_path / "socket.db", migrations=[slack_migrations]))
        lock = sqlite3.connect(inbox_path(tmp_path / "socket.db"), isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            stand_in.envelope("env-locked", "help")
            eventually(lambda: "not acked (not committed)" in log.read_text(), 30, "the failed commit")
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert "env-locked" not in stand_in.acks and inbox.states() == {}
        assert _acked(stand_in, "env-locked", "help") < 3.0  # Slack's redelivery of the same envelope
        eventually(lambda: inbox.states() == {"done": 1}, 30, "the redelivery run")
