"""Break-glass end to end over the router every front uses: the sandbox control host over HTTP (its
request log is the ground truth for "sent"), a real SQLite file, the manual clock for the ladder, and the
loud notice through the Slack front's Web API wrapper to the Slack stand-in.

Refused outside its conditions — before the ladder's end with an approver available, after the expiry,
for confirm_completed, by anyone but the requester, for an unmapped console login, while that person has
an unsigned review — and when the notice cannot be posted; otherwise the notice (channel, then a DM to
each eligible approver) precedes the one POST, and the review blocks, then unblocks, the next use.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.sandbox import SandboxHandle, start_sandbox
from tests.breakglass.world import (
    APPROVER,
    CHANNEL,
    EXPIRY,
    LADDER_END,
    OTHER,
    REQUESTER,
    World,
    make_world,
    post_times,
    stopped,
    text,
)
from tests.fixtures.slack import SlackStandIn


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios=None) as handle:
        yield handle


@pytest.fixture
def world(sbx: SandboxHandle, slack_api: SlackStandIn, tmp_path) -> World:
    return make_world(sbx, slack_api, tmp_path / "bg.db")


def _glass(world: World, sid: str) -> str:
    stopped(world.sbx, sid)
    rid = world.request(sid)
    world.clock.advance(LADDER_END + 5)
    return rid


def test_before_the_ladder_end_with_an_approver_available_it_is_refused(world: World) -> None:
    stopped(world.sbx, "ses_bg1")
    rid = world.request("ses_bg1")
    world.clock.advance(LADDER_END - 60)
    refused = world.break_glass(rid)
    assert not refused.ok and "has not run to its end yet" in text(refused), text(refused)
    assert "ends in 1m" in text(refused)
    assert not world.posts("ses_bg1") and not world.notices(rid)


def test_after_the_expiry_it_is_refused(world: World) -> None:
    stopped(world.sbx, "ses_bg2")
    rid = world.request("ses_bg2")
    world.clock.advance(EXPIRY + 1)
    refused = world.break_glass(rid)
    assert not refused.ok and "expired" in text(refused), text(refused)
    assert not world.posts("ses_bg2")


def test_confirm_completed_never_breaks_glass(world: World) -> None:
    world.sbx.admin.create_session(
        {
            "session": {
                "id": "ses_bg3",
                "status": "failed",
                "admission_state": "recovery_required",
                "revision": 7,
                "resumable": False,
                "attention": {"code": "OUTCOME_UNKNOWN", "reason": "interrupt_unanswered"},
                "execution": {"state": "gone", "alive": False},
                "checkpoint": {"id": "ckpt_1", "covers_turn_id": "turn_9"},
            },
            "turns": [
                {"id": "turn_1", "status": "completed"},
                {
                    "id": "turn_9",
                    "status": "outcome_unknown",
                    "terminal_reason": "interrupt_unanswered",
                    "control_id": "ctl_1",
                },
            ],
        }
    )
    rid = world.request(
        "ses_bg3", "confirm_completed", extra='--turn turn_9 --evidence "ci run 42" --effects "pushed branch fix-1"'
    )
    world.clock.advance(LADDER_END + 5)
    refused = world.break_glass(rid)
    assert not refused.ok and "allows no break-glass for `confirm_completed`" in text(refused), text(refused)
    assert not world.posts("ses_bg3")


def test_only_the_requester_breaks_glass_and_never_an_unmapped_console_login(sbx, slack_api, tmp_path) -> None:
    world = make_world(sbx, slack_api, tmp_path / "bg.db", channels=(CHANNEL, "console"))
    rid = _glass(world, "ses_bg4")
    other = world.break_glass(rid, actor=APPROVER)
    assert not other.ok and "who asked for it, may break glass" in text(other), text(other)
    assert f"/recover approve {rid}" in text(other)
    unmapped = world.run(f'/recover break-glass {rid} --incident INC-1 --reason "x"', "console:deploy", "console")
    assert not unmapped.ok and "not mapped to a Slack user id" in text(unmapped), text(unmapped)
    assert not world.posts("ses_bg4") and not world.notices(rid)


def test_the_notice_precedes_the_one_send_and_the_review_blocks_then_unblocks(world: World) -> None:
    rid = _glass(world, "ses_bg5")
    shown = world.break_glass(rid)
    assert shown.ok, text(shown)
    said = text(shown)
    assert "POST /v1/sessions/ses_bg5" in said and '"decision": "close"' in said, said
    assert f"/recover confirm {rid}" in said
    assert not world.posts("ses_bg5") and not world.notices(rid)  # shown, nothing sent nor announced

    sent = world.run(f"/recover confirm {rid}", REQUESTER)
    assert sent.ok, text(sent)
    posts, notices = world.posts("ses_bg5"), world.notices(rid)
    assert len(posts) == 1 and posts[0]["status"] in (200, 201), posts
    assert {where for where, _ in notices} == {CHANNEL, APPROVER}, notices  # the channel and a DM
    assert max(at for _, at in notices) < min(post_times(posts)), (notices, posts)
    steps = [s.step for s in world.router.services.store.steps(session_id="ses_bg5")]
    assert steps.index("break_glass_announced") < steps.index("break_glass") < steps.index("decision_sending")

    # The review is open: in cases, pending and handoff with its age; the requester cannot break glass again.
    for line in ("/recover cases", "/recover pending", "/recover handoff"):
        digest = text(world.run(line, OTHER))
        assert f"`{rid}` break-glass" in digest and "review open for" in digest, (line, digest)
    rid2 = _glass(world, "ses_bg6")
    blocked = world.break_glass(rid2)
    assert not blocked.ok and f"({rid}) is not reviewed yet" in text(blocked), text(blocked)
    own = world.run(f"/recover review {rid} --ok", REQUESTER)
    assert not own.ok and "cannot review your own" in text(own), text(own)
    unmapped = world.run(f"/recover review {rid} --ok", "console:deploy")
    assert not unmapped.ok, text(unmapped)

    signed = world.run(f'/recover review {rid} --concern "should have paged the second tier"', OTHER)
    assert signed.ok, text(signed)
    assert "review open" not in text(world.run("/recover pending", OTHER))
    again = world.break_glass(rid2)
    assert again.ok, text(again)
    assert world.run(f"/recover confirm {rid2}", REQUESTER).ok
    assert len(world.posts("ses_bg6")) == 1


def test_when_the_notice_cannot_be_posted_nothing_is_sent(world: World, slack_api: SlackStandIn) -> None:
    rid = _glass(world, "ses_bg7")
    assert world.break_glass(rid).ok
    slack_api.fail("chat.postMessage", "channel_not_found", times=1)
    refused = world.run(f"/recover confirm {rid}", REQUESTER)
    assert not refused.ok and "could not be posted" in text(refused), text(refused)
    assert not world.posts("ses_bg7")
    steps = [s.step for s in world.router.services.store.steps(session_id="ses_bg7")]
    assert "break_glass_announced" not in steps and "break_glass" not in steps
    assert world.run(f"/recover confirm {rid}", REQUESTER).ok  # Slack answers again: announced, then sent
    assert len(world.posts("ses_bg7")) == 1


def test_a_confirm_without_a_break_glass_keeps_its_meaning(world: World) -> None:
    rid = _glass(world, "ses_bg8")
    refused = world.run(f"/recover confirm {rid}", REQUESTER)
    assert not refused.ok and "needs approval by a second person" in text(refused), text(refused)
    assert not world.posts("ses_bg8")


def test_the_asked_break_glass_survives_a_restart_and_an_uncertain_send_is_finished_with_its_key(
    sbx: SandboxHandle, slack_api: SlackStandIn, tmp_path
) -> None:
    """The waiting break-glass is in the chain (a restarted bot confirms it); a send whose answer was lost
    is finished in the background with the same Idempotency-Key, the gate re-reading the break-glass step."""
    db = tmp_path / "bg.db"
    first = make_world(sbx, slack_api, db)
    rid = _glass(first, "ses_bg9")
    assert first.break_glass(rid).ok
    world = make_world(sbx, slack_api, db)  # a restarted process on the same file
    world.clock.set(first.clock.now())
    sbx.admin.fault("drop_after_commit", "/v1/sessions/ses_bg9/*", method="POST", times=6)
    sent = world.run(f"/recover confirm {rid}", REQUESTER)
    assert "same Idempotency-Key" in text(sent), text(sent)
    decisions = world.router.services.decisions
    assert decisions.wait_background(30)
    assert decisions.requests.get(rid).state == "executed"  # type: ignore[union-attr]
    posts = world.posts("ses_bg9")
    assert len(posts) > 1 and len({p["idempotency_key"] for p in posts}) == 1, posts
    assert len(sbx.admin.effects("ses_bg9")) == 1
    assert max(at for _, at in world.notices(rid)) < min(post_times(posts))
