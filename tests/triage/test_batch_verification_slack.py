"""A batch's verification through the real Slack app: the batch's one message is edited in place while
its members verify, one final message says how many recovered, and no member gets a post of its own.

Real parts: the Bolt app over HTTP with signed requests, the Slack Web API stand-in, the sandbox
control host over HTTP, real SQLite files; the sweep is the app's own ``sweep_expired``.
"""

from __future__ import annotations

from typing import Any

from bot.sandbox import SandboxHandle
from tests.fixtures.triage import make_incident

N = 5


def test_the_batch_message_is_edited_in_place_as_members_recover_with_one_final_post(
    incident_sandbox: SandboxHandle, slack_harness: Any
) -> None:
    made = make_incident(incident_sandbox, {"restore_stopped_transient": N})["restore_stopped_transient"]
    h = slack_harness.real(incident_sandbox)
    r = h.send.command(f'batch decide --sessions {",".join(made)} retry_restore --reason "store back" --yes')
    assert r.status_code == 200
    h.settle(120)
    roots = h.api.roots("CINC")
    assert len(roots) == 1 and "Batch" in roots[0].text, [m.text for m in roots]  # the batch's thread only
    thread = h.api.thread("CINC", roots[0].ts)
    progress = [m for m in thread if "finished" in m.all_text() and "verifying" in m.all_text()]
    assert len(progress) == 1, [m.all_text() for m in thread]
    batch_msg = progress[0]
    assert f"verifying {N}" in batch_msg.all_text()
    posted_before = len(h.api.calls_to("chat.postMessage"))

    incident_sandbox.admin.fail_restore(made[0], "checkpoint_unavailable")
    for sid in made[1:]:
        incident_sandbox.admin.worker_ready(sid)
    h.bot.sweep_expired()
    h.settle(60)
    edited = h.api.messages[batch_msg.ts]
    assert edited.updates >= 1 and f"recovered {N - 1}" in edited.all_text() and "failing again 1" in edited.all_text()
    assert made[0] in edited.all_text()
    new_posts = h.api.calls_to("chat.postMessage")[posted_before:]
    assert len(new_posts) == 1, [c.params.get("text") for c in new_posts]  # the one final message
    assert new_posts[0].params.get("thread_ts") == roots[0].ts
    final = str(new_posts[0].params.get("text", "")) + str(new_posts[0].params.get("blocks", ""))
    assert f"{N - 1}/{N} recovered" in final and made[0] in final
    assert not any(sid in final for sid in made[1:])
    assert len(h.api.roots("CINC")) == 1  # no top-level post per member
    h.bot.sweep_expired()
    h.settle(60)
    assert len(h.api.calls_to("chat.postMessage")) == posted_before + 1  # said once
