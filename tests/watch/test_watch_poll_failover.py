"""Two watcher processes on one store file: one polls the installation (``watch-poll:default``), the
other stands by; SIGKILL the poller and the other takes the polling over once its lease runs out
(token + 1), and posts what stopped after the kill exactly once."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from bot.sandbox import SandboxHandle
from bot.store import Store
from bot.store.leases import Lease
from tests.fixtures.slack import BOT_TOKEN, SIGNING_SECRET, SlackStandIn
from tests.fixtures.triage import clone
from tests.fixtures.waiting import eventually
from tests.fixtures.watch import start_watcher_process
from tests.watch.test_watcher import edited_runbooks

pytestmark = pytest.mark.subprocess

CHANNEL = "C0WATCH"
JOB = "watch-poll:default"


def _pid(lease: Lease | None) -> int | None:
    """The process a lease holder (``watch:host:pid:…``) names."""
    return None if lease is None else int(lease.holder.split(":")[2])


def test_one_process_polls_and_the_other_takes_over_when_it_is_killed(
    incident_sandbox: SandboxHandle, slack_api: SlackStandIn, tmp_path: Path
) -> None:
    runbooks = edited_runbooks(tmp_path, "claim_lease: {duration: 2m,", "claim_lease: {duration: 1s,")
    db = tmp_path / "recover.db"
    config: dict[str, object] = {
        "control_host_url": incident_sandbox.url,
        "control_host_api_key": incident_sandbox.api_key,
        "db_path": str(db),
        "slack_bot_token": BOT_TOKEN,
        "slack_signing_secret": SIGNING_SECRET,
        "slack_api_url": slack_api.base_url,
        "watch_channel": CHANNEL,
        "watch_interval": 0.05,  # the poll lease: max(1 s claim lease, 2 intervals) = 1 s
        "runbooks_dir": str(runbooks),
    }
    for sid in ("ses_pf_before", "ses_pf_after"):
        incident_sandbox.admin.create_session(clone("healthy", sid))
    procs = {p.pid: p for p in (start_watcher_process(config), start_watcher_process(config))}
    store = Store(db)
    try:
        eventually(lambda: _pid(store.leases.get(JOB)) in procs, 30, "one of the two polls")
        first = store.leases.get(JOB)
        assert first is not None
        incident_sandbox.admin.stop("ses_pf_before")
        eventually(lambda: len([p for p in slack_api.roots(CHANNEL) if "ses_pf_before" in p.text]) == 1, 30, "posted")
        time.sleep(1.5)  # both keep polling for longer than the lease: the polling never changed hands
        held = store.leases.get(JOB)
        assert held is not None and (held.holder, held.token) == (first.holder, first.token)

        poller = procs.pop(int(_pid(first) or 0))
        poller.send_signal(signal.SIGKILL)
        poller.wait(10)
        killed_at = time.monotonic()
        incident_sandbox.admin.stop("ses_pf_after")
        (standby,) = procs
        eventually(lambda: _pid(store.leases.get(JOB)) == standby, 30, "the other process took the polling over")
        taken = store.leases.get(JOB)
        assert taken is not None and taken.token == first.token + 1
        eventually(lambda: len([p for p in slack_api.roots(CHANNEL) if "ses_pf_after" in p.text]) >= 1, 30, "posted")
        print(f"failover: the stop after the kill posted {time.monotonic() - killed_at:.2f} s after it")
        time.sleep(0.5)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    roots = [p.text for p in slack_api.roots(CHANNEL)]
    assert [sum(f"Stopped: {sid} " in t for t in roots) for sid in ("ses_pf_before", "ses_pf_after")] == [1, 1]
