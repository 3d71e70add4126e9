"""Over signed Slack HTTP: a button from one installation's channel, replayed in another installation's
channel, is refused; an approval never crosses installations. The real Bolt app, the real fleet router
over two sandboxes with identical session ids, the Slack Web API stand-in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.app.fleet_router import FleetRouter
from bot.vocab import RequestState
from tests.installations.conftest import posts

SESSION = "ses_unknown_ckpt_unavailable"
TURN = "turn_uc3"
DECIDE = (
    f'decide {SESSION} abandon --turn {TURN} --effects "wrote nothing outside" --reason "engine stopped, no checkpoint"'
)


def _approval(h: Any, channel: str) -> Any:
    for root in h.api.roots(channel):
        for message in [root, *h.api.thread(channel, root.ts)]:
            if any(a.startswith("rb:approve:") for a, _ in message.action_ids()):
                return message
    raise AssertionError(f"no approval request posted in {channel}")


def test_a_replayed_approve_button_in_another_installations_channel_is_refused(
    slack_harness: Any, make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., Any]
) -> None:
    router = make_fleet("eu-1", "us-1")
    h = slack_harness(router)
    h.send.command(DECIDE, user="UALICE", channel="C0EU1")
    h.settle()
    request_message = _approval(h, "C0EU1")
    assert "[eu-1]" in request_message.all_text()  # the request names its installation
    action_id, value = next((a, v) for a, v in request_message.action_ids() if a.startswith("rb:approve:"))
    assert value.endswith("@eu-1")
    eu, us = sandboxes("eu-1"), sandboxes("us-1")
    (request,) = router.fleet.core("eu-1").decisions.requests.find(states=(RequestState.REQUESTED,))

    # The same payload, signed as Slack signs it, clicked in us-1's channel by a valid approver.
    r = h.send.block_action(action_id, value, user="UBOB", channel="C0US1", message_ts=request_message.ts)
    assert r.status_code == 200
    h.settle()
    said = " ".join(str(c.params) for c in h.api.calls_to("chat.postEphemeral") + h.api.calls_to("chat.postMessage"))
    assert "belongs to installation" in said and "eu-1" in said and "us-1" in said
    assert router.fleet.core("eu-1").decisions.requests.get(request.id).state == RequestState.REQUESTED
    assert posts(eu) == [] and posts(us) == []  # nothing sent anywhere
    assert router.fleet.core("us-1").decisions.requests.find(states=tuple(RequestState)) == []

    # Typed in us-1's channel, the approval does not cross either (us-1's core knows no such request).
    h.send.command(f"approve {request.id}", user="UBOB", channel="C0US1")
    h.settle()
    assert router.fleet.core("eu-1").decisions.requests.get(request.id).state == RequestState.REQUESTED
    assert posts(eu) == [] and posts(us) == []

    # In its own channel the same click approves, and only eu-1's control host receives the decision.
    h.send.block_action(action_id, value, user="UBOB", channel="C0EU1", message_ts=request_message.ts)
    h.settle()
    assert router.fleet.core("eu-1").decisions.requests.get(request.id).state != RequestState.REQUESTED
    assert [p for p in posts(eu) if SESSION in p["path"]] and posts(us) == []


def test_app_home_groups_by_installation(slack_harness: Any, make_fleet: Callable[..., FleetRouter]) -> None:
    router = make_fleet("eu-1", "us-1")
    h = slack_harness(router)
    h.send.command(DECIDE, user="UALICE", channel="C0EU1")
    h.settle()
    pending = router.pending_approvals_view()
    assert [m.headline for m in pending if m.kind == "installation_header"] == [
        "Installation eu-1",
        "Installation us-1",
    ]
    (eu_request,) = [m for m in pending if m.kind == "approval_request_summary"]
    assert pending.index(eu_request) == 1
    handoff = router.handle_text("/recover handoff", actor="UALICE", channel="C0NONE", reporter=_Null())
    leads = [m.headline for m in handoff.messages if m.headline.startswith("[")]
    assert any(x.startswith("[eu-1]") for x in leads) and any(x.startswith("[us-1]") for x in leads)


class _Null:
    def progress(self, message: Any) -> None:
        return None

    def post(self, message: Any) -> None:
        return None


def test_a_decide_form_from_one_installation_submitted_in_anothers_channel_is_refused(
    make_fleet: Callable[..., FleetRouter], sandboxes: Callable[..., Any]
) -> None:
    """The decide form keeps the button's installation with its session: the same session id exists
    in every installation, so without it a form opened from eu-1's message would decide on us-1's."""
    router = make_fleet("eu-1", "us-1")
    diagnosis = router.handle_text(
        "/recover diagnose ses_restore_transient", actor="UALICE", channel="C0EU1", reporter=_Null()
    )
    value = next(b.value for m in diagnosis.messages for b in m.buttons if b.action == "decide_form")
    assert value.endswith("@eu-1")
    choice = router.decision_choice(value)
    form = {"session_id": choice.session_id, "decision": choice.decision, "reason": "store back", "yes": "1"}
    refused = router.handle_action(
        "decide", choice.encode(), actor="UALICE", channel="C0US1", reporter=_Null(), form=form
    )
    assert not refused.ok and "belongs to installation `eu-1`" in refused.messages[0].headline
    assert posts(sandboxes("us-1")) == [] and posts(sandboxes("eu-1")) == []
    done = router.handle_action("decide", choice.encode(), actor="UALICE", channel="C0EU1", reporter=_Null(), form=form)
    assert done.ok and done.messages[0].headline.startswith("[eu-1] ")
    assert posts(sandboxes("eu-1")) and posts(sandboxes("us-1")) == []


def test_the_same_session_id_of_two_installations_gets_two_threads(
    slack_harness: Any, make_fleet: Callable[..., FleetRouter]
) -> None:
    """In a channel bound to none, with --install: eu-1's ses_… and us-1's ses_… are two cases, so two
    threads, each root naming its installation (never one installation's answer in the other's thread)."""
    router = make_fleet("eu-1", "us-1")
    h = slack_harness(router)
    for name in ("eu-1", "us-1", "eu-1"):
        h.send.command(f"diagnose {SESSION} --install {name}", user="UALICE", channel="C0NONE")
        h.settle()
    roots = h.api.roots("C0NONE")
    assert len(roots) == 2, [r.text for r in roots]
    named = {
        name for name in ("eu-1", "us-1") for r in roots if f"[{name}] Recovery case for session `{SESSION}`" in r.text
    }
    assert named == {"eu-1", "us-1"} and not any("@" in r.text.split("started by")[0] for r in roots)  # no inner key
    for root in roots:
        name = "eu-1" if "[eu-1]" in root.all_text() else "us-1"
        replies = h.api.thread("C0NONE", root.ts)[1:]
        assert replies and all(f"[{name}]" in m.all_text() for m in replies if m.all_text().startswith("["))
        assert not any(f"[{'us-1' if name == 'eu-1' else 'eu-1'}]" in m.all_text() for m in replies)
