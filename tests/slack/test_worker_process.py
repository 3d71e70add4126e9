"""The ack/work split of `recover-bot serve` under attack: SIGKILL of the worker process, a second
worker on the same store.

Real parts: `recover-bot serve` as a process (the threaded HTTP server, the checked front, Bolt, the inbox) with its
supervised worker process, the sandbox control host over HTTP, the Slack stand-in, one SQLite file.
What is counted: answers on each command's own response_url, effects on the sandbox, inbox rows.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from bot.sandbox import builtin_scenarios_dir
from bot.slack.inbox import Inbox, inbox_path
from bot.slack.state import slack_migrations
from bot.slack.supervisor import WorkerSupervisor
from bot.store import Store
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackSender, SlackStandIn, slack_settings
from tests.fixtures.waiting import eventually


def _start_serve(
    slack_api: SlackStandIn,
    sandbox,
    db: Path,
    cwd: Path,
    *,
    app_token: str | None = None,
    log: Path | None = None,
    env_update: dict[str, str | None] | None = None,
) -> subprocess.Popen[str]:
    """`recover-bot serve` as its own process: HTTP with the signing secret, or Socket Mode with ``app_token``.

    With ``log`` it is the installed console script (its logging set up, its exit status as users get
    it), its stderr written to that file. ``env_update``: variables set, or removed where None (an
    installations file in place of ``CONTROL_HOST_URL``)."""
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_API_URL": slack_api.base_url,
        "CONTROL_HOST_URL": sandbox.url,
        "CONTROL_HOST_API_KEY": sandbox.api_key,
        "RECOVER_DB": str(db),
        "RECOVER_AUDIT_KEY": "none",  # these tests are about the Slack link; serve needs the choice said
        "HOST": "127.0.0.1",
        "PORT": "0",
    }
    if app_token is None:
        env["SLACK_SIGNING_SECRET"] = SIGNING_SECRET
        env.pop("SLACK_APP_TOKEN", None)
    else:
        env["SLACK_APP_TOKEN"] = app_token
        env.pop("SLACK_SIGNING_SECRET", None)
    for name, value in (env_update or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    if log is not None:
        with log.open("w") as err:
            return subprocess.Popen(
                [str(Path(sys.executable).with_name("recover-bot")), "serve"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=str(cwd),
            )
    code = (
        "import sys; from bot.settings import load_settings; from bot.slack import serve; "
        "sys.exit(serve(load_settings(dotenv=None)))"
    )
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, cwd=str(cwd))


@contextmanager
def _served(
    slack_api: SlackStandIn,
    sandbox,
    db: Path,
    cwd: Path,
    *,
    log: Path | None = None,
    env_update: dict[str, str | None] | None = None,
) -> Iterator[tuple[subprocess.Popen[str], str, SlackSender]]:
    """Serve over HTTP until a worker is healthy; yield the process, its URL and a signed sender; stop it."""
    proc = _start_serve(slack_api, sandbox, db, cwd, log=log, env_update=env_update)
    try:
        assert proc.stdout is not None
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
        assert m, "serve did not start"
        url = m.group(1)
        sender = SlackSender(url + "/slack/events", stand_in=slack_api)
        try:
            eventually(lambda: _worker_pid(url) is not None, 60, "a healthy worker")
            yield proc, url, sender
        finally:
            sender.close()
    finally:
        proc.terminate()
        proc.wait(30)


def _health(url: str) -> tuple[int, str]:
    r = httpx.get(url + "/healthz", timeout=5)
    return r.status_code, r.text


def _worker_pid(url: str) -> int | None:
    code, text = _health(url)
    m = re.search(r"worker: alive \(pid (\d+)", text)
    return int(m.group(1)) if code == 200 and m else None


def _kill_worker(url: str, pid: int) -> None:
    """SIGKILL the worker process and wait until serve's supervisor reports a new one."""
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: (_worker_pid(url) or pid) != pid, 60, "a new worker")


def _fresh_session(sandbox, sid: str) -> str:
    spec = yaml.safe_load((builtin_scenarios_dir() / "restore_stopped_transient.yaml").read_text())
    s = copy.deepcopy(spec)
    s["session"]["id"] = sid
    s["worker_logs"] = []
    sandbox.admin.create_session({k: s[k] for k in ("session", "turns", "events", "worker_logs")})
    return sid


def _reply_path(body: str) -> str:
    """The path of a signed command's response_url, as the stand-in records answers to it."""
    return httpx.URL(urllib.parse.parse_qs(body)["response_url"][0]).path


def _answers(slack_api: SlackStandIn, path: str) -> list[dict]:
    return [b for p, b in list(slack_api.responses) if p == path]


