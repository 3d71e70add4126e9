"""The attacks on the gate, each tried as an attacker would: through the router every front uses (the
console and the Slack app end there), signed Slack HTTP, real SQLite files edited with sqlite3, and the
sandbox control host over HTTP, whose request log is the ground truth for "sent".

1. a batch requested by a mapped console login and approved by the same person in Slack;
2. a batch approved by an unmapped console login;
3. a keyed store with a forged ``batch_approved`` step and the row set to approved;
4. a keyed store whose ``idempotency`` row of an uncertain send was pointed at another session;
5. a keyed store whose keyed steps were all re-hashed plain, with an approval appended;
6. a signed approval from another workspace of the token's Enterprise Grid org;
7. a two-person request by an unmapped console login.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.errors import StoreError
from bot.messages import ListReporter, Reply
from bot.sandbox import SandboxHandle
from bot.store.chain import PLAIN_VERSION, step_hash
from tests.fixtures.decisions import APPROVER, CHANNEL, REQUESTER, DecisionEnv, bind
from tests.fixtures.triage import bulk_router, make_incident

KEY = "gate-attack-key-0123456789"


def _text(reply: Reply) -> str:
    return "\n".join(m.plain_text() for m in reply.messages)


def _run(router: Any, line: str, actor: str, channel: str | None = "C1") -> Reply:
    reply: Reply = router.handle_text(line, actor=actor, channel=channel, reporter=ListReporter())
    return reply


def _raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _batch(sbx: SandboxHandle, router: Any, actor: str, made: list[str] | None = None) -> tuple[list[str], Reply]:
    made = made or make_incident(sbx, {"startup_stopped": 2})["startup_stopped"]
    return made, _run(router, f'/recover batch decide --sessions {",".join(made)} close --reason "x"', actor)


# -- 1, 2: one person, one identity function ---------------------------------------------------------


def test_a_mapped_console_login_cannot_approve_its_own_batch_from_slack(incident_sandbox, tmp_path) -> None:
    router = bulk_router(incident_sandbox, tmp_path, console_users={"root": "U0ALICE01"})
    _, made = _batch(incident_sandbox, router, "console:root")
    batch_id = made.messages[0].ref
    same = _run(router, f"/recover approve {batch_id}", "U0ALICE01")  # the same person, in Slack
    assert not same.ok and "cannot approve your own batch" in _text(same), _text(same)
    assert not incident_sandbox.admin.effect_counts()
    other = _run(router, f"/recover approve {batch_id}", "U0BOB0002")  # a second person: sent
    assert other.ok, _text(other)
    assert sum(incident_sandbox.admin.effect_counts().values()) == 2


def test_an_unmapped_console_login_neither_requests_nor_approves_a_two_person_batch(incident_sandbox, tmp_path) -> None:
    router = bulk_router(incident_sandbox, tmp_path, console_users={"root": "U0ALICE01"})
    sessions, refused = _batch(incident_sandbox, router, "console:deploy")
    assert not refused.ok and "never request or approve a two-person one" in _text(refused)
    _, made = _batch(incident_sandbox, router, "U0ALICE01", sessions)
    batch_id = made.messages[0].ref
    approve = _run(router, f"/recover approve {batch_id}", "console:deploy")
    assert not approve.ok and "not mapped to a Slack user id" in _text(approve), _text(approve)
    assert not incident_sandbox.admin.effect_counts()


# -- 3: a forged approval step -----------------------------------------------------------------------


def _append_forged(conn: sqlite3.Connection, step: str, actor: str, inputs: dict[str, Any], detail: Any) -> None:
    last = conn.execute("SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
    conn.execute(
        "INSERT INTO steps (seq, case_id, session_id, actor, at, step, inputs, outcome, detail, prev_hash, hash, v) "
        "VALUES (?, NULL, NULL, ?, '2026-01-01T00:00:00.000Z', ?, ?, 'approved', ?, ?, ?, 2)",
        [last["seq"] + 1, actor, step, json.dumps(inputs), json.dumps(detail), last["hash"], "f" * 64],
    )


def test_a_forged_batch_approval_in_a_keyed_store_sends_nothing_at_start(incident_sandbox, tmp_path) -> None:
    router = bulk_router(incident_sandbox, tmp_path, audit_key=SecretStr(KEY))
    sessions, made = _batch(incident_sandbox, router, "U0ALICE01")
    batch_id = made.messages[0].ref
    with _raw(tmp_path / "recover.db") as conn:
        content = conn.execute("SELECT content_hash, created_at FROM batches WHERE id = ?", [batch_id]).fetchone()
        forged = {
            "batch_id": batch_id,
            "content_hash": content["content_hash"],
            "channel": "C1",
            "allowed_by": {"kind": "any"},
        }
        _append_forged(conn, "batch_approved", "U0BOB0002", forged, {"content_hash": content["content_hash"]})
        forged_seq = conn.execute("SELECT MAX(seq) FROM steps").fetchone()[0]
        conn.execute("UPDATE batches SET state = 'approved', approved_by = 'U0BOB0002' WHERE id = ?", [batch_id])
    # The bot goes on writing (keyed, linked to the forgery): the store's newest keyed step verifies again.
    _run(router, f"/recover diagnose {sessions[0]}", "U0CAROL03")
    with _raw(tmp_path / "recover.db") as conn:
        assert conn.execute("SELECT MAX(seq) FROM steps").fetchone()[0] > forged_seq
    restarted = bulk_router(incident_sandbox, tmp_path, audit_key=SecretStr(KEY))  # start-up finishes batches
    assert "does not match its hash" in _text(restarted.startup_reply), _text(restarted.startup_reply)
    assert not incident_sandbox.admin.effect_counts()


# -- 4, 5: keyed decision stores ---------------------------------------------------------------------


class KeyedEnv(DecisionEnv):
    """A DecisionEnv whose store holds the audit key (each build is a restarted bot process)."""

    def build(self) -> None:
        from bot.app.services import MIGRATIONS
        from bot.controlhost import ControlHostClient, RetryPolicy
        from bot.diagnosis import Diagnoser
        from bot.store import Store

        self.store = Store(self.db_path, self.clock, migrations=MIGRATIONS, audit_key=KEY.encode())
        self.client = ControlHostClient(
            self.sandbox.url,
            self.sandbox.api_key,
            store=self.store,
            clock=self.clock,
            retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02, jitter=0.0),
        )
        self._clients.append(self.client)
        bind(self.store, self.client)
        self.diagnoser = Diagnoser(
            client=self.client,
            runbooks=self.runbooks,
            store=self.store,
            log_source=None,
            reconciler_status=None,
            clock=self.clock,
        )


@pytest.fixture
def keyed_env(decision_sandbox, tmp_path, decision_runbooks):
    from bot.clock import ManualClock

    env = KeyedEnv(decision_sandbox, tmp_path / "keyed.db", ManualClock(), decision_runbooks)
    try:
        yield env
    finally:
        env.close()


def test_an_edited_idempotency_row_of_an_uncertain_send_sends_nothing_after_a_restart(keyed_env) -> None:
    env = keyed_env
    env.restore_failed("ses_g4a", reason="restore_unavailable")
    env.restore_failed("ses_g4b", reason="restore_unavailable")
    svc = env.service()
    env.sandbox.admin.fault("server_error", "/v1/sessions/ses_g4a/*", method="POST", times=None, status=503)
    reply = svc.decide(
        REQUESTER, CHANNEL, "ses_g4a", "retry_restore", reason="transient", yes=True, reporter=ListReporter()
    )
    assert "no definite answer" in _text(reply), _text(reply)
    assert svc.wait_background(60)
    (req,) = svc.requests.find(session_id="ses_g4a")
    assert req.state == "uncertain"
    env.sandbox.admin.clear_faults()
    with _raw(env.db_path) as conn:  # point the stored request at another session, as a close
        body = json.loads(conn.execute("SELECT body FROM idempotency WHERE key = ?", [req.idem_key]).fetchone()[0])
        body["decision"] = "close"
        conn.execute(
            "UPDATE idempotency SET path = ?, body = ?, session_id = ? WHERE key = ?",
            ["/v1/sessions/ses_g4b/decision", json.dumps(body), "ses_g4b", req.idem_key],
        )
    env.restart()
    reporter = ListReporter()
    after = env.service()
    after.recover_after_restart(reporter)
    after.wait_background(30)
    said = "\n".join(m.plain_text() for m in reporter.posted)
    assert env.posts("ses_g4b") == [] and env.effects("ses_g4b") == []
    assert "the idempotency table was edited" in said or "is not the one" in said, said
    assert after.requests.get(req.id).state == "void"


def strip_keys(conn: sqlite3.Connection) -> None:
    """Without the key: every step re-hashed plain (sha256), the chain still linked (the trigger dropped)."""
    conn.execute("DROP TRIGGER IF EXISTS steps_no_update")
    prev: str | None = None
    for row in [dict(r) for r in conn.execute("SELECT * FROM steps ORDER BY seq")]:
        if prev is not None:
            row["prev_hash"] = prev
        prev = step_hash(row, row["prev_hash"], version=PLAIN_VERSION)
        conn.execute(
            "UPDATE steps SET prev_hash = ?, hash = ?, v = ? WHERE seq = ?",
            [row["prev_hash"], prev, PLAIN_VERSION, row["seq"]],
        )


def _append_plain_approval(db: Path, rid: str, sid: str, content_hash: str) -> None:
    with _raw(db) as conn:
        last = conn.execute("SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
        case_id = conn.execute("SELECT case_id FROM steps WHERE session_id = ? LIMIT 1", [sid]).fetchone()[0]
        row = {
            "seq": last["seq"] + 1,
            "case_id": case_id,
            "session_id": sid,
            "actor": APPROVER,
            "at": "2026-01-01T00:00:01.000Z",
            "step": "decision_approved",
            "inputs": json.dumps(
                {"request_id": rid, "content_hash": content_hash, "channel": CHANNEL, "allowed_by": {"kind": "any"}},
                separators=(",", ":"),
                sort_keys=True,
            ),
            "outcome": "approved",
            "detail": None,
            "http_status": None,
            "idempotency_key": None,
            "receipt_id": None,
            "prev_hash": last["hash"],
            "v": PLAIN_VERSION,
        }
        row["hash"] = step_hash(row, last["hash"])
        conn.execute(f"INSERT INTO steps ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        conn.execute("UPDATE decision_requests SET state = 'approved', approved_by = ? WHERE id = ?", [APPROVER, rid])


def test_a_store_stripped_of_its_keyed_steps_is_refused_at_start_and_before_any_send(keyed_env) -> None:
    env = keyed_env
    env.restore_failed("ses_g5")
    svc = env.service()
    reply = svc.decide(REQUESTER, CHANNEL, "ses_g5", "close", reason="gone", reporter=ListReporter())
    req = svc.requests.get(str(reply.messages[0].ref))
    with _raw(env.db_path) as conn:
        strip_keys(conn)
    _append_plain_approval(env.db_path, req.id, "ses_g5", req.content_hash)
    # Before any send: the running process (its store opened before the edit) refuses.
    reporter = ListReporter()
    running = env.service().recover_after_restart(reporter)
    said = _text(running) + "\n".join(m.plain_text() for m in reporter.posted)
    assert "recover-bot audit verify" in said and "keyed marker (step 1) does not verify" in said, said
    assert env.posts("ses_g5") == []
    # At start: the bot, started with its key, refuses the store in one line naming audit verify.
    with pytest.raises(StoreError) as refused:
        env.restart()
    assert "recover-bot audit verify" in refused.value.message and "\n" not in refused.value.message
    assert env.posts("ses_g5") == [] and env.effects("ses_g5") == []


# -- 6: the Enterprise Grid org is not the token's workspace -------------------------------------------


def test_another_workspace_of_the_tokens_grid_org_is_refused(slack_harness, slack_api, sandbox) -> None:
    grid_auth = slack_api._m_auth_test

    def auth_test_in_grid(p: dict[str, Any]) -> dict[str, Any]:
        return {**grid_auth(p), "enterprise_id": "E1GRID"}

    slack_api._m_auth_test = auth_test_in_grid  # the Slack stand-in answers as an Enterprise Grid install
    h = slack_harness.real(sandbox)
    session = "ses_restore_transient"
    assert h.send.command(f"decide {session} close --reason grid", user="UALICE").status_code == 200
    h.settle()
    roots = [m for root in h.api.roots("CINC") for m in h.api.thread("CINC", root.ts)]
    request_id = next(w for m in roots for w in m.all_text().split() if w.startswith("req_")).strip("`*.,:")
    other = h.send.command_body(f"approve {request_id}", user="UEVE", team="T2") + "&enterprise_id=E1GRID"
    refused = h.send.post(other, content_type="application/x-www-form-urlencoded")
    h.settle()
    assert refused.status_code == 403
    assert [r for r in sandbox.admin.requests(session) if r.get("method") == "POST"] == []


# -- 7: an unmapped two-person requester --------------------------------------------------------------


def test_an_unmapped_console_login_cannot_request_a_two_person_decision(sandbox, tmp_path) -> None:
    from bot.settings import Settings
    from tests.fixtures.composing import default_router

    router = default_router(
        Settings(db_path=tmp_path / "g7.db", console_users={"root": "U0ALICE01"}), sandbox=sandbox, startup=False
    )
    made = _run(router, 'decide ses_restore_transient close --reason "store gone"', "console:deploy", "console")
    assert not made.ok and "never request or approve a two-person one" in made.messages[0].headline
    # Had it been requested, any Slack user would have counted as its second person: nothing exists to approve.
    assert "req_" not in _text(made)
    assert [r for r in sandbox.admin.requests() if r.get("method") == "POST"] == []
