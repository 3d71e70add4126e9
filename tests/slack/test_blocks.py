"""Block rendering: valid for Slack by construction, whatever the core puts in a message."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.messages import Attachment, Button, Mention, Message, pieces, plain, ref
from bot.slack import blocks as kit

text = st.text(max_size=400)
buttons = st.builds(
    Button,
    label=st.text(min_size=1, max_size=120),
    action=st.sampled_from(["approve", "reject", "decide_form", "confirm", "reconcile_reviewed"]),
    value=st.text(max_size=2500),
    command=st.none() | st.text(max_size=200),
)
messages = st.builds(
    Message,
    headline=st.text(max_size=300),
    level=st.sampled_from(["info", "ok", "warn", "error", "progress"]),
    lines=st.lists(st.text(max_size=4000), max_size=80),
    facts=st.lists(st.tuples(st.text(max_size=100), st.text(max_size=2500)), max_size=40),
    rules=st.lists(st.text(max_size=10), max_size=20),
    buttons=st.lists(buttons, max_size=30),
    attachment=st.none()
    | st.builds(Attachment, filename=st.text(min_size=1, max_size=40), text=st.text(max_size=9000)),
    mentions=st.lists(st.sampled_from(["UBOB", "SONCALL", "alice"]), max_size=3),
)


@given(messages)
def test_any_message_renders_within_slack_limits(message: Message) -> None:
    payload = kit.message_payload(message)
    blocks = payload["blocks"]
    assert len(blocks) <= kit.MAX_MESSAGE_BLOCKS
    ids = [b["block_id"] for b in blocks]
    assert len(ids) == len(set(ids))
    actions = [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert len(actions) == len(set(actions))  # unique across the message, not only per block
    assert len(payload["text"]) <= kit.NOTIFICATION_TEXT
    # Every button survives (the buttons are never what gets dropped).
    assert len(actions) == len(message.buttons)
    assert all(kit.parse_action_id(a) in {b.action for b in message.buttons} for a in actions)


def test_many_lines_are_cut_with_a_note_and_buttons_kept() -> None:
    message = Message(
        headline="h",
        lines=["x" * 2999] * 80,
        buttons=[Button("Approve", "approve", "r1", command="/recover approve r1")],
    )
    blocks = kit.message_payload(message)["blocks"]
    assert len(blocks) == kit.MAX_MESSAGE_BLOCKS
    dump = json.dumps(blocks)
    assert "more blocks not shown" in dump and "/recover approve r1" in dump and "rb:approve:0" in dump


def test_check_blocks_catches_what_slack_sdk_does_not() -> None:
    section = {"type": "section", "block_id": "a", "text": {"type": "mrkdwn", "text": "x"}}
    with pytest.raises(kit.BlockError, match="duplicate block_id"):
        kit.check_blocks([section, dict(section)])
    with pytest.raises(kit.BlockError, match="51 blocks"):
        kit.check_blocks([{"type": "divider"}] * 51)
    actions = {
        "type": "actions",
        "elements": [
            {"type": "button", "action_id": "same", "text": {"type": "plain_text", "text": "a"}},
            {"type": "button", "action_id": "same", "text": {"type": "plain_text", "text": "b"}},
        ],
    }
    with pytest.raises(kit.BlockError, match="duplicate action_id"):
        kit.check_blocks([actions])


def test_mentions_and_escaping() -> None:
    assert kit.mention("U123") == "<@U123>" and kit.mention("S9") == "<!subteam^S9>" and kit.mention("bob") == "@bob"
    # Outside text is escaped completely, Slack's reference forms too; only the core's ref() renders.
    assert kit.escape("a<b> & <@U1> <!subteam^S1>") == "a&lt;b&gt; &amp; &lt;@U1&gt; &lt;!subteam^S1&gt;"
    assert kit.escape(f"by {ref('U1')} in {ref('C0123', '#')}, <!channel>") == "by <@U1> in <#C0123>, &lt;!channel&gt;"
    assert kit.escape(f"by {ref('alice')}") == "by @alice"
    forged = ref("U1").replace(ref("U1")[1:13], "0" * 12)  # a marker with another process's key
    assert kit.escape(forged) == "@U1"
    # The core's text carries structured mentions; each front renders them (Slack above, readable here).
    text = f"by {ref('U1')} in {ref('C0123', '#')}: <@U2>"
    assert pieces(text) == ["by ", Mention("@", "U1"), " in ", Mention("#", "C0123"), ": <@U2>"]
    assert plain(text) == "by @U1 in #C0123: <@U2>" and kit.plain_refs(text) == plain(text)
    assert pieces(forged) == ["@U1"]  # another process's marker is outside text, never a Mention


def test_attachment_preview_is_truncated_and_says_where_the_rest_is() -> None:
    att = Attachment("dryrun.log", "\n".join(f"row {i}" for i in range(5000)))
    shown = kit.attachment_preview(att, uploaded=False)
    assert len(shown) <= kit.SECTION_TEXT and "Showing the first" in shown and "row 0" in shown
    assert "attached in this thread" in kit.attachment_preview(att, uploaded=True)


def _inputs(view: dict) -> dict[str, bool]:
    return {b["block_id"]: b.get("optional", False) for b in view["blocks"] if b["type"] == "input"}


def test_decide_modal_asks_only_for_what_the_decision_uses(runbooks) -> None:
    from bot.runbook.usage import decide_form

    confirm = decide_form(runbooks, "confirm_completed")
    view = kit.decide_modal(kit.DecideForm("ses_1", "confirm_completed", "C1", "1.0"), confirm).to_dict()
    # From the runbook's flags: every one required for confirm_completed (R3.10, R3.11).
    assert _inputs(view) == {"turn": False, "evidence": False, "effects": False, "reason": False}
    assert kit.DecideForm.from_metadata(view["private_metadata"]) == kit.DecideForm(
        "ses_1", "confirm_completed", "C1", "1.0"
    )
    # close and retry_restore use the reason only: no turn, evidence or effects inputs to wonder about.
    for decision in ("close", "retry_restore", "start_fresh"):
        fields = decide_form(runbooks, decision)
        assert _inputs(kit.decide_modal(kit.DecideForm("ses_1", decision), fields).to_dict()) == {"reason": False}
    abandon = decide_form(runbooks, "abandon")
    assert [f.name for f in abandon] == ["turn", "effects", "reason"]


def test_decide_form_refuses_an_empty_reason_in_place(runbooks) -> None:
    from bot.runbook.usage import decide_form

    close = decide_form(runbooks, "close")
    assert set(kit.decide_form_errors(close, {})) == {"reason"}
    assert set(kit.decide_form_errors(close, {"reason": "   "})) == {"reason"}
    assert kit.decide_form_errors(close, {"reason": "store gone for good"}) == {}
    abandon = decide_form(runbooks, "abandon")
    assert set(kit.decide_form_errors(abandon, {"reason": "r"})) == {"turn", "effects"}
    # A turn id the runbook's id pattern refuses is refused in the form too, before anything is sent.
    errors = kit.decide_form_errors(abandon, {"reason": "r", "turn": "not an id!", "effects": "none"})
    assert set(errors) == {"turn"}
    # Only the fields the form asked for are read back.
    state = {"reason": {"value": {"value": " why "}}, "evidence": {"value": {"value": "smuggled"}}}
    assert kit.read_decide_state(state, decide_form(runbooks, "close")) == {"reason": "why"}


def test_home_view_buttons_unique_across_messages() -> None:
    approvals = [Message(headline=f"req {i}", buttons=[Button("Approve", "approve", f"r{i}")]) for i in range(5)]
    view = kit.home_view([Message(headline="case 1")], approvals).to_dict()
    ids = [e["action_id"] for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert len(ids) == 5 == len(set(ids))