@pytest.mark.subprocess
def test_sigkill_of_the_worker_loses_no_queued_command_and_runs_none_twice(
    slack_api, sandbox_factory, tmp_path
) -> None:
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    db = tmp_path / "serve.db"
    with _served(slack_api, sandbox, db, tmp_path) as (proc, url, sender):
        inbox = Inbox(Store(db, migrations=[slack_migrations]))
        first_pid = _worker_pid(url)
        assert first_pid is not None and first_pid != proc.pid  # the work runs in another process
        sessions = [_fresh_session(sandbox, f"ses_kill_{i}") for i in range(3)]
        # Every control-host call takes 4 s: eight diagnoses fill the worker's eight threads.
        sandbox.admin.fault("latency", "*", seconds=4, times=None)
        busy = []
        for _ in range(8):
            body = sender.command_body("diagnose ses_restore_transient")
            busy.append(_reply_path(body))
            assert sender.post(body, content_type="application/x-www-form-urlencoded").status_code == 200
        eventually(lambda: inbox.states().get("claimed", 0) == 8, 60, "eight claimed items")
        # Behind them, queued: helps and single-person decisions (R4: retry_restore needs no second person).
        queued: dict[str, str] = {}
        for text in ["help"] * 5 + [f'decide {sid} retry_restore --reason "worker killed" --yes' for sid in sessions]:
            body = sender.command_body(text)
            queued[_reply_path(body)] = text
            r = sender.post(body, content_type="application/x-www-form-urlencoded")
            assert r.status_code == 200 and "received" in r.text  # acked: committed before the ack
        assert inbox.states().get("queued", 0) == 8

        _kill_worker(url, first_pid)
        sandbox.admin.clear_faults()
        eventually(lambda: set(inbox.states()) <= {"done", "interrupted"}, 120, "the inbox drained")
        assert inbox.states() == {"done": 8, "interrupted": 8}
        code, text = _health(url)
        assert code == 200 and "queue depth: 0" in text and "started 2×" in text, text

        for path, text in queued.items():
            if text == "help":
                assert len(_answers(slack_api, path)) == 1, text  # run once: not lost, not twice
        # Each decision ran once: one effect, one decision POST under one Idempotency-Key (R0.3).
        eventually(lambda: all(sandbox.admin.effect_count(s) == 1 for s in sessions), 60, "three effects")
        for sid in sessions:
            posts = [r for r in sandbox.admin.idempotency_records(sid) if "decision" in r["path"]]
            assert len(posts) == 1, (sid, posts)
        # The eight interrupted diagnoses are not re-run: each person is told once, on their response_url.
        for path in busy:
            told = [b for b in _answers(slack_api, path) if "restarted while working" in str(b)]
            assert len(told) == 1, (path, _answers(slack_api, path))
        time.sleep(1.5)  # a while longer: a decision run again would show as a second effect
        assert all(sandbox.admin.effect_count(s) == 1 for s in sessions)
        # Slack's verification token is never stored with a queued body.
        with sqlite3.connect(inbox_path(db)) as conn:
            payloads = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM slack_inbox")]
        assert len(payloads) == 16 and not any("token" in p["body"] for p in payloads)
    # Stopped with serve: the worker is gone too.
    pid = inbox.workers()[0][1]
    assert pid != first_pid
    eventually(lambda: not _alive(pid), 5, "the worker gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours would still answer: read its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_two_workers_on_one_store_run_each_item_once(slack_api, sandbox, tmp_path) -> None:
    db = tmp_path / "shared.db"
    settings = slack_settings(slack_api, db, control_host_url=sandbox.url, control_host_api_key=sandbox.api_key)
    inbox = Inbox(Store(db, migrations=[slack_migrations]))
    supervisors = [WorkerSupervisor(settings, inbox).start() for _ in range(2)]
    try:
        eventually(lambda: sum(not dead for _, _, dead in inbox.workers()) >= 2, 60, "two beating workers")
        sender = SlackSender("http://127.0.0.1:9/unused", stand_in=slack_api)
        urls = []
        for i in range(120):
            raw = sender.command_body("help", user=f"U{i:03d}")
            body = {k: v[0] for k, v in urllib.parse.parse_qs(raw).items()}
            urls.append(_reply_path(raw))
            assert inbox.put("command", f"command:T1:{body['trigger_id']}", {"body": body}) is not None
        for s in supervisors:
            s.wake()
        eventually(lambda: inbox.states() == {"done": 120}, 120, "every item done")
        per_url = Counter(p for p, _ in slack_api.responses)
        assert all(per_url[u] == 1 for u in urls), [u for u in urls if per_url[u] != 1]
        by_worker = inbox.claimed_by()
        ids = {s.worker_id for s in supervisors}
        assert set(by_worker) <= ids and sum(by_worker.values()) == 120, by_worker
        # A repeat of a queued delivery is refused by its key, durably.
        assert inbox.put("command", f"command:T1:{body['trigger_id']}", {"body": body}) is None
    finally:
        for s in supervisors:
            s.stop()
    for s in supervisors:
        assert s.proc is not None and s.proc.poll() is not None


@pytest.mark.subprocess
def test_the_decision_form_opens_within_slacks_3_s_while_the_worker_is_busy(
    slack_api, sandbox_factory, tmp_path
) -> None:
    """views.open needs the click's trigger_id within 3 s: it is called from the acking process (the
    form's fields come from the runbook, no control host); the form's validation errors are the
    submission's synchronous answer; the decision itself goes through the inbox to the worker."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    db = tmp_path / "serve.db"
    with _served(slack_api, sandbox, db, tmp_path) as (_, _, sender):
        inbox = Inbox(Store(db, migrations=[slack_migrations]))
        sid = _fresh_session(sandbox, "ses_form_0")
        sandbox.admin.fault("latency", "*", seconds=4, times=None)
        for _ in range(8):
            assert sender.command("diagnose ses_restore_transient").status_code == 200
        eventually(lambda: inbox.states().get("claimed", 0) == 8, 60, "a busy worker")
        clicked = time.monotonic()
        r = sender.block_action("rb:decide_form:0", f"{sid}|close", user="UALICE", channel="CINC", message_ts="1.0")
        assert r.status_code == 200
        eventually(lambda: bool(slack_api.calls_to("views.open")), 3.0, "views.open")
        opened = slack_api.calls_to("views.open")[-1]
        assert opened.at - clicked < 3.0
        view = opened.params["view"]
        refused = sender.submit_view(view, {"reason": "   "}, user="UALICE")
        assert refused.status_code == 200 and refused.json()["response_action"] == "errors", refused.text
        assert "reason" in refused.json()["errors"]
        assert sender.submit_view(view, {"reason": "store never came back"}, user="UALICE").status_code == 200
        assert inbox.states().get("queued", 0) >= 1  # the decision waits for a free worker thread
        sandbox.admin.clear_faults()
        # close is two-person (R4): the worker posts the approval request into the case's thread.
        eventually(
            lambda: any(
                a.startswith("rb:approve:")
                for m in slack_api.messages.copy().values()
                for a, _ in m.action_ids()
                if sid in m.all_text()
            ),
            90,
            "the approval request",
        )


@pytest.mark.subprocess
def test_socket_mode_deliveries_go_through_the_same_inbox_to_the_worker(slack_api, sandbox, tmp_path) -> None:
    from tests.slack.test_socket_link import SocketStandIn

    stand_in = SocketStandIn()
    slack_api.socket_url = stand_in.url
    db = tmp_path / "socket.db"
    proc = _start_serve(slack_api, sandbox, db, tmp_path, app_token="xapp-1-test-serve")
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        m = re.search(r"health on (http://127\.0\.0\.1:\d+)", "".join(lines))
        assert m, lines
        url = m.group(1)
        stand_in.wait_links(1, timeout=30)
        eventually(lambda: _health(url)[0] == 200, 60, "a healthy link and worker")
        assert "worker: alive" in _health(url)[1] and "socket_mode: connected" in _health(url)[1]
        sent = stand_in.envelope("env-serve-1", "diagnose ses_restore_transient")
        eventually(lambda: "env-serve-1" in stand_in.acks, 3.0, "the ack")
        assert stand_in.acks["env-serve-1"] - sent < 3.0
        eventually(
            lambda: any("ses_restore_transient" in r.text for r in slack_api.roots("CINC")), 60, "the case thread"
        )
        inbox = Inbox(Store(db, migrations=[slack_migrations]))
        eventually(lambda: inbox.states() == {"done": 1}, 60, "the item done")
        assert inbox.claimed_by() and all(not w.startswith("inline:") for w in inbox.claimed_by())
        worker_pid = inbox.workers()[0][1]
    finally:
        proc.terminate()
        proc.wait(30)
        stand_in.stop()
    eventually(lambda: not _alive(worker_pid), 5, "the worker stopped with serve")


@pytest.mark.subprocess
def test_a_decision_in_flight_when_the_worker_dies_is_finished_with_its_stored_key(
    slack_api, sandbox_factory, tmp_path
) -> None:
    """R0.3: the interrupted command is not run again; the next worker's start-up replays the stored
    request with its Idempotency-Key, so the control host applies the decision once."""
    sandbox = sandbox_factory(scenarios="builtin", clock=None)
    db = tmp_path / "serve.db"
    with _served(slack_api, sandbox, db, tmp_path) as (_, url, sender):
        store = Store(db)
        first_pid = _worker_pid(url)
        sid = _fresh_session(sandbox, "ses_inflight_0")
        sandbox.admin.fault("latency", "*recovery-decisions*", method="POST", seconds=3, times=1)
        body = sender.command_body(f'decide {sid} retry_restore --reason "killed mid-send" --yes')
        assert sender.post(body, content_type="application/x-www-form-urlencoded").status_code == 200
        eventually(lambda: bool(store.unfinished_requests()), 30, "the stored, unanswered request")
        _kill_worker(url, first_pid)
        eventually(lambda: sandbox.admin.effect_count(sid) == 1, 60, "one effect")
        eventually(lambda: not store.unfinished_requests(), 60, "the request finished")
        posts = [r for r in sandbox.admin.requests(sid) if r["method"] == "POST" and "decision" in r["path"]]
        assert posts and len({r["idempotency_key"] for r in posts}) == 1, posts
        told = [b for b in _answers(slack_api, _reply_path(body)) if "restarted while working" in str(b)]
        assert len(told) == 1
        time.sleep(1.5)  # a while longer: a decision run again would show as a second effect
        assert sandbox.admin.effect_count(sid) == 1
