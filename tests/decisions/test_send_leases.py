"""A send in flight is held by its lease (``send:<key>``), on both engines: two bots' decision cores on one
store and one sandbox control host over HTTP. A live send is not replayed by the other bot's periodic
job; a send whose holder's lease ran out is finished by the other bot with the same key, and the deposed
holder's late answer is recorded nowhere (one executed step, one effect at the host)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.clock import ManualClock
from bot.decisions import lease_limit
from bot.messages import ListReporter, NullReporter, Reply
from bot.settings import load_settings
from tests.decisions.test_processes import _killed_at
from tests.fixtures.composing import composed
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER, DecisionEnv
from tests.fixtures.runbook import runbooks_with_limits
from tests.fixtures.waiting import eventually

LATE = 3.0  # seconds the host takes to answer bot A's POST (real time, before it applies it)


@pytest.fixture
def two_bots(decision_sandbox, store_target: str | Path, decision_runbooks):
    """Bot A and bot B: each its own store objects and client on the one store, one clock (the store's)."""
    clock = ManualClock()
    a = DecisionEnv(decision_sandbox, store_target, clock, decision_runbooks)  # type: ignore[arg-type]
    b = DecisionEnv(decision_sandbox, store_target, clock, decision_runbooks)  # type: ignore[arg-type]
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _requested(env: DecisionEnv, svc, sid: str) -> str:
    env.outcome_unknown(sid, covered=True)
    reply = svc.decide(
        REQUESTER,
        CHANNEL,
        sid,
        "abandon",
        turn="turn_9",
        effects="none outside",
        reason="hung",
        reporter=NullReporter(),
    )
    rid = reply.messages[0].ref
    assert rid, reply.messages[0].plain_text()
    return rid


def _approve_in_flight(env: DecisionEnv, svc, sid: str, rid: str) -> tuple[threading.Thread, list[Reply]]:
    """Bot A approves; the host answers its POST only after LATE seconds. Returns once the POST left
    (its attempt is counted just before it goes), with A waiting for the answer."""
    env.sandbox.admin.fault("latency", f"/v1/sessions/{sid}/recovery-decisions", method="POST", seconds=LATE, times=1)
    replies: list[Reply] = []
    worker = threading.Thread(target=lambda: replies.append(svc.approve(APPROVER, CHANNEL, rid, NullReporter())))
    worker.start()

    def posting() -> bool:
        req = svc.requests.get(rid)
        record = env.store.get_request(req.idem_key) if req.idem_key else None
        return record is not None and record.attempts >= 1

    eventually(posting, 30, "bot A's POST on its way")
    return worker, replies


def _steps(env: DecisionEnv, sid: str, name: str) -> list:
    return [s for s in env.store.steps(session_id=sid) if s.step == name]


def test_a_live_send_is_not_replayed_by_the_other_bots_periodic_job(two_bots):
    a, b = two_bots
    bot_a, bot_b = a.service(), b.service()
    rid = _requested(a, bot_a, "ses_sl1")
    worker, replies = _approve_in_flight(a, bot_a, "ses_sl1", rid)
    # A's lease runs (the store's clock has not passed it): B's periodic job leaves the send alone.
    swept = bot_b.sweep(ListReporter())
    assert swept.messages == [], [m.plain_text() for m in swept.messages]
    worker.join(30)
    assert replies and replies[0].ok, [m.plain_text() for m in replies[0].messages]
    assert bot_b.requests.get(rid).state == "executed"
    assert len(a.posts("ses_sl1")) == 1 and len(a.effects("ses_sl1")) == 1
    # The send's lease was released with the answer: the next round finds nothing either.
    assert bot_b.sweep(ListReporter()).messages == []
    assert len(a.posts("ses_sl1")) == 1


def test_a_deposed_holders_late_answer_is_recorded_nowhere_and_the_new_holders_result_stands(two_bots):
    a, b = two_bots
    bot_a, bot_b = a.service(), b.service()
    rid = _requested(a, bot_a, "ses_sl2")
    worker, replies = _approve_in_flight(a, bot_a, "ses_sl2", rid)
    key = bot_a.requests.get(rid).idem_key
    # A is paused past its lease (the store's clock passes it while its POST waits for the host).
    a.clock.advance(a.runbooks.limit("send_lease") + 1)
    swept = bot_b.sweep(ListReporter())
    said = "\n".join(m.plain_text() for m in swept.messages)
    assert bot_b.requests.get(rid).state == "executed", said
    answered = b.store.get_request(key)
    assert answered is not None and not answered.pending
    taken = b.store.leases.get(f"send:{key}")
    assert taken is not None and taken.token == 2 and taken.holder == bot_b.ctx.sends.holder
    a.clock.advance(5)  # anything A recorded now would carry a later time
    worker.join(30)
    # A's late answer (the host's replay of the first answer to that key) is recorded nowhere.
    assert replies, "bot A's approval never returned"
    said_a = "\n".join(m.plain_text() for m in replies[0].messages)
    assert "another bot took its send over" in said_a, said_a
    assert b.store.get_request(key) == answered  # the idempotency record as B recorded it
    [executed] = _steps(b, "ses_sl2", "decision_executed")
    assert executed.actor == "recover-bot"  # B's periodic job, not A's approver
    assert _steps(b, "ses_sl2", "decision_uncertain") == []
    # Both POSTs carried the one key; the host applied the decision once.
    posts = a.posts("ses_sl2")
    assert len(posts) == 2 and {p["idempotency_key"] for p in posts} == {key}
    assert len(a.effects("ses_sl2")) == 1


@pytest.mark.subprocess
def test_two_composed_cores_sweeping_at_once_finish_each_left_request_exactly_once(
    two_bots, store_target: str | Path, tmp_path: Path
):
    """Three requests left by bot processes SIGKILLed at three points — after the approval, after the
    stored key and before the POST, after the POST reached the host — then two bots composed on the
    store run their periodic jobs at once: each request is finished once (one effect; the one re-send
    after the host applied it carries the same key), named by one sweep only (``replay:default``)."""
    a, _ = two_bots
    svc = a.service()
    left = {
        "after_approval": ("ses_sw1", "approved", 1),
        "before_post": ("ses_sw2", "begun", 1),
        "after_post": ("ses_sw3", "posted", 2),
    }
    rids: dict[str, str] = {}
    for hang, (sid, marker, _) in left.items():
        rids[sid] = _requested(a, svc, sid)
        work = tmp_path / hang
        work.mkdir()
        _killed_at(a, work, "approve", rids[sid], APPROVER, hang=hang, marker=marker)  # its leases ran out
    states = {rid: svc.requests.get(rid).state for rid in rids.values()}
    assert sorted(states.values()) == ["approved", "sending", "sending"], states
    on_store: dict[str, object] = (
        {"db_url": SecretStr(store_target), "db_path": tmp_path / "unused.db"}
        if isinstance(store_target, str)
        else {"db_path": store_target}
    )
    settings = load_settings({}, dotenv=None).model_copy(
        update={
            "runbooks_dir": runbooks_with_limits(tmp_path / "runbooks", replay_every="0.1s"),
            "channels": (CHANNEL,),
            **on_store,
        }
    )
    bots = [composed(settings, sandbox=a.sandbox, clock=a.clock, startup=False) for _ in range(2)]
    for bot in bots:
        bot.start()
    try:
        eventually(
            lambda: all(svc.requests.get(rid).state == "executed" for rid in rids.values()),
            60,
            "every left request executed",
        )
    finally:
        for bot in bots:
            bot.stop()
    # A round records what it finished after finishing it: every round ends first.
    eventually(lambda: not any(t.is_alive() for bot in bots for t in bot.threads), 30, "the periodic jobs ending")
    for sid, _, posts in left.values():
        assert len(a.effects(sid)) == 1 and len(a.posts(sid)) == posts, sid
        assert len({p["idempotency_key"] for p in a.posts(sid)}) == 1
    named = [
        r
        for s in a.store.steps()
        if s.step == "unfinished_found" and s.inputs.get("periodic")
        for r in (s.detail or {}).get("requests", [])
    ]
    assert sorted(named) == sorted(f"{rid} ({states[rid]})" for rid in rids.values()), named


def test_an_uncertain_send_is_taken_over_only_from_a_finisher_that_stopped_not_one_that_gave_up(two_bots):
    """Past ``uncertain_retry_for`` the finishing gives up and the request stays uncertain until a start
    (the runbook's limit): the other bot's periodic job leaves it. A finishing whose bot stopped (its
    ``finish:`` lease ran out unreleased) is taken over: same key, applied once."""
    a, b = two_bots
    bot_a, bot_b = a.service(), b.service()
    rid = _requested(a, bot_a, "ses_sl4")
    a.sandbox.admin.fault("server_error", "/v1/sessions/ses_sl4/*", method="POST", times=None, status=500)
    bot_a.approve(APPROVER, CHANNEL, rid, NullReporter())
    assert bot_a.wait_background(60)
    assert bot_a.requests.get(rid).state == "uncertain"
    a.sandbox.admin.clear_faults()
    tried = len(a.posts("ses_sl4"))
    bot_b.sweep(ListReporter())
    assert bot_b.wait_background(30)
    assert len(a.posts("ses_sl4")) == tried and bot_b.requests.get(rid).state == "uncertain"  # given up: left
    # A bot that took the finishing over stops (its lease is never released and runs out).
    assert b.store.leases.acquire(f"finish:{rid}", "bot:gone-host:1:dead", ttl=30) is not None
    b.clock.advance(31)
    bot_b.sweep(ListReporter())
    assert bot_b.wait_background(60)
    moves = [(s.step, s.actor, s.outcome) for s in b.store.steps(session_id="ses_sl4")][-6:]
    assert bot_b.requests.get(rid).state == "executed", moves
    assert len(a.effects("ses_sl4")) == 1 and len({p["idempotency_key"] for p in a.posts("ses_sl4")}) == 1


def test_a_runbook_copy_without_the_lease_limits_gets_their_defaults(decision_runbooks):
    """An operator's older runbook folder names neither ``send_lease`` nor ``replay_every``: the bot
    still sends (under the default lease) and sweeps (at the default pace) instead of failing."""
    older = dataclasses.replace(
        decision_runbooks,
        limits={k: v for k, v in decision_runbooks.limits.items() if k not in ("send_lease", "replay_every")},
    )
    assert lease_limit(older, "send_lease") == 30 and lease_limit(older, "replay_every") == 5
    assert lease_limit(decision_runbooks, "send_lease") == decision_runbooks.limit("send_lease")
