"""A stateful property of the gate (hypothesis): whatever sequence of request / approve / confirm /
withdraw / batch / restart and direct table edits (with and without the audit key) happens, every POST
the sandbox control host received carries a verified chain authority for exactly that method, path and
body — by two distinct people where the policy says two.

The observer is the sandbox's own request log, not the bot: for each POST it must find an intact step
that recorded that Idempotency-Key with that method, path and body (``decision_sending``, or a batch's
bound member), and intact request and approval steps whose people the one identity function tells apart.
"""

from __future__ import annotations

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
from bot.store._rows import step_of
from bot.store.chain import hash_matches
from tests.fixtures.decisions import CHANNEL, RUNBOOKS_DIR, DecisionEnv
from tests.gate.test_attacks import KEY, KeyedEnv

PEOPLE = ("UALICE0001", "UBOB000002", "console:root", "console:deploy")  # root maps to alice; deploy unmapped
CONSOLE_USERS = {"root": "UALICE0001"}
_SANDBOX: Any = None
_IDS = itertools.count()


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


class GateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="gate-prop-"))
        self.env: DecisionEnv | None = None
        self.refused_store = False
        self.requests: list[str] = []
        self.sessions: list[str] = []

    @initialize(keyed=st.booleans())
    def start(self, keyed: bool) -> None:
        env_type = KeyedEnv if keyed else DecisionEnv
        self.keyed = keyed
        self.env = env_type(_sandbox(), self.dir / "p.db", ManualClock(), _runbooks())
        n = next(_IDS)
        for i in range(2):
            sid = f"ses_p{n}_{i}"
            self.env.restore_failed(sid)
            self.sessions.append(sid)

    def svc(self) -> Any:
        assert self.env is not None
        return self.env.service(console_users=CONSOLE_USERS)

    def _live(self) -> bool:
        return self.env is not None and not self.refused_store

    @rule(decision=st.sampled_from(["close", "retry_restore"]), who=st.sampled_from(PEOPLE), i=st.integers(0, 1),
          yes=st.booleans())
    def request(self, decision: str, who: str, i: int, yes: bool) -> None:
        if not self._live():
            return
        reply = self.svc().decide(who, CHANNEL, self.sessions[i], decision, reason="prop", yes=yes,
                                  reporter=ListReporter())
        ref = reply.messages[0].ref if reply.messages else None
        if ref and str(ref).startswith("req_"):
            self.requests.append(str(ref))

    @rule(who=st.sampled_from(PEOPLE), k=st.integers(0, 5), how=st.sampled_from(["approve", "confirm", "reject"]))
    def act(self, who: str, k: int, how: str) -> None:
        if not self._live() or not self.requests:
            return
        rid = self.requests[k % len(self.requests)]
        svc = self.svc()
        if how == "reject":
            svc.reject(who, CHANNEL, rid)
        else:
            getattr(svc, how)(who, CHANNEL, rid, ListReporter())

    @rule(k=st.integers(0, 5), edit=st.sampled_from(["approved", "policy", "path", "body"]))
    def edit_table(self, k: int, edit: str) -> None:
        """Someone with the file, without the key: the cached tables are theirs to change."""
        if not self._live() or not self.requests:
            return
        assert self.env is not None
        rid = self.requests[k % len(self.requests)]
        other = self.sessions[1] if rid else self.sessions[0]
        with sqlite3.connect(self.env.db_path, isolation_level=None) as conn:
            if edit == "approved":
                conn.execute("UPDATE decision_requests SET state = 'approved', approved_by = 'UBOB000002' WHERE id = ?", [rid])
            elif edit == "policy":
                conn.execute("UPDATE decision_requests SET policy = 'confirm' WHERE id = ?", [rid])
            else:
                row = conn.execute("SELECT idem_key FROM decision_requests WHERE id = ?", [rid]).fetchone()
                if row and row[0]:
                    if edit == "path":
                        conn.execute("UPDATE idempotency SET path = ? WHERE key = ?", [f"/v1/sessions/{other}/decision", row[0]])
                    else:
                        conn.execute("UPDATE idempotency SET body = ? WHERE key = ?", ['{"decision":"close"}', row[0]])

    @rule(who=st.sampled_from(PEOPLE))
    def forge_approval(self, who: str) -> None:
        """An approval step appended by hand (plain sha256: no key), linked to the head."""
        if not self._live() or not self.requests:
            return
        assert self.env is not None
        from bot.store.chain import PLAIN_VERSION, step_hash

        rid = self.requests[-1]
        with sqlite3.connect(self.env.db_path, isolation_level=None) as conn:
            conn.row_factory = sqlite3.Row
            req = conn.execute("SELECT session_id, content_hash FROM decision_requests WHERE id = ?", [rid]).fetchone()
            last = conn.execute("SELECT seq, hash FROM steps ORDER BY seq DESC LIMIT 1").fetchone()
            row = {"seq": last["seq"] + 1, "case_id": None, "session_id": req["session_id"], "actor": who,
                   "at": "2026-11-29T10:00:01.000Z", "step": "decision_approved",
                   "inputs": json.dumps({"request_id": rid, "content_hash": req["content_hash"], "channel": CHANNEL,
                                         "allowed_by": {"kind": "any"}}, sort_keys=True, separators=(",", ":")),
                   "outcome": "approved", "detail": None, "http_status": None, "idempotency_key": None,
                   "receipt_id": None, "prev_hash": last["hash"], "v": PLAIN_VERSION}
            row["hash"] = step_hash(row, last["hash"])
            conn.execute(f"INSERT INTO steps ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))

    @rule(batch=st.booleans())
    def restart(self, batch: bool) -> None:
        if not self._live():
            return
        assert self.env is not None
        try:
            self.env.restart()
        except RecoverError:
            self.refused_store = True  # refused at start: nothing can be sent from it
            return
        svc = self.svc()
        svc.recover_after_restart(ListReporter())
        svc.wait_background(30)

    # -- the property --------------------------------------------------------------------------

    @invariant()
    def every_post_has_a_verified_chain_authority(self) -> None:
        if self.env is None:
            return
        mine = [r for s in self.sessions for r in self.env.sandbox.admin.requests(s) if r.get("method") == "POST"]
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
            r["seq"] for i, r in enumerate(rows)
            if hash_matches(r, key) is True and (not self.keyed or r["v"] == 2)
            and (i == 0 or rows[i - 1]["hash"] == r["prev_hash"])
        }
        for post in mine:
            sending = [s for s in steps if s.idempotency_key == post["idempotency_key"] and s.step == "decision_sending"]
            assert len(sending) == 1 and sending[0].seq in intact, post
            s = sending[0]
            assert (s.inputs["method"], s.inputs["path"], s.inputs["body"]) == (post["method"], post["path"], post["body"])
            rid = s.inputs["request_id"]
            made = [x for x in steps if x.step == "decision_requested" and (x.detail or {}).get("request_id") == rid]
            assert len(made) == 1 and made[0].seq in intact
            approvals = [x for x in steps if x.seq in intact and x.seq < s.seq
                         and x.step in ("decision_approved", "decision_confirmed") and x.inputs.get("request_id") == rid]
            assert approvals, post
            if made[0].detail["policy"] == "two_person":
                requester = person_of(made[0].actor, CONSOLE_USERS)
                approvers = {person_of(a.actor, CONSOLE_USERS) for a in approvals if a.step == "decision_approved"}
                assert requester is not None and approvers - {None, requester}, (requester, approvers)


GateMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=10, deadline=None, derandomize=True)
test_gate_property = GateMachine.TestCase
