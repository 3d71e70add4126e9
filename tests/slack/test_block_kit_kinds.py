"""Every kind of message the bot sends, as Slack receives it, is valid Block Kit within Slack's limits.

The real router over the sandbox control host, the Bolt app over signed HTTP and the Web API stand-in
(tests/fixtures/slack.py). Each block of each message and view the stand-in received is parsed by
``slack_sdk.models.blocks`` and serialised again (``to_dict()`` runs the library's length checks);
then what the library does not check: 50 blocks a message, 100 a view, unique block_ids and
action_ids, 3,000 characters a section. And how they read: an irreversible decision's buttons ask first
(Block Kit's ``confirm``) and are not styled as the safe choice (R5.4); Reject is not the dangerous one;
headers carry no markup; the level is words; times are Slack date tokens with a UTC fallback; each
command is printed once per message.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from slack_sdk.models.blocks import Block

from tests.fixtures.slack import Posted, SlackHarness

DATE_TOKEN = re.compile(r"<!date\^\d+\^\{date_short_pretty\} \{time\}\|\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC>")
RAW_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def _texts(block: dict[str, Any]) -> list[str]:
    """The mrkdwn texts of a block (a header is plain_text: no date token can render there)."""
    out = []
    if isinstance(block.get("text"), dict) and block["type"] != "header":
        out.append(block["text"]["text"])
    out.extend(f["text"] for f in block.get("fields") or [])
    out.extend(e["text"] for e in block.get("elements") or [] if isinstance(e, dict) and isinstance(e.get("text"), str))
    return out


def _check_valid(blocks: list[dict[str, Any]], limit: int, where: str) -> None:
    assert len(blocks) <= limit, f"{where}: {len(blocks)} blocks"
    for block in blocks:
        parsed = Block.parse(block)
        assert parsed is not None, f"{where}: unknown block {block}"
        assert parsed.to_dict()  # the library's own length checks
        if block["type"] == "section":
            assert len(block.get("text", {}).get("text", "")) <= 3000, where
        if block["type"] == "header":
            assert block["text"]["type"] == "plain_text" and "`" not in block["text"]["text"], (where, block)
    block_ids = [b["block_id"] for b in blocks if b.get("block_id")]
    assert len(block_ids) == len(set(block_ids)), f"{where}: duplicate block_id"
    action_ids = [
        e["action_id"]
        for b in blocks
        for e in [*(b.get("elements") or []), *([b["element"]] if isinstance(b.get("element"), dict) else [])]
        if isinstance(e, dict) and e.get("action_id")
    ]
    assert len(action_ids) == len(set(action_ids)), f"{where}: duplicate action_id"


def _check_reads(message: Posted) -> None:
    text = "\n".join(t for b in message.blocks for t in _texts(b))
    assert not re.search(r":\w+: (warn|error|ok|progress)\b", text), text  # the level in words
    # Times outside code spans are Slack date tokens, each with its UTC fallback.
    outside_code = re.sub(r"```.*?```|`[^`]*`", "", re.sub(DATE_TOKEN, "", text), flags=re.S)
    assert not RAW_ISO.search(outside_code), outside_code
    # Each typed command once per message.
    commands = re.findall(r"/recover (?:approve|reject|confirm) \S+?(?=[`\s]|$)", text)
    assert all(n == 1 for n in Counter(commands).values()), commands


def _buttons(message: Posted) -> dict[str, dict[str, Any]]:
    return {e["action_id"].split(":")[1]: e for b in message.blocks if b["type"] == "actions" for e in b["elements"]}


def test_every_kind_of_message_is_valid_block_kit_and_irreversible_clicks_ask_first(
    slack_harness: Any, sandbox: Any
) -> None:
    # Nobody but the requester may approve: break-glass is allowed at once, so its notice is posted.
    h: SlackHarness = slack_harness.real(sandbox, approvers=("SONCALL",))
    h.api.groups["SONCALL"] = ["UALICE"]
    session = "ses_restore_transient"

    commands = [
        f"diagnose {session}",  # diagnose: decision buttons, facts, rules
        f'decide {session} close --reason "the customer asked to end it"',  # two-person, irreversible
        'decide ses_startup_stopped start_fresh --reason "the repository is back"',  # one person, reversible
        "triage",
        'batch decide --sessions ses_restore_damaged,ses_context_gap close --reason "storm"',
        "pending",
        "handoff",
    ]
    for text in commands:
        assert h.send.command(text, user="UALICE").status_code == 200
        h.settle()
    request = next(m for m in h.api.messages.values() if "Approval needed" in m.text and "close" in m.text)
    request_id = re.search(r"req_[A-Za-z0-9.]+", request.text).group(0)  # type: ignore[union-attr]
    assert (
        h.send.command(f'break-glass {request_id} --incident INC-7 --reason "night"', user="UALICE").status_code == 200
    )
    h.settle()
    # The decide form behind a decision button (a modal).
    diag = next(m for m in h.api.messages.values() if any(a.startswith("rb:decide_form:") for a, _ in m.action_ids()))
    h.send.click(diag, "decide_form", user="UALICE", value="|close")
    h.settle()

    # Every message as Slack got it: posts and updates (their latest form), replies to the command's
    # response_url, ephemerals.
    sent: list[Posted] = list(h.api.messages.values())
    sent += [
        Posted("response", url, None, str(body.get("text", "")), body.get("blocks") or [])
        for url, body in h.api.responses
    ]
    sent += [
        Posted("ephemeral", "", None, str(c.params.get("text", "")), c.params.get("blocks") or [])
        for c in h.api.calls_to("chat.postEphemeral")
    ]
    kinds = {
        "approval request": [m for m in sent if "Approval needed" in m.text],
        "diagnose": [m for m in sent if any(a.startswith("rb:decide_form:") for a, _ in m.action_ids())],
        "triage": [m for m in sent if m.text.startswith("Triage")],
        "batch": [m for m in sent if re.search(r"Batch \S+: `close`", m.text)],
        "hand-off": [m for m in sent if m.text.startswith("Hand-off")],
        "break-glass": [m for m in sent if "break-glass" in m.text.lower() and "refused" not in m.text],
    }
    for kind, found in kinds.items():
        assert found, f"no {kind} message among {[m.text[:70] for m in sent]}"

    for m in sent:
        _check_valid(m.blocks, 50, m.text[:60])
        _check_reads(m)
    assert h.api.views
    for view in h.api.views:
        _check_valid(view["blocks"], 100, view.get("title", {}).get("text", "view"))

    # R5.4: an irreversible decision's Approve asks first and is not the safe-looking choice.
    asking = [m for m in [*kinds["approval request"], *kinds["batch"]] if "approve" in _buttons(m)]
    assert {"Approval needed" in m.text for m in asking} == {True, False}  # a request and a batch
    for message in asking:
        buttons = _buttons(message)
        approve, reject = buttons["approve"], buttons["reject"]
        assert approve.get("style") != "primary" and "confirm" in approve, approve
        assert "cannot be undone" in approve["confirm"]["text"]["text"]
        assert approve["confirm"]["style"] == "danger"
        assert reject.get("style") != "danger" and "confirm" not in reject
    # A reversible single-person confirmation needs no dialog.
    confirm = next(m for m in sent if m.text.lstrip("[!] ").startswith("Confirm") and "start_fresh" in m.text)
    assert "confirm" not in _buttons(confirm)["confirm"]
