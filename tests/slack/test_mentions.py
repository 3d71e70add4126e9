"""Outside text never mentions anyone live in Slack: only the bot's own references render.

Checked on what reached the Web API stand-in (every mrkdwn text and the notification text of every
post and update), with the real router over the sandbox and a worker log file.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.slack import SlackHarness

SESSION = "ses_restore_transient"
LIVE = ("<!channel>", "<!here>", "<!everyone>", "<@U0BADBAD>", "<!subteam^S0BAD>")


def _texts(h: SlackHarness) -> list[str]:
    """Every text Slack would parse as mrkdwn in what the bot sent."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "mrkdwn" and isinstance(node.get("text"), str):
                out.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for call in h.api.calls:
        if call.method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            out.append(str(call.params.get("text") or ""))
            walk(call.params.get("blocks"))
    for _, body in h.api.responses:
        out.append(str(body.get("text") or ""))
        walk(body.get("blocks"))
    return out


def test_a_log_line_a_reason_and_a_note_with_mentions_post_no_live_mention(slack_harness, sandbox, tmp_path) -> None:
    logs = tmp_path / "worker.log"
    line = {
        "ts": "2026-11-29T09:59:00Z",
        "level": "error",
        "event": "worker.restore.failed",
        "session_id": SESSION,
        "msg": "restore failed <!channel> ping <@U0BADBAD> & <!here> <!subteam^S0BAD>",
    }
    logs.write_text(json.dumps(line) + "\n")
    h: SlackHarness = slack_harness.real(sandbox, log_files=str(logs))
    h.api.fail("files.getUploadURLExternal", "missing_scope", times=None)  # long output shown inline
    h.send.command(f"diagnose {SESSION}", user="UALICE")
    h.send.command(f"note {SESSION} paging <!channel> and <@U0BADBAD>", user="UALICE")
    h.settle()
    # Form fields reach the core exactly as typed (slash-command text is decoded by Slack first).
    view = {
        "type": "modal",
        "callback_id": "recover_decide",
        "private_metadata": json.dumps({"s": SESSION, "d": "close", "c": "CINC", "t": None}),
    }
    h.send.submit_view(view, {"reason": "tell <!everyone> & <!here> about <@U0BADBAD>"}, user="UALICE")
    h.settle()
    texts = _texts(h)
    joined = "\n".join(texts)
    for live in LIVE:
        assert live not in joined, live
    # The outside text was shown (escaped), not dropped.
    assert "tell &lt;!everyone&gt; &amp; &lt;!here&gt; about &lt;@U0BADBAD&gt;" in joined
    # The bot's own reference to the requester still renders (the approval request names them).
    assert "<@UALICE>" in joined
