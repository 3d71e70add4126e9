"""Over signed Slack HTTP, the real router on the sandbox control host: a tier mapped to a PagerDuty
escalation policy is resolved as serve resolves it; the on-call user approves, an off-call one cannot."""

from __future__ import annotations

import re

from tests.fixtures.pagerduty import PD_TOKEN
from tests.fixtures.slack import SlackHarness

SESSION = "ses_restore_transient"
TIER = "S0ONCALL2"


def _decision_posts(sandbox) -> list[dict]:
    return [r for r in sandbox.admin.requests(SESSION) if "decision" in str(r.get("path", ""))]


def test_the_pagerduty_on_call_user_approves_in_slack(slack_harness, sandbox, pagerduty_api) -> None:
    pagerduty_api.on_call("PTIER01", "PBOB", "Bob Oncall", "bob@example.com")
    h: SlackHarness = slack_harness.real(
        sandbox, approvers=(TIER,), oncall_pagerduty_policies={TIER: "PTIER01"},
        oncall_pagerduty_token=PD_TOKEN, oncall_pagerduty_url=pagerduty_api.base_url,
    )  # fmt: skip
    h.api.emails.update({"bob@example.com": "UBOB", "carol@example.com": "UCAROL"})
    assert h.send.command(f'decide {SESSION} close --reason "end it"', user="UALICE").status_code == 200
    h.settle()
    (root,) = h.api.roots("CINC")
    request = next(
        m for m in h.api.thread("CINC", root.ts) if any(a.startswith("rb:approve:") for a, _ in m.action_ids())
    )
    request_id = re.search(r"req_[A-Za-z0-9]+", request.all_text()).group(0)

    h.send.command(f"approve {request_id}", user="UCAROL")  # in Slack, not on call in PagerDuty
    h.settle()
    assert _decision_posts(sandbox) == [] and h.api.messages[request.ts].updates == 0
    assert h.api.calls_to("usergroups.users.list") == []  # the tier was read from PagerDuty, not Slack

    h.send.click(request, "approve", user="UBOB")
    h.settle()
    assert len(_decision_posts(sandbox)) == 1
    assert "UBOB" in h.api.messages[request.ts].text
    assert pagerduty_api.oncall_requests() and all(r.authorized for r in pagerduty_api.oncall_requests())
