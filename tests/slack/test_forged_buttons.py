"""A forged decision button over the signed Slack HTTP path: refused in one private line, no side effect.

Slack signs what it forwards, not what a button carries: a click's value is outside input. The real
router over the sandbox control host; the requests are signed as Slack signs them.
"""

from __future__ import annotations

import pytest

from bot.store.binding import BOUND
from tests.fixtures.slack import SlackHarness

SESSION = "ses_restore_transient"
FORGED = [
    (f"{SESSION}|close|abandon", "one session and one decision"),  # an extra separator
    (f"{SESSION}|", "is not a decision of the runbook"),
    (f"{SESSION}|drop_all_sessions", "'drop_all_sessions' is not a decision of the runbook"),
    ("../../v1/admin|close", "is not a valid session id"),
    ("<!channel> ses|close", "is not a valid session id"),
    ("", "one session and one decision"),
]


@pytest.mark.parametrize(("value", "why"), FORGED)
def test_a_forged_decide_button_is_refused_privately_and_changes_nothing(
    slack_harness, sandbox, value: str, why: str
) -> None:
    h: SlackHarness = slack_harness.real(sandbox)
    h.send.command(f"diagnose {SESSION}", user="UALICE")
    h.settle()
    (root,) = h.api.roots("CINC")
    diag = h.api.thread("CINC", root.ts)[-1]
    action_id = next(a for a, _ in diag.action_ids() if a.startswith("rb:decide_form:"))
    store = h.composed.core().store
    steps_before = len(store.steps())
    posted_before = len(h.api.messages)

    r = h.send.block_action(
        action_id, value, user="UMALLORY", channel="CINC", message_ts=diag.ts, thread_ts=diag.thread_ts
    )
    assert r.status_code == 200  # acked: Slack shows no error, the refusal follows privately
    h.settle()

    assert h.api.calls_to("views.open") == []  # no form opened for a choice the bot never offered
    (refusal,) = h.api.calls_to("chat.postEphemeral")
    assert refusal.params["user"] == "UMALLORY" and refusal.params["channel"] == "CINC"
    text = str(refusal.params.get("text", "")) + str(refusal.params.get("blocks", ""))
    assert "Refused a decision button" in text and why.replace("'", "") in text.replace("'", "")
    assert "nothing was done" in text
    assert "<!channel>" not in text  # the forged value is shown escaped, never as a live mention
    # No side effect: nothing recorded, nothing posted in the channel, nothing sent to the control host.
    assert len(store.steps()) == steps_before
    assert len(h.api.messages) == posted_before
    assert [q for q in sandbox.admin.requests() if q.get("method") == "POST"] == []

    # The genuine button on the same message still opens the form (the refusal above is the value's).
    h.send.click(diag, "decide_form", user="UALICE", value=f"{SESSION}|close")
    h.settle()
    (opened,) = h.api.calls_to("views.open")
    assert f"{SESSION}" in str(opened.params["view"]) and "close" in str(opened.params["view"])


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ({"s": f"{SESSION}|close", "d": "close", "c": "CINC", "t": None}, "Not a valid session id"),
        ({"s": SESSION, "d": "drop_all_sessions", "c": "CINC", "t": None}, "unknown decision 'drop_all_sessions'"),
        ({"s": "../../v1/admin", "d": "close", "c": "CINC", "t": None}, "Not a valid session id"),
    ],
)
def test_a_forged_decision_form_sends_nothing(slack_harness, sandbox, metadata: dict, why: str) -> None:
    """The form's private metadata comes back from outside too: the router refuses what it carries."""
    import json

    h: SlackHarness = slack_harness.real(sandbox)
    view = {"type": "modal", "callback_id": "recover_decide", "private_metadata": json.dumps(metadata)}
    r = h.send.submit_view(view, {"reason": "forged", "turn": "turn_1", "effects": "none"}, user="UMALLORY")
    assert r.status_code == 200
    h.settle()
    refusals = h.api.calls_to("chat.postEphemeral")
    assert refusals and all(c.params["user"] == "UMALLORY" for c in refusals), refusals
    assert any(why in str(c.params.get("text")) for c in refusals), [c.params.get("text") for c in refusals]
    assert [q for q in sandbox.admin.requests() if q.get("method") == "POST"] == []
    assert all(m.channel != "CINC" or "requested" not in m.text for m in h.api.messages.values())


@pytest.mark.parametrize("metadata", ["not json", "[]", '{"s": 1, "d": "close"}', '{"d": "close"}', ""])
def test_a_decision_form_the_bot_did_not_open_is_refused_in_place(slack_harness, sandbox, metadata: str) -> None:
    """Malformed private metadata: one line in place of the form (not an HTTP 500), nothing queued."""
    h: SlackHarness = slack_harness.real(sandbox)
    store = h.composed.core().store
    view = {"type": "modal", "callback_id": "recover_decide", "private_metadata": metadata}
    r = h.send.submit_view(view, {"reason": "forged"}, user="UMALLORY")
    assert r.status_code == 200 and r.json()["response_action"] == "update"
    shown = str(r.json()["view"])
    assert "Refused a decision form this bot did not open; nothing was done" in shown
    h.settle()
    # Nothing but the store's binding, recorded at start.
    assert [s.step for s in store.steps()] == [BOUND] and h.api.calls_to("chat.postEphemeral") == []
    assert [q for q in sandbox.admin.requests() if q.get("method") == "POST"] == []
