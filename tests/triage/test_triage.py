"""``/recover triage`` over a mixed incident in a real sandbox: grouping by runbook branch and cause.

Real parts: the sandbox control host over HTTP, a real SQLite file, worker logs read from a file.
"""

from __future__ import annotations

from pathlib import Path

from bot.messages import ListReporter
from bot.sandbox import SandboxHandle
from tests.fixtures.triage import bulk_router, make_incident

MIX = {
    "restore_stopped_transient": 6,
    "incompatible": 4,
    "startup_stopped": 3,
    "unknown_unanswered": 2,
    "restore_stopped_damage": 2,
}


def test_mixed_incident_grouped_by_branch_and_cause(incident_sandbox: SandboxHandle, tmp_path: Path) -> None:
    made = make_incident(incident_sandbox, MIX, tmp_path / "workers.log")
    router = bulk_router(incident_sandbox, tmp_path, log_files=str(tmp_path / "workers.log"))
    reporter = ListReporter()
    reply = router.handle_text("/recover triage", actor="alice", channel=None, reporter=reporter)
    assert reply.ok
    final = reply.messages[0]
    assert final.headline.startswith("Triage t1: 17 session(s) need an operator, 5 group(s) · complete")
    assert reporter.progressed, "a first summary is shown before the end"
    saved = router.services.bulk.batches.triages
    by_cause = {}
    for n in range(1, 6):
        g = saved.group(f"t1.g{n}")
        assert g is not None
        by_cause[(g.data["branch"], g.data["code"], g.data["reason"])] = g
    # The examples are diagnosed by diagnose's own function: their worker logs named the branch, and
    # the group took it (triage and diagnose share one classification).
    transient = by_cause[("restore_transient", "RESTORE_FAILED", "restore_unavailable")]
    assert transient.data["count"] == 6
    assert {m.session_id for m in transient.members} == set(made["restore_stopped_transient"])
    assert transient.data["valid_for_all"] == ["retry_restore", "start_fresh", "close"]
    # Worker logs were read for the examples only, and they name the likely cause (R2.6).
    assert len(transient.data["examples"]) == 3
    assert all("branch" not in e for e in transient.data["examples"])  # they are the group's branch
    assert transient.data["likely_cause"] == "restore_unavailable"
    assert transient.data["first_failure"] and transient.data["last_failure"]
    incompatible = by_cause[("restore_incompatible", "RESTORE_FAILED", "incompatible_checkpoint")]
    assert incompatible.data["count"] == 4
    unknown = by_cause[("outcome_unknown", "OUTCOME_UNKNOWN", "interrupt_unanswered")]
    assert unknown.data["valid_for_all"] == ["close"]
    startup = by_cause[("startup_stopped", "STARTUP_FAILED", "git_credentials_refused")]
    assert "retry_restore" not in startup.data["valid_for_all"]
    text = final.plain_text()
    # Why the others are not valid: by the API's code on the group's line, in full behind details.
    assert "retry_restore, abandon, confirm_completed, resume (REQUEST_STALE)" in text or "(REQUEST_STALE" in text
    assert any(v.startswith("retry_restore: 409 REQUEST_STALE") for _, v in final.facts)
    group_lines = [line for line in text.splitlines() if line.startswith("*t1.g")]
    for start in (text.splitlines().index(line) for line in group_lines):  # at most 3 lines a group
        rest = text.splitlines()[start + 1 : start + 4]
        assert sum(1 for line in rest if line.startswith("    ")) <= 2
    assert final.attachment is not None and final.attachment.text.count("\n") == 18  # header + every session
    # The triage is a recorded step (installation-wide).
    steps = [s for s in router.services.store.steps() if s.step == "triage"]
    assert steps and steps[-1].inputs == {"triage_id": "t1"}


def test_group_ids_are_qualified_by_the_triage(incident_sandbox: SandboxHandle, tmp_path: Path) -> None:
    make_incident(incident_sandbox, {"incompatible": 2})
    router = bulk_router(incident_sandbox, tmp_path)
    first = router.handle_text("/recover triage", actor="alice", channel=None, reporter=ListReporter())
    second = router.handle_text("/recover triage", actor="bob", channel=None, reporter=ListReporter())
    assert "*t1.g1*" in first.messages[0].plain_text()
    assert "*t2.g1*" in second.messages[0].plain_text()


def test_a_rate_limited_control_host_is_paced_not_lost(tmp_path: Path) -> None:
    """The control host allows fewer calls than the runbook's pace: its 429s pause every thread for
    the wait they name, and every session is still read (nothing unreadable, nothing missing)."""
    from bot.sandbox import start_sandbox

    with start_sandbox(scenarios=None, rate_limit=25, rate_burst=5) as sbx:
        make_incident(sbx, {"restore_stopped_transient": 12, "startup_stopped": 8})
        router = bulk_router(sbx, tmp_path)
        reply = router.handle_text("/recover triage", actor="alice", channel=None, reporter=ListReporter())
        final = reply.messages[0]
        assert final.headline.startswith("Triage t1: 20 session(s) need an operator, 2 group(s) · complete")
        assert "unreadable" not in final.plain_text()
        assert router.services.bulk.limiter.throttled > 0  # the 429s were seen and honoured
