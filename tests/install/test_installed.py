"""The built wheel, installed as a user installs it, run from an empty folder with no RECOVER_* set.

Fixtures (tests/fixtures/install.py) for more checks of the installed command:
  installed            the session's virtualenv: installed.run("audit", "verify", cwd=workdir, env={...}),
                       installed.console(cwd=workdir, env={...}) -> ConsoleProcess (send / expect /
                       interrupt = Ctrl-C / finish -> (exit status, output)); installed.env(cwd) is the
                       clean environment every command gets (add USER/LOGNAME etc. through env=).
  workdir              an empty folder per test.
  installed_sandbox    `recover-bot sandbox --port 0` of the wheel: .url, .api_key, .admin (the sandbox's
                       admin API: faults, request log), .console_env(db) -> the CONTROL_HOST_* and
                       RECOVER_DB a console needs.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
from pathlib import Path

import pytest

from tests.fixtures.install import Installed, InstalledSandbox

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{text}"
    assert "Traceback" not in text
    return lines[0]


def test_the_installed_copy_runs_and_ships_its_runbooks(installed: Installed, workdir: Path) -> None:
    res = installed.run("runbook", "check", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ok: 2 file(s) in ")
    shipped = Path(res.stdout.split(" in ", 1)[1].split(" (", 1)[0])
    assert shipped.is_relative_to(installed.venv) and (shipped / "session-recovery.yaml").is_file()
    assert "session-recovery, isolation-upgrade" in res.stdout
    assert list(workdir.iterdir()) == []  # nothing written where it was run

    # The same check names an edited copy's problem as file:line, exit 1.
    copy = workdir / "mine"
    copy.mkdir()
    text = (shipped / "session-recovery.yaml").read_text()
    assert "kind: diagnose" in text
    (copy / "session-recovery.yaml").write_text(text.replace("kind: diagnose", "kind: diagnoze", 1))
    bad = installed.run("runbook", "check", str(copy), cwd=workdir)
    assert bad.returncode == 1 and "session-recovery.yaml:" in bad.stderr and "Traceback" not in bad.stderr


def test_help_states_the_exit_codes(installed: Installed, workdir: Path) -> None:
    res = installed.run("--help", cwd=workdir)
    assert res.returncode == 0
    for line in ("0   ok", "1   findings", "2   usage or settings", "70  unexpected"):
        assert line in res.stdout


def test_console_diagnoses_a_sandbox_session(
    installed: Installed, installed_sandbox: InstalledSandbox, workdir: Path
) -> None:
    env = installed_sandbox.console_env(workdir / "recover.db")
    res = installed.run("console", cwd=workdir, env=env, input="/recover diagnose ses_restore_transient\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ses_restore_transient" in res.stdout and "Runbook: R" in res.stdout
    assert "retry_restore" in res.stdout
    assert installed_sandbox.api_key not in res.stdout + res.stderr
    assert (workdir / "recover.db").is_file()
    # Diagnosing reads; it never sends anything (R0.3).
    seen = installed_sandbox.admin.requests("ses_restore_transient")
    assert seen and {r["method"] for r in seen} == {"GET"}

    # The store is bound to the key it was first used with: another key is refused at start, in one line.
    refused = installed.run(
        "console", cwd=workdir, env={**env, "CONTROL_HOST_API_KEY": "not-the-key-123"},
        input="/recover diagnose ses_restore_transient\n",
    )  # fmt: skip
    assert refused.returncode == 2 and "with another API key" in refused.stderr, refused.stdout + refused.stderr
    assert "audit rebind --install default" in refused.stderr and "Traceback" not in refused.stderr
    assert "not-the-key-123" not in refused.stdout + refused.stderr
    # On a new store, a wrong key is named as such (401, not "unreachable", not a missing scope) at the
    # first command.
    wrong = installed.run(
        "console", cwd=workdir,
        env={**installed_sandbox.console_env(workdir / "other.db"), "CONTROL_HOST_API_KEY": "not-the-key-123"},
        input="/recover diagnose ses_restore_transient\n",
    )  # fmt: skip
    assert wrong.returncode == 1
    assert "HTTP 401" in wrong.stdout and "CONTROL_HOST_API_KEY is wrong or expired" in wrong.stdout
    assert "sessions:recover scope" not in wrong.stdout and "Not classified" not in wrong.stdout
    assert "not-the-key-123" not in wrong.stdout + wrong.stderr
    # A key that is a word of that sentence (someone trying out a wrong key) does not mask the sentence.
    worded = installed.run(
        "console", cwd=workdir,
        env={**installed_sandbox.console_env(workdir / "worded.db"), "CONTROL_HOST_API_KEY": "wrong"},
        input="/recover diagnose ses_restore_transient\n",
    )  # fmt: skip
    assert "CONTROL_HOST_API_KEY is wrong or expired" in worded.stdout, worded.stdout


def test_console_with_an_unreachable_control_host_is_one_line(installed: Installed, workdir: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {"CONTROL_HOST_URL": url, "CONTROL_HOST_API_KEY": "k-123456", "RECOVER_LOG_LEVEL": "WARNING"}
    res = installed.run("console", cwd=workdir, env=env, input="/recover cases\n")
    assert res.returncode == 2
    assert _one_line(res.stderr) == (
        f"cannot reach the control host at {url} (Connection refused); check CONTROL_HOST_URL and the network"
    )
    assert res.stdout == ""  # refused before the console started


def test_audit_verify_and_export_on_a_store_written_by_the_bot(
    installed: Installed, installed_sandbox: InstalledSandbox, workdir: Path
) -> None:
    db = workdir / "recover.db"
    commands = "/recover diagnose ses_restore_transient\n/recover note ses_restore_transient checked the disk\n"
    wrote = installed.run("console", cwd=workdir, env=installed_sandbox.console_env(db), input=commands)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr

    # RECOVER_DB from a .env in the folder, as a user would keep it.
    (workdir / ".env").write_text(f"RECOVER_DB={db}\n")
    export = installed.run("audit", "export", "--out", "steps.jsonl", cwd=workdir)
    assert export.returncode == 0, export.stderr
    head = export.stdout.split()[-1]
    steps = [json.loads(line) for line in (workdir / "steps.jsonl").read_text().splitlines()]
    assert len(steps) >= 2 and any(s["step"] == "note" for s in steps)

    ok = installed.run("audit", "verify", "--head", head, cwd=workdir)
    # The console wrote it without an audit key: intact, and said to be unkeyed (status 3).
    assert ok.returncode == 3 and ok.stdout.startswith("OK: "), ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "unkeyed: detects accidental damage, not a writer"

    # Someone edits a step behind the bot's back (after dropping the trigger that refuses it).
    conn = sqlite3.connect(db)
    conn.executescript(
        "DROP TRIGGER steps_no_update;"
        "UPDATE steps SET actor = 'mallory' WHERE seq = (SELECT MIN(seq) FROM steps WHERE step = 'note');"
    )
    conn.close()
    edited = next(s["seq"] for s in steps if s["step"] == "note")
    bad = installed.run("audit", "verify", "--head", head, cwd=workdir)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.startswith("TAMPERED") and f"first bad step: {edited}" in bad.stdout


def test_serve_with_nothing_set_names_every_missing_setting(installed: Installed, workdir: Path) -> None:
    res = installed.run("serve", cwd=workdir)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == "recover-bot serve: fix these settings (environment or .env):"
    named = sorted(line.split()[0] for line in lines[1:])
    assert named == sorted(
        ["CONTROL_HOST_URL", "CONTROL_HOST_API_KEY", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "RECOVER_AUDIT_KEY"]
    )


def test_a_busy_or_invalid_port_is_one_line(installed: Installed, workdir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = installed.run("sandbox", "--port", str(port), cwd=workdir, timeout=60)
    assert res.returncode == 2
    assert _one_line(res.stderr) == (
        f"cannot listen on 127.0.0.1:{port}: the port is already in use; choose another --port (0 = any free port)"
    )
    invalid = installed.run("sandbox", "--port", "99999", cwd=workdir, timeout=60)
    assert invalid.returncode == 2
    assert "'99999' is not a port: use a number from 0 to 65535" in _one_line(invalid.stderr)


def test_the_sandbox_banner_is_a_line_to_paste_and_its_help_shows_the_defaults(
    installed: Installed, workdir: Path
) -> None:
    helped = installed.run("sandbox", "--help", cwd=workdir)
    assert "(default: sandbox-key)" in helped.stdout and "(default: 127.0.0.1)" in helped.stdout, helped.stdout
    proc = installed.popen("sandbox", "--port", "0", cwd=workdir)  # no --api-key: the documented default
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline().decode() + proc.stdout.readline().decode()
        pasted = re.search(r"point the bot at it: (CONTROL_HOST_URL=\S+) (CONTROL_HOST_API_KEY=\S+)", banner)
        assert pasted, banner
        env = dict(v.split("=", 1) for v in pasted.groups())
        run = installed.run(
            "console", cwd=workdir, env={**env, "RECOVER_DB": str(workdir / "r.db")},
            input="/recover diagnose ses_restore_transient\n",
        )  # fmt: skip
        assert run.returncode == 0 and "Restore stopped at the limit" in run.stdout, run.stdout + run.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(15)


def test_the_console_says_where_its_store_is_before_it_writes_one_into_the_folder(
    installed: Installed, installed_sandbox: InstalledSandbox, workdir: Path
) -> None:
    env = {k: v for k, v in installed_sandbox.console_env(workdir / "unused.db").items() if k != "RECOVER_DB"}
    first = installed.run("console", cwd=workdir, env=env, input="cases\n")
    assert first.returncode == 0, first.stdout + first.stderr
    here = (workdir / "recover.db").resolve()
    assert f"Store: {here} (new); RECOVER_DB is unset, so it is in the current folder" in first.stdout, first.stdout
    again = installed.run("console", cwd=workdir, env=env, input="cases\n")
    assert f"Store: {here} (existing);" in again.stdout
    chosen = installed.run("console", cwd=workdir, env={**env, "RECOVER_DB": str(workdir / "kept.db")}, input="")
    assert f"Store: {(workdir / 'kept.db').resolve()} (new, from RECOVER_DB)." in chosen.stdout, chosen.stdout
