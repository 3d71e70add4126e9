"""A ladder step's post and mark are fenced by its lease's token (bot/store/leases.py): a runner deposed
while it was paused (its step taken over with token + 1 by a bot whose clock is past its lease) posts
nothing and marks nothing; the new holder posts the step exactly once. Two bots on one store (a real
SQLite file, or a real PostgreSQL schema), each with its own store object and clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from bot.clock import ManualClock
from bot.escalation import text
from bot.escalation.runner import LadderRunner, Pass
from bot.escalation.store import Claim, job_of
from tests.escalation.test_ladder_runner import _close, _svc
from tests.fixtures.decisions import DecisionEnv
from tests.fixtures.escalation import RecordingPoster

LEASE = 3.0  # seconds of the store's clock; the runner posts with at least 2 of them left


@pytest.fixture
def db_path(store_target: Any) -> Any:
    """Both engines: the store's SQLite file or PostgreSQL URL (bot/store/_engine.py)."""
    return store_target


@pytest.fixture
def env(decision_sandbox: Any, db_path: Any, short_runbooks: Any) -> Any:
    e = DecisionEnv(decision_sandbox, db_path, ManualClock(), short_runbooks)
    yield e
    e.close()


def test_a_deposed_runner_neither_posts_nor_marks_its_step_and_the_taker_posts_it_once(
    env: DecisionEnv, decision_sandbox: Any, db_path: Any, short_runbooks: Any
) -> None:
    svc = _svc(env)
    poster = RecordingPoster()  # one channel both bots post into
    a = LadderRunner(svc.ctx, poster, lease=LEASE)
    rid = _close(env, svc)
    env.clock.advance(2)  # step 0 (remind) is due
    mine = a.rows.claim(rid, 0, owner=a.owner, now=env.clock.now(), lease=LEASE, inputs={})
    assert isinstance(mine, Claim) and mine.lease is not None and mine.lease.token == 1
    # Runner a pauses here. Bot b, on the same file, its clock past a's lease, takes the step over.
    later = ManualClock(env.clock.now() + timedelta(seconds=LEASE + 1))
    other = DecisionEnv(decision_sandbox, db_path, later, short_runbooks)
    try:
        b = LadderRunner(_svc(other).ctx, poster, lease=LEASE)
        taken = b.rows.claim(rid, 0, owner=b.owner, now=later.now(), lease=LEASE, inputs={})
        assert isinstance(taken, Claim) and taken.taken_over and taken.lease is not None
        assert taken.lease.token == mine.lease.token + 1
        # a wakes up (by its own clock its lease still has 3 s, past the margin) and tries to post and mark.
        a._say(mine, Pass())
        assert not a.rows.posted(mine, "ts-late", env.clock.now())
        key = text.key_line(rid, 0)
        assert poster.said(rid) == [], poster.said(rid)  # the deposed runner posted nothing
        assert a.rows.states(rid)[0] == "claimed"  # and marked nothing
        done = Pass()
        b._say(taken, done)
        assert done.posted == [(rid, 0)]
        assert [m for _c, m, _t in poster.posts if key in m.plain_text()] != []
        assert len([m for _c, m, _t in poster.posts if key in m.plain_text()]) == 1  # exactly one post
        assert b.rows.states(rid)[0] == "posted"
        posting = other.store.leases.posting_of(job_of(rid, 0))
        assert posting is not None and posting.startswith(f"step 0 of {rid} at ")
    finally:
        other.close()


def test_a_claim_written_before_leases_is_taken_over_as_run_out(env: DecisionEnv) -> None:
    """A store written before leases existed: a claimed row with no lease row is treated as run out."""
    svc = _svc(env)
    poster = RecordingPoster()
    runner = LadderRunner(svc.ctx, poster, lease=LEASE)
    rid = _close(env, svc)
    env.clock.advance(2)
    with env.store.write() as db:  # what an older bot left: claimed, its own lease column still running
        db.execute(
            "UPDATE escalation_steps SET state = 'claimed', claimed_by = 'escalation:old', lease_until = ? "
            "WHERE request_id = ? AND idx = 0",
            ["2099-01-01T00:00:00.000Z", rid],
        )
    assert env.store.leases.get(job_of(rid, 0)) is None
    done = runner.run_due()
    assert done.posted == [(rid, 0)]
    lease = env.store.leases.get(job_of(rid, 0))
    assert lease is not None and lease.token == 1
