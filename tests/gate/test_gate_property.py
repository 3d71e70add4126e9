"""A stateful property of the gate (hypothesis): whatever sequence of request / approve / confirm /
withdraw / batch / restart and direct table edits (with and without the audit key) happens, every POST
the sandbox control host received carries a verified chain authority for exactly that method, path and
body — by two distinct people where the policy says two.

The observer is the sandbox's own request log, not the bot: for each POST it must find an intact step
that recorded that Idempotency-Key with that method, path and body (``decision_sending``, or a batch's
bound member), and intact request and approval steps whose people the one identity function tells apart.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from bot.clock import ManualClock
from bot.decisions import person_of
from bot.errors import RecoverError
from bot.messages import ListReporter
from bot.runbook import load_runbooks
from bot.sandbox import start_sandbox
from bot.store import Step
from bot.store._rows import step_of
from bot.store.chain import PLAIN_VERSION, hash_matches, step_hash
from tests.fixtures.decisions import CHANNEL, RUNBOOKS_DIR, DecisionEnv
from tests.gate.test_attacks import KEY, KeyedEnv, strip_keys

PEOPLE = ("UALICE0001", "UBOB000002", "console:root", "console:deploy")  # root maps to alice; deploy unmapped
THEN = ("nothing", "restart", "approve")
CONSOLE_USERS = {"root": "UALICE0001"}
_SANDBOX: Any = None
_IDS = itertools.count()
CHECKED = {"posts": 0}


_RUNBOOKS: Any = None


def _runbooks() -> Any:
    global _RUNBOOKS
    if _RUNBOOKS is None:
        _RUNBOOKS = load_runbooks(RUNBOOKS_DIR)
    return _RUNBOOKS


def _sandbox() -> Any:
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = start_sandbox(scenarios=None)
    return _SANDBOX


def _append_plain(
    conn: sqlite3.Connection,
    sid: str | None,
    step: str,
    actor: str,
    inputs: dict[str, Any],
    detail: dict[str, Any] | None,
    *,
    keyed: bool = False,
) -> None:
    """A step appended by hand, plain sha256 (no key), linked to the head: what a writer without the key can do."""
    last = conn.execute("SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
    row = {
        "seq": last[0] + 1,
        "case_id": None,
        "session_id": sid,
        "actor": actor,
        "at": "2026-11-29T10:00:01.000Z",
        "step": step,
        "inputs": json.dumps(inputs, sort_keys=True, separators=(",", ":")),
        "outcome": "approved",
        "detail": json.dumps(detail, sort_keys=True, separators=(",", ":")) if detail is not None else None,
        "http_status": None,
        "idempotency_key": None,
        "receipt_id": None,
        "prev_hash": last[1],
        "v": PLAIN_VERSION,
    }
    row["hash"] = step_hash(row, last[1])
    if keyed:  # looks keyed (version 2), but without the key its hash is made up
        row["v"], row["hash"] = 2, hashlib.sha256(row["hash"].encode()).hexdigest()
    conn.execute(f"INSERT INTO steps ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def _append_plain_approval(
    conn: sqlite3.Connection, rid: str, sid: str, content_hash: str, who: str, *, keyed: bool = False
) -> None:
    inputs = {"request_id": rid, "content_hash": content_hash, "channel": CHANNEL, "allowed_by": {"kind": "any"}}
    _append_plain(conn, sid, "decision_approved", who, inputs, None, keyed=keyed)
    conn.execute("UPDATE decision_requests SET state = 'approved', approved_by = ? WHERE id = ?", [who, rid])


class GateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="gate-prop-"))
        self.env: DecisionEnv | None = None
        self.refused_store = False
        self.requests: list[str] = []
        self.batch_ids: list[str] = []
        self._service: Any = None
        self.judged: set[tuple[str, str]] = set()
        self.sessions: list[str] = []

    @initialize(keyed=st.booleans())
    def start(self, keyed: bool) -> None:
        env_type = KeyedEnv if keyed else DecisionEnv
        self.keyed = keyed
        self.env = env_type(_sandbox(), self.dir / "p.db", ManualClock(), _runbooks())
        n = next(_IDS)
        for i in range(3):
            sid = f"ses_p{n}_{i}"
            self.env.restore_failed(sid, reason="restore_unavailable")  # transient: retry_restore allowed (R2.6)
            self.sessions.append(sid)
        # The world the actions start from: a two-person `close` waiting for its second person, and a
        # `retry_restore` sent during an outage, uncertain (its stored record is what a restart re-sends).
        self.request("close", "UALICE0001", 0, False, False)
        self.request("retry_restore", "UBOB000002", 1, True, True)

    def svc(self) -> Any:
        """The process's one DecisionService (its background finishers are waited for); anew after a restart."""
        assert self.env is not None
        if self._service is None:
            self._service = self.env.service(console_users=CONSOLE_USERS)
        return self._service

    def batches(self) -> Any:
        from bot.batch.service import BatchService

        assert self.env is not None
        return BatchService(
            store=self.env.store,
            client=self.env.client,
            runbooks=self.env.runbooks,
            clock=self.env.clock,
            decisions=self.svc(),
        )

    def _live(self) -> bool:
        return self.env is not None and not self.refused_store

    def _outage(self, on: bool) -> None:
        """The control host answers 503 to every POST of these sessions (a send goes uncertain), or recovers."""
        assert self.env is not None
        admin = self.env.sandbox.admin
        if not on:
            admin.clear_faults()
            return
        for sid in self.sessions:
            admin.fault("server_error", f"/v1/sessions/{sid}/*", method="POST", times=None, status=503)

    def _during(self, outage: bool, call: Any) -> None:
        """``call`` with the control host down or up; an uncertain send is left uncertain after its
        background re-sends give up (the injected clock runs them through at once)."""
        self._outage(outage)
        try:
            call()
            self.svc().wait_background(30)
        finally:
            self._outage(False)

    @rule(
        decision=st.sampled_from(["close", "retry_restore"]),
        who=st.sampled_from(PEOPLE),
        i=st.integers(0, 2),
        yes=st.booleans(),
        outage=st.sampled_from([True, True, False]),
    )
    def request(self, decision: str, who: str, i: int, yes: bool, outage: bool) -> None:
        if not self._live():
            return
        self._during(
            outage,
            lambda: self.svc().decide(
                who, CHANNEL, self.sessions[i], decision, reason="prop", yes=yes, reporter=ListReporter()
            ),
        )
        for req in self.svc().requests.find(session_id=self.sessions[i]):
            if req.id not in self.requests:
                self.requests.append(req.id)

    @rule(
        who=st.sampled_from(PEOPLE),
        k=st.integers(0, 5),
        how=st.sampled_from(["approve", "confirm", "reject"]),
        outage=st.booleans(),
    )
    def act(self, who: str, k: int, how: str, outage: bool) -> None:
        if not self._live() or not self.requests:
            return
        rid = self.requests[k % len(self.requests)]
        svc = self.svc()
        if how == "reject":
            svc.reject(who, CHANNEL, rid)
        else:
            self._during(outage, lambda: getattr(svc, how)(who, CHANNEL, rid, ListReporter()))

    def _tampering(self, k: int, flying: bool = False) -> tuple[sqlite3.Connection, sqlite3.Row] | None:
        """A raw connection to the file, its triggers dropped (its writer can), and one request's row."""
        if not self._live() or not self.requests:
            return None
        assert self.env is not None
        conn = sqlite3.connect(self.env.db_path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        for (trigger,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {trigger}")
        pool = (
            [r[0] for r in conn.execute("SELECT id FROM decision_requests WHERE idem_key IS NOT NULL")]
            if flying
            else []
        )
        pool = pool or self.requests
        return conn, conn.execute("SELECT * FROM decision_requests WHERE id = ?", [pool[k % len(pool)]]).fetchone()

    @rule(
        k=st.integers(0, 5),
        edit=st.sampled_from(["approved", "policy"]),
        who=st.sampled_from(PEOPLE),
        then=st.sampled_from(THEN),
    )
    def tamper_row(self, k: int, edit: str, who: str, then: str) -> None:
        """The request table is a cache: its state or its policy set by hand."""
        found = self._tampering(k)
        if found is None:
            return
        conn, req = found
        with conn:
            if edit == "approved":
                conn.execute(
                    "UPDATE decision_requests SET state = 'approved', approved_by = ? WHERE id = ?", [who, req["id"]]
                )
            else:
                conn.execute("UPDATE decision_requests SET policy = 'confirm' WHERE id = ?", [req["id"]])
        conn.close()
        self._then(then, req["id"])

    @rule(k=st.integers(0, 5), edit=st.sampled_from(["path", "body"]))
    def tamper_record(self, k: int, edit: str) -> None:
        """The idempotency table is a cache: a stored request pointed at another session, or made a close;
        then the bot restarts (the replay and the background finisher send stored records)."""
        found = self._tampering(k, flying=True)
        if found is None:
            return
        conn, req = found
        other = next(s for s in self.sessions if s != req["session_id"])
        with conn:
            if req["idem_key"] and edit == "path":
                conn.execute(
                    "UPDATE idempotency SET path = ?, session_id = ? WHERE key = ?",
                    [f"/v1/sessions/{other}/recovery-decisions", other, req["idem_key"]],
                )
            elif req["idem_key"]:
                conn.execute(
                    "UPDATE idempotency SET body = ? WHERE key = ?",
                    ['{"decision":"close","reason":"x"}', req["idem_key"]],
                )
        conn.close()
        self._then("restart")

    @rule(
        k=st.integers(0, 5),
        how=st.sampled_from(["plain", "keyed", "strip"]),
        who=st.sampled_from(PEOPLE[:3]),
        then=st.sampled_from(THEN[1:]),
    )
    def forge(self, k: int, how: str, who: str, then: str) -> None:
        """An approval step appended by hand (plain; or looking keyed with a made-up hash; or after turning
        every keyed step plain), the row set to approved; then a restart or an approval click."""
        found = self._tampering(k)
        if found is None:
            return
        conn, req = found
        with conn:
            if how == "strip":
                strip_keys(conn)
            _append_plain_approval(conn, req["id"], req["session_id"], req["content_hash"], who, keyed=how == "keyed")
        conn.close()
        self._then(then, req["id"])

    def _then(self, then: str, rid: str | None = None) -> None:
        """What follows an edit: nothing, the running bot's next steps and a restart, or an approval click."""
        if then == "restart":
            self.svc().store.record_step(None, "recover-bot", "note", {}, "ok")  # the bot goes on writing, keyed
            self.restart()
        elif then == "approve" and rid is not None:
            self._during(False, lambda: self.svc().approve("UCAROL0003", CHANNEL, rid, ListReporter()))

    @rule(decision=st.sampled_from(["close", "retry_restore"]), who=st.sampled_from(PEOPLE), yes=st.booleans())
    def batch(self, decision: str, who: str, yes: bool) -> None:
        if not self._live():
            return
        reply = self.batches().decide(
            who,
            CHANNEL,
            "",
            decision,
            sessions=",".join(self.sessions),
            reason="prop",
            cause_fixed="yes",
            yes=yes,
            dry=False,
            reporter=ListReporter(),
        )
        ref = reply.messages[0].ref if reply.messages else None
        if ref and str(ref).startswith("bat_"):
            self.batch_ids.append(str(ref))

    @rule(who=st.sampled_from(PEOPLE), k=st.integers(0, 3))
    def batch_approve(self, who: str, k: int) -> None:
        if not self._live() or not self.batch_ids:
            return
        self.batches().approve(who, CHANNEL, self.batch_ids[k % len(self.batch_ids)], ListReporter())
        self.svc().wait_background(30)  # its uncertain members' re-sends, if any, end before the next rule

    @rule(k=st.integers(0, 3), who=st.sampled_from(PEOPLE), keyed=st.booleans())
    def batch_tamper(self, k: int, who: str, keyed: bool) -> None:
        """A batch row set to approved with a plain approval step appended by hand."""
        if not self._live() or not self.batch_ids:
            return
        assert self.env is not None
        bid = self.batch_ids[k % len(self.batch_ids)]
        with sqlite3.connect(self.env.db_path, isolation_level=None) as conn:
            conn.row_factory = sqlite3.Row
            row = conn.execute("SELECT content_hash FROM batches WHERE id = ?", [bid]).fetchone()
            inputs = {
                "batch_id": bid,
                "content_hash": row["content_hash"],
                "channel": CHANNEL,
                "allowed_by": {"kind": "any"},
            }
            _append_plain(conn, None, "batch_approved", who, inputs, {"content_hash": row["content_hash"]}, keyed=keyed)
            conn.execute("UPDATE batches SET state = 'approved' WHERE id = ? AND state = 'requested'", [bid])
        self._then("restart")

    @rule()
    def restart(self) -> None:
        if not self._live():
            return
        assert self.env is not None
        self._service = None
        try:
            self.env.restart()
        except RecoverError:
            self.refused_store = True  # refused at start: nothing is sent from it
            return
        svc = self.svc()
        svc.recover_after_restart(ListReporter())
        svc.wait_background(30)
        self.batches().resume_open(ListReporter())
        svc.wait_background(30)  # a batch's uncertain members are finished in the background too

    # -- the property --------------------------------------------------------------------------

    @invariant()
    def every_post_has_a_verified_chain_authority(self) -> None:
        if self.env is None:
            return
        # Each POST is judged once, against the chain as it was right after the step that sent it (a later
        # edit of the file cannot make an earlier send unauthorised, nor authorise it).
        posted = [r for s in self.sessions for r in self.env.sandbox.admin.requests(s) if r.get("method") == "POST"]
        mine = [r for r in posted if (r["idempotency_key"], r["at"]) not in self.judged]
        self.judged.update((r["idempotency_key"], r["at"]) for r in mine)
        if not mine:
            return
        key = KEY.encode() if self.keyed else None
        conn = sqlite3.connect(self.env.db_path)
        conn.row_factory = sqlite3.Row
        try:
            rows = [dict(r) for r in conn.execute("SELECT * FROM steps ORDER BY seq")]
        finally:
            conn.close()
        steps = [step_of(r) for r in rows]
        # Intact: its own hash (keyed under the key when the store is keyed), linked to the one before.
        intact = {
            r["seq"]
            for i, r in enumerate(rows)
            if hash_matches(r, key) is True
            and (not self.keyed or r["v"] == 2)
            and (i == 0 or rows[i - 1]["hash"] == r["prev_hash"])
        }
        for post in mine:
            CHECKED["posts"] += 1
            sending = [
                s for s in steps if s.idempotency_key == post["idempotency_key"] and s.step == "decision_sending"
            ]
            if sending:
                self._decision_authorised(post, sending, steps, intact)
            else:
                self._member_authorised(post, steps, intact)

    def _decision_authorised(
        self, post: dict[str, Any], sending: list[Step], steps: list[Step], intact: set[int]
    ) -> None:
        assert len(sending) == 1 and sending[0].seq in intact, post
        s = sending[0]
        assert (s.inputs["method"], s.inputs["path"], s.inputs["body"]) == (post["method"], post["path"], post["body"])
        rid = s.inputs["request_id"]
        made = [x for x in steps if x.step == "decision_requested" and (x.detail or {}).get("request_id") == rid]
        assert len(made) == 1 and made[0].seq in intact and made[0].session_id in post["path"], post
        approvals = [
            x
            for x in steps
            if x.seq in intact
            and x.seq < s.seq
            and x.inputs.get("request_id") == rid
            and x.step in ("decision_approved", "decision_confirmed")
        ]
        self._people(made[0], approvals, "decision_approved", post)

    def _member_authorised(self, post: dict[str, Any], steps: list[Step], intact: set[int]) -> None:
        """A batch member's POST: a batch whose chain-recorded content hash covers the member's bound facts,
        rebuilt into exactly this request, approved by the right people before it was sent."""
        from bot.batch.store import content_hash

        assert self.env is not None
        conn = sqlite3.connect(self.env.db_path)
        conn.row_factory = sqlite3.Row
        try:
            found = conn.execute(
                "SELECT batch_id FROM batch_members WHERE idem_key = ?", [post["idempotency_key"]]
            ).fetchone()
            assert found is not None, ("a POST no step and no batch member records", post)
            batch = dict(conn.execute("SELECT * FROM batches WHERE id = ?", [found[0]]).fetchone())
            members = [
                dict(r) for r in conn.execute("SELECT * FROM batch_members WHERE batch_id = ? ORDER BY ord", [found[0]])
            ]
        finally:
            conn.close()
        rows = [
            {"session_id": m["session_id"], "revision": m["revision"], "facts": json.loads(m["facts"])} for m in members
        ]
        made = [x for x in steps if x.step == "batch_requested" and x.inputs.get("batch_id") == batch["id"]]
        assert len(made) == 1 and made[0].seq in intact, post
        assert content_hash(batch, rows) == made[0].detail["content_hash"], ("batch rows differ from the chain", post)
        sid = next(r["session_id"] for r in rows if f"/sessions/{r['session_id']}/" in post["path"])
        facts = next(r["facts"] for r in rows if r["session_id"] == sid)
        policy = self.svc().ctx.policy(batch["decision"])
        assert policy.request(sid, facts, {"reason": batch["reason"]}) == (post["method"], post["path"], post["body"])
        approvals = [
            x
            for x in steps
            if x.seq in intact
            and x.inputs.get("batch_id") == batch["id"]
            and x.step in ("batch_approved", "batch_confirmed")
        ]
        self._people(made[0], approvals, "batch_approved", post, two=batch["policy"] == "two_person")

    @staticmethod
    def _people(made: Step, approvals: list[Step], approved: str, post: Any, two: bool | None = None) -> None:
        assert approvals, ("no intact approval", post)
        if two is None:
            two = (made.detail or {}).get("policy") == "two_person"
        if two:
            requester = person_of(made.actor, CONSOLE_USERS)
            approvers = {person_of(a.actor, CONSOLE_USERS) for a in approvals if a.step == approved}
            assert requester is not None and approvers - {None, requester}, (requester, approvers, post)
        else:
            assert any(a.actor == made.actor for a in approvals), post


GateMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=10, deadline=None, derandomize=True)
test_gate_property = GateMachine.TestCase
