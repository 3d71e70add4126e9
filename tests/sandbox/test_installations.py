"""Several installations in one process: the same session ids on each, their own keys and state, and
one installation's outage (429 with Retry-After, or a 5xx, for N real seconds) leaving the others alone."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.clock import ManualClock
from bot.installations import load_installations
from bot.installations.cli import check
from bot.sandbox import SandboxAdminError, SandboxSet, installation_key, start_installations
from tests.fixtures.sandbox import SandboxApi

NAMES = ("eu-1", "us-1", "ap-1")


@pytest.fixture
def hosts() -> Iterator[SandboxSet]:
    with start_installations(NAMES, clock=ManualClock()) as running:
        yield running


def _api(hosts: SandboxSet, name: str, key_of: str | None = None) -> SandboxApi:
    return SandboxApi(hosts[name].url, hosts[key_of or name].api_key)


def test_identical_session_ids_own_ports_own_keys(hosts: SandboxSet) -> None:
    assert list(hosts) == list(NAMES)
    assert len({h.url for h in hosts.values()}) == 3
    ids = [[s["id"] for s in h.admin.sessions()] for h in hosts.values()]
    assert ids[0] and ids[0] == ids[1] == ids[2]
    # eu-1's key opens eu-1 only.
    foreign = _api(hosts, "us-1", key_of="eu-1")
    try:
        assert foreign.get("/v1/sessions/ses_healthy").status_code == 401
    finally:
        foreign.close()


def test_a_decision_sent_to_one_changes_only_that_one(hosts: SandboxSet) -> None:
    eu = _api(hosts, "eu-1")
    try:
        before = {n: hosts[n].admin.session("ses_stopped_resumable") for n in NAMES}
        assert eu.resume("ses_stopped_resumable").status_code in (200, 202)
    finally:
        eu.close()
    assert hosts["eu-1"].admin.effect_count("ses_stopped_resumable") == 1
    for name in ("us-1", "ap-1"):
        assert hosts[name].admin.effects() == [] and hosts[name].admin.requests() == []
        assert hosts[name].admin.session("ses_stopped_resumable") == before[name]
    assert hosts["eu-1"].admin.session("ses_stopped_resumable") != before["eu-1"]


def test_one_installation_rate_limited_for_n_seconds(hosts: SandboxSet) -> None:
    fault = hosts["us-1"].admin.outage(0.6, status=429, retry_after=5)
    assert fault["kind"] == "rate_limit" and fault["for_seconds"] == 0.6
    us, eu = _api(hosts, "us-1"), _api(hosts, "eu-1")
    try:
        limited = us.get("/v1/sessions/ses_healthy")
        assert (limited.status_code, limited.headers["Retry-After"]) == (429, "5")
        assert us.get("/v1/sessions", admission_state="recovery_required").status_code == 429
        assert eu.get("/v1/sessions/ses_healthy").status_code == 200  # the others answer as usual
        time.sleep(0.7)
        assert us.get("/v1/sessions/ses_healthy").status_code == 200  # over after its seconds
    finally:
        us.close()
        eu.close()
    assert hosts["us-1"].admin.faults()[0]["remaining_seconds"] == 0


def test_one_installation_failing_with_a_5xx_for_n_seconds(hosts: SandboxSet) -> None:
    hosts["ap-1"].admin.outage(0.5, status=502)
    ap, eu = _api(hosts, "ap-1"), _api(hosts, "eu-1")
    try:
        assert ap.get("/v1/sessions/ses_healthy").status_code == 502
        failed = ap.resume("ses_stopped_resumable")
        assert failed.status_code == 502 and hosts["ap-1"].admin.effects() == []  # before any commit
        assert eu.get("/v1/sessions/ses_healthy").status_code == 200
        time.sleep(0.6)
        assert ap.get("/v1/sessions/ses_healthy").status_code == 200
    finally:
        ap.close()
        eu.close()


def test_the_outage_endpoint_refuses_what_it_cannot_do(hosts: SandboxSet) -> None:
    admin = hosts["eu-1"].admin
    with pytest.raises(SandboxAdminError, match="status must be 429 or a 5xx"):
        admin.outage(5, status=404)
    with pytest.raises(SandboxAdminError, match="seconds must be a number above 0"):
        admin.outage(0)
    with pytest.raises(SandboxAdminError, match="for_seconds must be above 0"):
        admin.fault("server_error", times=None, for_seconds=-1)


def test_a_mass_incident_has_the_same_ids_on_each() -> None:
    with start_installations(["eu-1", "us-1"], scenarios=None, incident=40) as running:
        ids = [[s["id"] for s in h.admin.sessions()] for h in running.values()]
    assert len(ids[0]) == 40 and ids[0] == ids[1]


def test_names_once_each() -> None:
    with pytest.raises(ValueError, match="name each once"):
        start_installations(["eu-1", "eu-1"])


@contextlib.contextmanager
def _sandbox_command(folder: Path, key: str, *extra: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``recover-bot sandbox --installations eu-1,us-1`` of this checkout in a process of its own, and
    every line it printed (checked for the key once it stopped on Ctrl-C)."""
    code = "from bot.cli import main; import sys; sys.exit(main(sys.argv[1:]))"
    args = ["sandbox", "--installations", "eu-1,us-1", "--port", "0", "--api-key", key, *extra]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=folder,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        yield proc, lines
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert key not in "".join(lines) + proc.stdout.read()  # never echoed, start to finish
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.subprocess
def test_the_command_writes_a_file_serve_and_check_can_use(tmp_path: Path) -> None:
    target = tmp_path / "conf" / "installations.yaml"
    with _sandbox_command(tmp_path, "sbx-cli-key-123", "--write-installations", str(target)) as (proc, lines):
        assert proc.stdout is not None
        lines += [proc.stdout.readline() for _ in range(5)]
        assert re.match(r"Sandbox control host eu-1 listening on http://127\.0\.0\.1:\d+$", lines[0]), lines
        assert re.match(r"Sandbox control host us-1 listening on http://127\.0\.0\.1:\d+$", lines[1]), lines
        assert lines[4].strip() == (
            f"installations file: {target} (keys beside it, ignored by git through {target.parent / '.gitignore'}); "
            f"RECOVER_INSTALLATIONS_FILE={target}"
        )
        eu, us = load_installations(target)
        assert (eu.name, us.name) == ("eu-1", "us-1")
        assert eu.api_key is not None and eu.api_key.get_secret_value() == installation_key("sbx-cli-key-123", "eu-1")
        assert oct((target.parent / "eu-1.key").stat().st_mode & 0o777) == "0o600"
        assert check(str(target)) == 0


