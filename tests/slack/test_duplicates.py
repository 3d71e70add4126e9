"""Each Slack delivery is handled once: replays of a signed request, retries, double submits, restarts.

Counted where it matters: decision requests in the store and decision POSTs on the sandbox control host.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

from bot.slack.state import RecentDeliveries
from tests.fixtures.slack import Posted, SlackHarness

SESSION = "ses_restore_transient"
FORM = "application/x-www-form-urlencoded"


def _decision_posts(sandbox) -> list[dict]:
    return [r for r in sandbox.admin.requests(SESSION) if "decision" in str(r.get("path", ""))]


def _requests(h: SlackHarness) -> list:
    return h.composed.core().decisions.requests.find(session_id=SESSION)


def _approval(h: SlackHarness) -> tuple[Posted, str]:
    for root in h.api.roots("CINC"):
        for m in h.api.thread("CINC", root.ts):
            if any(a.startswith("rb:approve:") for a, _ in m.action_ids()):
                found = re.search(r"req_[A-Za-z0-9]+", m.all_text())
                assert found
                return m, found.group(0)
    raise AssertionError("no approval request")


def test_a_replayed_command_and_click_make_one_request_and_one_post(slack_harness, sandbox, tmp_path) -> None:
    db = tmp_path / "dup.db"
    h: SlackHarness = slack_harness.real(sandbox, db_path=db)
    # The same signed command, replayed: at once (concurrently) and after the work finished.
    body = h.send.command_body(f"decide {SESSION} close --reason replayed", user="UALICE")
    ts = int(time.time())
    with ThreadPoolExecutor(3) as pool:
        codes = list(pool.map(lambda _: h.send.post(body, content_type=FORM, timestamp=ts).status_code, range(3)))
    assert codes == [200, 200, 200]
    h.settle()
    assert h.send.post(body, content_type=FORM, timestamp=ts).status_code == 200
    h.settle()
    assert len(_requests(h)) == 1
    # The replays never reached the core (it would have answered "Already requested").
    texts = [m.all_text() for root in h.api.roots("CINC") for m in h.api.thread("CINC", root.ts)]
    assert not any("Already requested" in t for t in texts)
    request, request_id = _approval(h)

    # The approval click, replayed byte for byte (same action_ts): one execution, one POST.
    action_id = next(a for a, _ in request.action_ids() if a.startswith("rb:approve:"))
    click_ts = f"{time.time():.6f}"

    def click() -> int:
        return h.send.block_action(
            action_id,
            request_id,
            user="UBOB",
            channel="CINC",
            message_ts=request.ts,
            thread_ts=request.thread_ts,
            action_ts=click_ts,
        ).status_code

    # block_action builds a fresh trigger_id each time, but the click's identity is action_id + action_ts.
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda _: click(), range(2))) == [200, 200]
    h.settle()
    assert len(_decision_posts(sandbox)) == 1
    assert "executed" in h.api.messages[request.ts].text
    assert h.api.calls_to("chat.postEphemeral") == []  # no "already executed" answer to a replay either

    # A restarted bot on the same store still knows both deliveries.
    h2: SlackHarness = slack_harness.real(sandbox, db_path=db)
    assert h2.send.post(body, content_type=FORM, timestamp=ts).status_code == 200
    assert click() == 200
    h2.settle()
    h.settle()
    assert len(_requests(h2)) == 1
    assert len(_decision_posts(sandbox)) == 1


def test_an_identical_decide_points_to_the_pending_request(slack_harness, sandbox) -> None:
    """A double submit (two deliveries with their own trigger ids): the core makes no second request."""
    h: SlackHarness = slack_harness.real(sandbox)
    for _ in range(2):
        assert h.send.command(f"decide {SESSION} close --reason twice", user="UALICE").status_code == 200
        h.settle()
    (req,) = _requests(h)
    texts = [m.all_text() for root in h.api.roots("CINC") for m in h.api.thread("CINC", root.ts)]
    assert any("Already requested" in t and req.id in t for t in texts), texts
    # A different reason is a different request.
    h.send.command(f"decide {SESSION} close --reason other", user="UALICE")
    h.settle()
    assert len(_requests(h)) == 2
    assert _decision_posts(sandbox) == []


def test_the_in_memory_first_check_is_bounded_and_expires() -> None:
    # The durable check (across restarts) is the inbox's unique key: tests/slack/test_inbox.py.
    recent = RecentDeliveries(ttl=10, max_keys=3)
    assert [recent.first(k, now=0) for k in "abca"] == [True, True, True, False]
    assert recent.first("d", now=1) and recent.first("a", now=1)  # "a" was pushed out by the bound
    assert recent.first("b", now=20)  # and keys expire
    assert recent.first("") and recent.first("")  # no key, no de-duplication
