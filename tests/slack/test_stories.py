"""Whole stories in Slack with the real router over the sandbox control host.

diagnose → decide (button → modal) → the requester cannot approve → a second person (a member of the
approvers' user group, read through usergroups.users.list) approves → the approval request is updated
in place and the verification lands in the case's thread. R3.9, R3.10, R3.11, R5.1.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.fixtures.slack import Posted, SlackHarness

STORIES = [
    # session, decision, needs turn/evidence
    ("ses_restore_transient", "close", False),
    ("ses_unknown_covered", "confirm_completed", True),
    ("ses_unknown_ckpt_unavailable", "abandon", True),
]


def _turn(message: Posted) -> str:
    m = re.search(r"--turn (turn_[A-Za-z0-9_]+)", message.all_text())
    assert m, message.all_text()
    return m.group(1)


@pytest.mark.parametrize(("session", "decision", "with_turn"), STORIES)
def test_story_diagnose_decide_second_person_approves_verified_in_thread(
    slack_harness, sandbox, session: str, decision: str, with_turn: bool
) -> None:
    h: SlackHarness = slack_harness.real(sandbox, approvers=("SONCALL",))
    h.api.groups["SONCALL"] = ["UBOB"]

    assert h.send.command(f"diagnose {session}", user="UALICE").status_code == 200
    h.settle()
    (root,) = h.api.roots("CINC")
    assert session in root.text
    diag = h.api.thread("CINC", root.ts)[-1]
    assert any(a.startswith("rb:decide_form:") and v == f"{session}|{decision}" for a, v in diag.action_ids())
    assert re.search(r"R\d\.\d+", diag.all_text())  # the rules cited

    h.send.click(diag, "decide_form", user="UALICE", value=f"|{decision}")
    h.settle()
    view = h.api.calls_to("views.open")[-1].params["view"]
    values = {"reason": f"story {decision}"}
    if with_turn:
        values |= {
            "turn": _turn(diag),
            "evidence": "ticket-4711",
            "effects": "checked: no external pushes or calls",
        }
    assert h.send.submit_view(view, values, user="UALICE").status_code == 200
    h.settle()

    thread = h.api.thread("CINC", root.ts)
    request = next(m for m in thread if m.action_ids() and any(a.startswith("rb:approve:") for a, _ in m.action_ids()))
    request_id = re.search(r"req_[A-Za-z0-9]+", request.all_text()).group(0)
    text = request.all_text()
    assert f"/recover approve {request_id}" in text and "<!subteam^SONCALL>" in text

    # The requester cannot approve: a private refusal, the request unchanged, nothing sent.
    h.send.click(request, "approve", user="UALICE")
    h.settle()
    assert h.api.calls_to("chat.postEphemeral")
    assert h.api.messages[request.ts].updates == 0
    assert [r for r in sandbox.admin.requests(session) if "decision" in str(r.get("path", ""))] == []

    # A member of the approvers' group approves (a double click): executed once, verified in the thread.
    h.send.click(request, "approve", user="UBOB")
    h.send.click(request, "approve", user="UBOB")
    h.settle()
    assert h.api.calls_to("usergroups.users.list")
    updated = h.api.messages[request.ts]
    assert updated.updates >= 1 and "UBOB" in updated.text and "executed" in updated.text
    thread = h.api.thread("CINC", root.ts)
    assert any("Verified" in m.text for m in thread), [m.text[:80] for m in thread]
    assert len(h.api.roots("CINC")) == 1  # every step in the one thread
    decisions = [r for r in sandbox.admin.requests(session) if "decision" in str(r.get("path", ""))]
    assert len(decisions) == 1, decisions


def test_ack_is_fast_while_the_control_host_takes_10s_and_20_commands_arrive(slack_harness, sandbox) -> None:
    h: SlackHarness = slack_harness.real(sandbox, work_threads=20)
    sandbox.admin.fault("latency", "*", seconds=10, times=None)
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> tuple[int, float]:
        t0 = time.monotonic()
        r = h.send.command("diagnose ses_restore_transient", user=f"UUSER{i}")
        return r.status_code, time.monotonic() - t0

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    assert all(s == 200 for s, _ in results)
    assert max(t for _, t in results) < 3.0, results
    sandbox.admin.clear_faults()
    h.settle(180)