@pytest.mark.subprocess
def test_the_printed_file_names_variables_never_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _sandbox_command(tmp_path, "sbx-cli-key-456") as (proc, lines):
        assert proc.stdout is not None
        lines += [proc.stdout.readline() for _ in range(14)]
        text = "".join(lines[lines.index("installations:\n") :])
        (tmp_path / "printed.yaml").write_text(text)
        monkeypatch.setenv("RECOVER_SANDBOX_KEY_EU_1", installation_key("sbx-cli-key-456", "eu-1"))
        monkeypatch.setenv("RECOVER_SANDBOX_KEY_US_1", installation_key("sbx-cli-key-456", "us-1"))
        assert check(str(tmp_path / "printed.yaml")) == 0


@pytest.mark.subprocess
def test_keys_written_into_a_checkout_are_ignored_by_git(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    target = checkout / "conf" / "installations.yaml"
    with _sandbox_command(checkout, "sbx-cli-key-789", "--write-installations", str(target)) as (proc, lines):
        assert proc.stdout is not None
        lines += [proc.stdout.readline() for _ in range(5)]
        assert (target.parent / "eu-1.key").is_file() and (target.parent / "us-1.key").is_file(), lines
        status = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert sorted(status.split()) == ["??", "??", "conf/.gitignore", "conf/installations.yaml"], status
