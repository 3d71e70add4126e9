"""The shift hand-off and the watched case over signed Slack HTTP (the real Bolt app, the Web API
stand-in, the sandbox): a person takes a case from the hand-off post; each shift change posts one
hand-off across a restart; a two-person decision asked from a watched case's post is an ordinary
request that ``pending`` lists (R3.11)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.sandbox import SandboxHandle
from tests.fixtures.triage import clone
from tests.watch.test_watcher import CHANNEL, edited_runbooks


def _shift_runbooks(tmp_path: Path) -> Path:
    # The sandbox clock reads 11:00 in Berlin: a shift changes now, and at 11:30.
    return edited_runbooks(
        tmp_path,
        '# handoff: {times: ["07:00", "19:00"], time_zone: Europe/Berlin}',
        'handoff: {times: ["11:00", "11:30"], time_zone: Europe/Berlin}',
    )


def _handoffs(h: Any) -> list[Any]:
    return [p for p in h.api.roots(CHANNEL) if "Shift change" in p.text]


def test_a_person_takes_a_case_from_the_hand_off_post_and_each_change_posts_once_across_a_restart(
    incident_sandbox: SandboxHandle, slack_harness: Any, tmp_path: Path
) -> None:
    runbooks, db = _shift_runbooks(tmp_path), tmp_path / "recover.db"
    h = slack_harness.real(incident_sandbox, db_path=db, watch_channel=CHANNEL, runbooks_dir=runbooks)
    watcher = h.composed.watchers.get("default")
    assert watcher is not None
    sid = "ses_wh_001"
    incident_sandbox.admin.create_session(clone("healthy", sid))
    incident_sandbox.admin.stop(sid)
    watcher.poll_once()  # the stop's case, then the 11:00 hand-off
    (root,) = _handoffs(h)
    assert "Shift change 11:00 Europe/Berlin: hand-off." in root.text and "1 open case(s)" in root.text
    (entry,) = [p for p in h.api.thread(CHANNEL, root.ts) if f"Case `{sid}`" in p.all_text()]
    assert f"/recover take {sid}" in entry.all_text()  # the typed form is shown beside the button
    assert h.send.click(entry, "run", user="UCAROL", value=f"take {sid}").status_code == 200
    h.settle()
    (case,) = [c for c in watcher.store.list_open_cases() if c.session_id == sid]
    assert case.owner == "UCAROL"  # taken by the person who clicked, through `take` itself
    assert [s.actor for s in watcher.store.steps(session_id=sid) if s.step == "take"] == ["UCAROL"]

    # A restart (a new bot on the same store) at 11:10: the 11:00 hand-off is not posted again.
    watcher.stop()
    incident_sandbox.clock.advance(600)
    again = slack_harness.real(incident_sandbox, db_path=db, watch_channel=CHANNEL, runbooks_dir=runbooks)
    restarted = again.composed.watchers.get("default")
    assert restarted is not None
    restarted.poll_once()
    assert len(_handoffs(h)) == 1
    incident_sandbox.clock.advance(20 * 60)  # 11:30: the next change, once
    restarted.poll_once()
    restarted.poll_once()
    later = [p for p in _handoffs(h) if "Shift change 11:30 Europe/Berlin" in p.text]
    assert len(later) == 1 and len(_handoffs(h)) == 2
    (entry,) = [p for p in h.api.thread(CHANNEL, later[0].ts) if f"Case `{sid}`" in p.all_text()]
    assert "Owner: <@UCAROL>" in entry.all_text() or "UCAROL" in entry.all_text()


def test_a_hand_off_part_slack_refused_is_posted_by_the_take_over_and_nothing_twice(
    incident_sandbox: SandboxHandle, slack_harness: Any, tmp_path: Path
) -> None:
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL, runbooks_dir=_shift_runbooks(tmp_path))
    watcher = h.composed.watchers.get("default")
    assert watcher is not None
    ids = ["ses_wh_f0", "ses_wh_f1"]
    for sid in ids:
        incident_sandbox.admin.create_session(clone("healthy", sid))
        incident_sandbox.admin.stop(sid)
    h.api.fail("chat.postMessage", "internal_error", when=f"Case `{ids[1]}`")  # one part, once
    watcher.poll_once()  # the cases, then the 11:00 hand-off: its second case is refused
    (root,) = _handoffs(h)

    def said(sid: str) -> int:
        return sum(f"Case `{sid}`" in p.all_text() for p in h.api.thread(CHANNEL, root.ts))

    assert [said(sid) for sid in ids] == [1, 0]
    watcher.poll_once()  # the claim is still leased: nobody posts it yet
    assert [said(sid) for sid in ids] == [1, 0]
    incident_sandbox.clock.advance(150)  # past the claim's lease (watch.claim_lease: 2m)
    watcher.poll_once()  # taken over: the head and the first case are found, only the refused one posted
    watcher.poll_once()
    assert len(_handoffs(h)) == 1 and [said(sid) for sid in ids] == [1, 1]
    outcomes = [s.outcome for s in watcher.store.steps_named("handoff")]
    assert outcomes.count("posted_by_watch") == 1 and outcomes.count("taken_over") == 1


def test_a_two_person_decision_asked_from_a_watched_case_is_an_ordinary_request_pending_lists(
    incident_sandbox: SandboxHandle, slack_harness: Any
) -> None:
    h = slack_harness.real(incident_sandbox, watch_channel=CHANNEL)
    watcher = h.composed.watchers.get("default")
    assert watcher is not None
    sid = "ses_wh_002"
    incident_sandbox.admin.create_session(clone("healthy", sid))
    incident_sandbox.admin.stop(sid)
    watcher.poll_once()
    (post,) = [p for p in h.api.roots(CHANNEL) if f"Stopped: {sid} " in p.text]
    # The watch post is diagnose's own answer, with its decision buttons: close needs a second person.
    assert h.send.click(post, "decide_form", user="UALICE", value="|close").status_code == 200
    h.settle()
    view = h.api.calls_to("views.open")[-1].params["view"]
    assert h.send.submit_view(view, {"reason": "the customer cancelled"}, user="UALICE").status_code == 200
    h.settle()
    (request,) = [r for r in h.composed.core().decisions.requests.find(session_id=sid) if r.is_open]
    assert request.decision == "close" and request.requester == "UALICE" and request.policy == "two_person"
    asked = [p for p in h.api.messages.values() if p.channel == CHANNEL and request.id in p.all_text()]
    assert asked and all(p.thread_ts == post.ts for p in asked)  # said in the watched case's thread
    before = len(h.api.responses)
    h.send.command("pending", user="UBOB")
    h.settle()
    listed = "\n".join(json.dumps(body) for _, body in h.api.responses[before:])
    assert request.id in listed and sid in listed and "close" in listed
    # The same approval path: the requester cannot approve it; a second person can.
    h.send.command(f"approve {request.id}", user="UALICE")
    h.settle()
    assert h.composed.core().decisions.requests.get(request.id).state == "requested"
