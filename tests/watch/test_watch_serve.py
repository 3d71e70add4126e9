"""`recover-bot serve` with RECOVER_WATCH_CHANNEL, as a process: its worker runs the watcher, a stop in
the sandbox is posted to the watch channel, /healthz says watch is on, and a signed `/recover watch
pause` from someone outside the watch channel is refused."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bot.sandbox import SandboxHandle
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackSender, SlackStandIn
from tests.fixtures.triage import clone
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.subprocess

CHANNEL = "C0WATCH"


def test_serve_runs_the_watcher_in_its_worker(
    slack_api: SlackStandIn, incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    slack_api.channel_members[CHANNEL] = ["UALICE"]
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack_api.base_url,
        "CONTROL_HOST_URL": incident_sandbox.url,
        "CONTROL_HOST_API_KEY": incident_sandbox.api_key,
        "RECOVER_DB": str(tmp_path / "serve.db"),
        "HOST": "127.0.0.1",
        "PORT": "0",
        "RECOVER_WATCH_CHANNEL": CHANNEL,
        "RECOVER_WATCH_INTERVAL": "0.2",
    }
    env.pop("SLACK_APP_TOKEN", None)
    sid = "ses_wsv_001"
    incident_sandbox.admin.create_session(clone("healthy", sid))
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
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", line)
        assert m, line
        url = m.group(1)
        eventually(
            lambda: "watch: on, last poll 20" in httpx.get(url + "/healthz").text, 60, "no watch line on /healthz"
        )
        incident_sandbox.admin.stop(sid)
        eventually(lambda: any(f"Stopped: {sid} " in p.text for p in slack_api.roots(CHANNEL)), 60, "stop not posted")
        sender = SlackSender(url + "/slack/events", stand_in=slack_api)
        seen = len(slack_api.responses)
        assert sender.command("watch pause --for 1h", user="UMALLORY").status_code == 200
        eventually(lambda: len(slack_api.responses) > seen, 60, "no answer to watch pause")
        assert "Only members of" in str(slack_api.responses[seen][1])
        sender.close()
    finally:
        proc.terminate()
        proc.wait(15)
    assert len([p for p in slack_api.roots(CHANNEL) if f"Stopped: {sid} " in p.text]) == 1
