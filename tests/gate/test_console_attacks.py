"""The identity attacks through the installed `recover-bot console` script, as an operator runs it (an empty
folder, the wheel's own virtualenv, only the RECOVER_* settings each test names), against the sandbox
control host over HTTP; the other side acts through the router the Slack app calls, on the same file.
The sandbox's effects are the ground truth for "sent".

1. a batch `close` requested from the console under a mapped login and approved by the same person
   (the Slack id the login maps to) sends nothing;
2. an unmapped console login approving a batch `close` sends nothing;
7. an unmapped console login cannot request a two-person decision at all.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bot.console import terminal_login
from bot.messages import ListReporter
from tests.fixtures.triage import bulk_router, make_incident

pytestmark = pytest.mark.subprocess

LOGIN = terminal_login()
PERSON = "U0ALICE01"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


def _console(
    installed: Any, sandbox: Any, db: Path, cwd: Path, script: str, **extra: str
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECOVER_", "CONTROL_HOST_", "SLACK_"))}
    env.update(CONTROL_HOST_URL=sandbox.url, CONTROL_HOST_API_KEY=sandbox.api_key, RECOVER_DB=str(db), **extra)
    return subprocess.run(
        [str(installed.script), "console"], input=script, capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_a_console_batch_is_not_approved_by_its_requester_from_slack(installed, incident_sandbox, workdir, tmp_path):
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    db = tmp_path / "recover.db"
    asked = _console(
        installed,
        incident_sandbox,
        db,
        workdir,
        f'batch decide --sessions {",".join(made)} close --reason "store gone"\n',
        RECOVER_CONSOLE_USERS=f"{LOGIN}:{PERSON}",
    )
    assert asked.returncode == 0, asked.stdout + asked.stderr
    (batch_id,) = set(re.findall(r"bat_[0-9a-f]{12}", asked.stdout))
    # The same person, in Slack (the router the Slack app calls, on the same file).
    slack = bulk_router(incident_sandbox, tmp_path, console_users={LOGIN: PERSON})
    same = slack.handle_text(f"/recover approve {batch_id}", actor=PERSON, channel="C1", reporter=ListReporter())
    assert not same.ok and "cannot approve your own batch" in same.messages[0].headline
    assert not incident_sandbox.admin.effect_counts()


def test_an_unmapped_console_login_approves_no_batch_and_requests_no_two_person_decision(
    installed, incident_sandbox, workdir, tmp_path
):
    made = make_incident(incident_sandbox, {"startup_stopped": 2})["startup_stopped"]
    db = tmp_path / "recover.db"
    slack = bulk_router(incident_sandbox, tmp_path)
    requested = slack.handle_text(
        f'/recover batch decide --sessions {",".join(made)} close --reason "x"',
        actor=PERSON,
        channel="C1",
        reporter=ListReporter(),
    )
    batch_id = requested.messages[0].ref
    approve = _console(installed, incident_sandbox, db, workdir, f"approve {batch_id}\n")  # RECOVER_APPROVERS empty
    assert "not mapped to a Slack user id" in approve.stdout, approve.stdout + approve.stderr
    decide = _console(installed, incident_sandbox, db, workdir, f'decide {made[0]} close --reason "gone"\n')
    assert "never request or approve a two-person one" in decide.stdout, decide.stdout + decide.stderr
    assert "req_" not in decide.stdout
    assert not incident_sandbox.admin.effect_counts()
    assert [r for r in incident_sandbox.admin.requests() if r.get("method") == "POST"] == []
