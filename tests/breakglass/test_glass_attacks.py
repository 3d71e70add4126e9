"""The attacks on break-glass, each tried the way an attacker (or a buggy path) would: a forged
``break_glass`` step in a keyed store's table, and steps recorded through the store's own API that skip
the announcement, come before the ladder's end, or name another request's content. The sandbox's
request log is the ground truth for "sent": the gate sends none of them."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from bot.clock import isoformat, parse_time
from bot.decisions import DecisionRequest
from bot.messages import ListReporter
from bot.sandbox import SandboxHandle, start_sandbox
from bot.vocab import RequestState
from tests.breakglass.world import CHANNEL, LADDER_END, REQUESTER, World, make_world, stopped, text
from tests.fixtures.slack import SlackStandIn

KEY = "glass-attack-key-0123456789"


@pytest.fixture
def sbx() -> Iterator[SandboxHandle]:
    with start_sandbox(scenarios=None) as handle:
        yield handle


def _req(world: World, sid: str) -> DecisionRequest:
    stopped(world.sbx, sid)
    rid = world.request(sid)
    req = world.router.services.decisions.requests.get(rid)
    assert req is not None
    return req


def _record_glass(
    world: World,
    req: DecisionRequest,
    *,
    content_hash: str,
    announce: bool = True,
    reading: dict[str, Any] | None = None,
) -> None:
    """What a path that skips a check would write, through the store's own API (hashes and links valid)."""
    ctx = world.router.services.decisions.ctx
    common = {"request_id": req.id, "content_hash": content_hash, "channel": CHANNEL}
    if announce:
        ctx.record(
            req.session_id, REQUESTER, "break_glass_announced", {**common, "where": CHANNEL, "notified": []}, "posted"
        )
    with ctx.store.write() as db:
        assert ctx.requests.transition(
            db, req.id, (RequestState.REQUESTED,), RequestState.APPROVED, approved_by=REQUESTER, approved_at=ctx.iso()
        )
        ctx.record(
            req.session_id,
            REQUESTER,
            "break_glass",
            {**common, "incident": "INC-1", "reason": "x", "reading": reading or {"others": []}},
            "approved",
            db=db,
        )


def _execute(world: World, req: DecisionRequest) -> str:
    d = world.router.services.decisions
    return text(d.execution.execute(req.id, REQUESTER, ListReporter()))


@pytest.fixture
def world(sbx: SandboxHandle, slack_api: SlackStandIn, tmp_path) -> World:
    return make_world(sbx, slack_api, tmp_path / "bg.db")


def test_a_break_glass_step_without_its_announcement_is_refused(world: World) -> None:
    req = _req(world, "ses_at1")
    world.clock.advance(LADDER_END + 5)
    _record_glass(world, req, content_hash=req.content_hash, announce=False)
    said = _execute(world, req)
    assert "does not authorise" in said and "no announcement (break_glass_announced)" in said, said
    assert not world.posts("ses_at1")


def test_a_break_glass_step_recorded_before_the_ladder_end_is_refused(world: World) -> None:
    req = _req(world, "ses_at2")
    world.clock.advance(LADDER_END - 120)
    _record_glass(world, req, content_hash=req.content_hash)
    said = _execute(world, req)
    assert "has not run to its end yet" in said, said
    assert not world.posts("ses_at2")


def test_a_break_glass_for_another_requests_content_is_refused(world: World) -> None:
    req, other = _req(world, "ses_at3"), _req(world, "ses_at4")
    world.clock.advance(LADDER_END + 5)
    _record_glass(world, req, content_hash=other.content_hash)
    said = _execute(world, req)
    assert "names other content" in said, said
    assert not world.posts("ses_at3") and not world.posts("ses_at4")


def test_the_same_steps_in_order_are_sent(world: World) -> None:
    """The control: announced, after the ladder's end, over its own content: the gate sends it (so the
    refusals above are each for the one thing they change)."""
    req = _req(world, "ses_at5")
    world.clock.advance(LADDER_END + 5)
    _record_glass(world, req, content_hash=req.content_hash)
    said = _execute(world, req)
    assert len(world.posts("ses_at5")) == 1, said


def _forge(conn: sqlite3.Connection, sid: str, step: str, at: str, inputs: dict[str, Any]) -> None:
    last = conn.execute("SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
    conn.execute(
        "INSERT INTO steps (seq, case_id, session_id, actor, at, step, inputs, outcome, detail, prev_hash, hash, v) "
        "VALUES (?, NULL, ?, ?, ?, ?, ?, 'approved', NULL, ?, ?, 2)",
        [last[0] + 1, sid, REQUESTER, at, step, json.dumps(inputs), last[1], hashlib.sha256(step.encode()).hexdigest()],
    )


def test_a_forged_break_glass_in_a_keyed_store_sends_nothing(sbx, slack_api, tmp_path) -> None:
    db = tmp_path / "keyed.db"
    world = make_world(sbx, slack_api, db, audit_key=SecretStr(KEY))
    req = _req(world, "ses_at6")
    when = parse_time(req.created_at)
    assert when is not None
    at = isoformat(when + timedelta(seconds=LADDER_END + 5))
    common = {"request_id": req.id, "content_hash": req.content_hash, "channel": CHANNEL}
    with sqlite3.connect(db, isolation_level=None) as conn:
        _forge(conn, "ses_at6", "break_glass_announced", str(at), {**common, "where": CHANNEL, "notified": []})
        _forge(
            conn,
            "ses_at6",
            "break_glass",
            str(at),
            {**common, "incident": "INC-1", "reason": "x", "reading": {"others": []}},
        )
        conn.execute(
            "UPDATE decision_requests SET state = 'approved', approved_by = ? WHERE id = ?", [REQUESTER, req.id]
        )
    world.run("/recover diagnose ses_at6", "UOTH000003")  # the bot writes on (keyed, linked to the forgery)
    restarted = make_world(sbx, slack_api, db, audit_key=SecretStr(KEY))
    restarted.clock.set(world.clock.now() + timedelta(seconds=LADDER_END + 10))
    said = text(restarted.router.startup(ListReporter()))  # a restart finishes approved requests
    assert "does not match its hash" in said, said
    assert not world.posts("ses_at6")
