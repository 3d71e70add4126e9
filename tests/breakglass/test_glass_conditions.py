"""The runbook's ``break_glass.when`` and the record: with only ``no_other_approver``, break-glass is
refused while the approver rule finds another eligible person, allowed when only the requester is
listed (then the notice goes to the channel and DMs nobody); ``audit verify`` finds nothing amiss in a
request sent by break-glass, and names a break-glassed row whose approver was edited."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from bot.decisions import check_request_table
from bot.runbook.escalation import BreakGlassSpec
from bot.sandbox import SandboxHandle, start_sandbox
from bot.store import audit
from tests.breakglass.world import APPROVER, CHANNEL, LADDER_END, REQUESTER, World, make_world, stopped, text
from tests.fixtures.decisions import StaticDirectory
from tests.fixtures.slack import SlackStandIn


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios=None) as handle:
        yield handle


def _only_no_other(world: World) -> None:
    """A runbook whose break_glass.when names only no_other_approver (the loaded runbook, changed as data)."""
    runbooks = world.router.services.runbooks
    assert runbooks.escalation is not None
    runbooks.escalation = runbooks.escalation.model_copy(
        update={"break_glass": BreakGlassSpec(when=["no_other_approver"])}
    )


def test_no_other_approver_refuses_while_someone_else_may_approve(sbx, slack_api: SlackStandIn, tmp_path) -> None:
    world = make_world(sbx, slack_api, tmp_path / "bg.db", approvers=(APPROVER,))
    _only_no_other(world)
    stopped(sbx, "ses_nc1")
    rid = world.request("ses_nc1")
    world.clock.advance(LADDER_END + 5)
    refused = world.break_glass(rid)
    assert not refused.ok and "none of the runbook's break-glass conditions holds" in text(refused), text(refused)
    assert "1 other eligible approver(s) exist" in text(refused)


def test_no_other_approver_allows_when_the_group_holds_only_the_requester(sbx, slack_api, tmp_path) -> None:
    world = make_world(sbx, slack_api, tmp_path / "bg.db", approvers=("SONCALL001",))
    world.router.services.decisions.ctx.directory = StaticDirectory({"SONCALL001": {REQUESTER}})
    _only_no_other(world)
    stopped(sbx, "ses_nc2")
    rid = world.request("ses_nc2")
    world.clock.advance(LADDER_END + 5)
    assert world.break_glass(rid).ok
    sent = world.run(f"/recover confirm {rid}", REQUESTER)
    assert sent.ok, text(sent)
    assert [where for where, _ in world.notices(rid)] == [CHANNEL]  # nobody else to DM
    assert len(world.posts("ses_nc2")) == 1


def test_audit_verify_reads_a_break_glass_send_as_granted(sbx, slack_api, tmp_path) -> None:
    db = tmp_path / "bg.db"
    world = make_world(sbx, slack_api, db)
    stopped(sbx, "ses_nc3")
    rid = world.request("ses_nc3")
    world.clock.advance(LADDER_END + 5)
    assert world.break_glass(rid).ok and world.run(f"/recover confirm {rid}", REQUESTER).ok
    report = audit.verify(db, checks=[check_request_table])
    assert not report.problems, report.problems
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("UPDATE decision_requests SET approved_by = ? WHERE id = ?", [APPROVER, rid])
    edited = audit.verify(db, checks=[check_request_table])
    assert any(f"approved_by {APPROVER} in the table" in p.message for p in edited.problems), edited.problems
