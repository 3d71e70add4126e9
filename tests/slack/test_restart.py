"""A restarted Slack bot finishes an approved-but-unexecuted decision once, in the case's thread.

The core's SIGKILL tests (tests/decisions/test_processes.py) kill real processes at this point; here
the state such a kill leaves behind is written the way the core writes it, and a fresh bot (new
objects, same database file) starts over it.
"""

from __future__ import annotations

import re

from bot.clock import isoformat
from tests.fixtures.slack import SlackHarness

SESSION = "ses_restore_transient"


def _decision_posts(sandbox) -> list[dict]:
    return [r for r in sandbox.admin.requests(SESSION) if "decision" in str(r.get("path", ""))]


def test_restart_executes_an_approved_request_once_and_reports_in_the_thread(slack_harness, sandbox, tmp_path) -> None:
    db = tmp_path / "shared.db"
    first: SlackHarness = slack_harness.real(sandbox, db_path=db)
    first.send.command(f'decide {SESSION} close --reason "store never came back"', user="UALICE")
    first.settle()
    (root,) = first.api.roots("CINC")
    request = next(
        m for m in first.api.thread("CINC", root.ts) if any(a.startswith("rb:approve:") for a, _ in m.action_ids())
    )
    request_id = re.search(r"req_[A-Za-z0-9]+", request.all_text()).group(0)

    # The approval's compare-and-set committed; the process died before executing.
    services = first.composed.core()
    req = services.decisions.requests.get(request_id)
    with services.store.write() as conn:
        assert services.decisions.requests.transition(
            conn, request_id, ("requested",), "approved", approved_by="UBOB", approved_at=isoformat(sandbox.clock.now())
        )
        # The approval step, with its evidence, commits with the state change (the chain is the authority).
        services.store.record_step(
            SESSION,
            "UBOB",
            "decision_approved",
            {
                "request_id": request_id,
                "content_hash": req.content_hash,
                "channel": "CINC",
                "allowed_by": {"kind": "any"},
            },
            "approved",
            db=conn,
        )
    assert _decision_posts(sandbox) == []

    second: SlackHarness = slack_harness.real(sandbox, db_path=db)
    second.bot.run_startup()
    second.settle()
    assert len(_decision_posts(sandbox)) == 1
    thread = second.api.thread("CINC", root.ts)
    assert any("Verified" in m.text for m in thread), [m.text[:80] for m in thread]
    assert len(second.api.roots("CINC")) == 1  # reported in the case's thread, not a new one

    # A second restart finds nothing left to do: still one POST.
    third: SlackHarness = slack_harness.real(sandbox, db_path=db)
    third.bot.run_startup()
    third.settle()
    assert len(_decision_posts(sandbox)) == 1
