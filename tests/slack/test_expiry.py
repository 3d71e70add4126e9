"""An approval request that expires is updated in place in its thread, and can no longer be approved."""

from __future__ import annotations

import re

from tests.fixtures.slack import SlackHarness

SESSION = "ses_restore_transient"


def test_expired_request_is_updated_in_place_and_refused(slack_harness, sandbox) -> None:
    h: SlackHarness = slack_harness.real(sandbox)
    assert h.send.command(f'decide {SESSION} close --reason "end it"', user="UALICE").status_code == 200
    h.settle()
    (root,) = h.api.roots("CINC")
    request = next(
        m for m in h.api.thread("CINC", root.ts) if any(a.startswith("rb:approve:") for a, _ in m.action_ids())
    )
    request_id = re.search(r"req_[A-Za-z0-9]+", request.all_text()).group(0)

    assert h.bot.sweep_expired() == 0  # nothing due yet: nothing touched
    assert h.api.messages[request.ts].updates == 0

    sandbox.clock.advance(31 * 60)  # past the runbook's approval expiry (30 min by default)
    assert h.bot.sweep_expired() == 1
    h.settle()
    updated = h.api.messages[request.ts]
    assert updated.updates == 1 and "expired" in updated.text.lower()
    assert not any(a.startswith("rb:approve:") for a, _ in updated.action_ids())  # no button left to click

    # Typed approval of the expired request is refused; nothing reaches the control host.
    h.send.command(f"approve {request_id}", user="UBOB")
    h.settle()
    assert [r for r in sandbox.admin.requests(SESSION) if "decision" in str(r.get("path", ""))] == []
    assert h.bot.sweep_expired() == 0  # expired once, not again
