"""Requests from another workspace or another app are refused before any listener runs.

The signing secret is the app's, not a workspace's: a correctly signed approval can come from another
workspace the app is installed in. It must never execute (R0.1: only this installation's operators).
"""

from __future__ import annotations

import re

from bot.slack.tenancy import Tenancy
from tests.fixtures.slack import Posted, SlackHarness
from tests.slack.fake_router import FakeRouter


def _decision_posts(sandbox, session: str) -> list[dict]:
    return [r for r in sandbox.admin.requests(session) if "decision" in str(r.get("path", ""))]


def _approval_request(h: SlackHarness) -> tuple[Posted, str]:
    for root in h.api.roots("CINC"):
        for m in h.api.thread("CINC", root.ts):
            if any(a.startswith("rb:approve:") for a, _ in m.action_ids()):
                found = re.search(r"req_[A-Za-z0-9]+", m.all_text())
                assert found
                return m, found.group(0)
    raise AssertionError("no approval request posted")


def test_another_workspaces_signed_approval_is_refused_and_nothing_executes(slack_harness, sandbox) -> None:
    session = "ses_restore_transient"
    h: SlackHarness = slack_harness.real(sandbox)
    assert h.send.command(f"decide {session} close --reason tenancy", user="UALICE").status_code == 200
    h.settle()
    request, request_id = _approval_request(h)
    before = len(h.api.calls)

    refused = [
        h.send.click(request, "approve", user="UEVE", team="T2"),  # another workspace
        h.send.click(request, "approve", user="UEVE", team="T1", user_team="T2"),  # a guest from another one
        h.send.click(request, "approve", user="UBOB", app_id="A2"),  # another app
        h.send.command(f"approve {request_id}", user="UEVE", team="T2"),
        h.send.command(f"approve {request_id}", user="UBOB", app_id="A2"),
    ]
    h.settle()
    assert [r.status_code for r in refused] == [403] * 5
    assert _decision_posts(sandbox, session) == []
    assert h.api.messages[request.ts].updates == 0
    assert len(h.api.calls) == before  # not even an answer went to Slack

    # The same approval from this workspace executes: the refusal above was the check, not a broken path.
    assert h.send.click(request, "approve", user="UBOB").status_code == 200
    h.settle()
    assert len(_decision_posts(sandbox, session)) == 1
    assert "executed" in h.api.messages[request.ts].text


def test_recover_slack_teams_overrides_auth_test(slack_harness) -> None:
    router = FakeRouter()
    h: SlackHarness = slack_harness(router, slack_teams=("T9XYZ", "E1XYZ"))
    assert h.send.command("cases", team="T1").status_code == 403
    assert h.send.command("cases", team="T9XYZ").status_code == 200
    h.settle()
    assert [c for c in router.calls if c[0] == "text"] and len(router.calls) == 1


def test_enterprise_grid_and_guests() -> None:
    t = Tenancy(frozenset({"T1", "E1"}), "A1")
    ok = {"team": {"id": "T1"}, "user": {"id": "U", "team_id": "T1"}, "api_app_id": "A1"}
    assert t.refusal(ok) is None
    assert t.refusal({**ok, "user": {"id": "U", "team_id": "T7"}}) is not None
    grid = {"team": {"id": "T7"}, "enterprise": {"id": "E1"}, "user": {"id": "U", "team_id": "T8"}, "api_app_id": "A1"}
    assert t.refusal(grid) is None
    assert t.refusal({"team_id": "T1", "api_app_id": None}) is not None
    assert t.refusal({"team_id": "T2", "api_app_id": "A1"}) is not None
    assert Tenancy(frozenset({"T1"}), None).refusal({"team_id": "T1"}) is None  # app id unknown: team only
