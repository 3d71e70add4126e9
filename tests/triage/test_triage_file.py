"""The triage file, end to end: a control host's attention reason cannot add a row or a formula.

Real parts: the sandbox control host over HTTP (its admin API sets the hostile reason), a real SQLite
file, the router; the file is read back with ``csv.reader``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from bot.csvfile import FORMULA_STARTS
from bot.messages import ListReporter
from bot.sandbox import SandboxHandle
from tests.fixtures.triage import bulk_router, clone

#: A reason that, joined with bare commas, became a second row (a session that does not exist, with
#: ``close`` valid) and a formula cell.
HOSTILE = 'x\nses_fake,close,=HYPERLINK("https://e","fix")'


def triage_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_a_hostile_attention_reason_stays_one_cell_of_its_own_row(
    incident_sandbox: SandboxHandle, tmp_path: Path
) -> None:
    ids = [f"ses_hostile_{i}" for i in range(2)]
    for sid in ids:
        incident_sandbox.admin.create_session(clone("healthy", sid))
    incident_sandbox.admin.stop(ids[0], code="RESTORE_FAILED", reason=HOSTILE, failures=3)
    incident_sandbox.admin.stop(ids[1], code="RESTORE_FAILED", reason='=HYPERLINK("https://e","fix")', failures=3)
    router = bulk_router(incident_sandbox, tmp_path)
    reply = router.handle_text("/recover triage", actor="alice", channel=None, reporter=ListReporter())
    assert reply.ok
    final = reply.messages[0]
    assert final.attachment is not None and final.attachment.filename == "triage-t1.csv"
    rows = triage_rows(final.attachment.text)
    assert rows[0] == [
        "group",
        "session_id",
        "branch",
        "attention_code",
        "attention_reason",
        "revision",
        "last_failure",
        "valid",
    ]  # the layout people rely on is kept
    body = rows[1:]
    assert sorted(r[1] for r in body) == ids  # exactly one row per real session: no ses_fake
    assert all(len(r) == len(rows[0]) for r in body)
    reasons = {r[1]: r[4] for r in body}
    assert reasons[ids[0]] == HOSTILE  # the whole reason, in its one cell (it begins with "x")
    assert reasons[ids[1]] == '\'=HYPERLINK("https://e","fix")'  # shown as text, never evaluated
    assert not any(cell.startswith(FORMULA_STARTS) for r in rows for cell in r)
