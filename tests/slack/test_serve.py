"""`recover-bot serve` as a process: HTTP mode on PORT=0 prints its address, /healthz, signed commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest

from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackSender
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess


def test_serve_http_mode_on_a_free_port(slack_api, sandbox, tmp_path) -> None:
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack_api.base_url,
        "CONTROL_HOST_URL": sandbox.url,
        "CONTROL_HOST_API_KEY": sandbox.api_key,
        "RECOVER_DB": str(tmp_path / "serve.db"),
        "HOST": "127.0.0.1",
        "PORT": "0",
    }
    env.pop("SLACK_APP_TOKEN", None)
    code = (
        "import sys; from bot.settings import load_settings; from bot.slack import serve; "
        "sys.exit(serve(load_settings(dotenv=None)))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", line)
        assert m and m.group(2) != "0", line + proc.stderr.read() if not m else line
        url = m.group(1)
        eventually(lambda: httpx.get(url + "/healthz").status_code == 200, 20, "a healthy /healthz")
        sender = SlackSender(url + "/slack/events", stand_in=slack_api)
        r = sender.command("diagnose ses_restore_transient")
        assert r.status_code == 200 and "received" in r.text
        assert (
            sender.post("x=1", content_type="application/x-www-form-urlencoded", signature="v0=bad").status_code == 401
        )
        eventually(
            lambda: any("ses_restore_transient" in m.text for m in slack_api.roots("CINC")), 30, "the case thread"
        )
        sender.close()
        assert SIGNING_SECRET not in line and BOT_TOKEN not in line
    finally:
        proc.terminate()
        proc.wait(15)
    assert BOT_TOKEN not in proc.stderr.read()
