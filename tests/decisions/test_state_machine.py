"""Hypothesis looks for a way to execute a decision without one valid approval by a second, allowed person.

Rules: request, approve (by anyone, in or out of the channel), confirm, reject, expire, change the facts
behind the bot's back, restart (new objects on the same file), execute after a restart, and two
concurrent approvals from two bot instances. The sandbox's effect log is the ground truth.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from collections import Counter
from pathlib import Path

import httpx
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from bot.clock import ManualClock
from bot.messages import NullReporter
from bot.runbook import load_runbooks
from bot.sandbox import start_sandbox
from tests.fixtures.decisions import (
    APPROVER,
    CHANNEL,
    OTHER_CHANNEL,
    OUTSIDER,
    REQUESTER,
    RUNBOOKS_DIR,
    DecisionEnv,
)

APPROVER2 = "UAPP000005"
ALLOWED = (APPROVER, APPROVER2)
USERS = (REQUESTER, APPROVER, APPROVER2, OUTSIDER)
RUNBOOKS = load_runbooks(RUNBOOKS_DIR)


class ApprovalMachine(RuleBasedStateMachine):
    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="decisions-sm-"))
        self.sandbox = start_sandbox(scenarios=None)
        self.clock = ManualClock()
        self.envs: list[DecisionEnv] = []
        self.env = self._env()
        self.svc = self.env.service(approvers=ALLOWED)
        self.outside_keys: set[str] = set()
        self.n = 0

    def _env(self) -> DecisionEnv:
        env = DecisionEnv(self.sandbox, self.tmp / "recover.db", self.clock, RUNBOOKS)
        self.envs.append(env)
        return env

    def teardown(self) -> None:
        for env in self.envs:
            env.close()
        self.sandbox.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- rules -----------------------------------------------------------------------------------

    @rule(
        target=requests,
        kind=st.sampled_from(["abandon", "close", "retry_restore"]),
        requester=st.sampled_from(USERS),
        gone=st.booleans(),
        yes=st.booleans(),
    )
    def request(self, kind: str, requester: str, gone: bool, yes: bool):
        self.n += 1
        sid = f"ses_sm{self.n}"
        if kind == "abandon":
            self.env.outcome_unknown(sid, gone=gone, covered=True)
            reply = self.svc.decide(
                requester,
                CHANNEL,
                sid,
                "abandon",
                turn="turn_9",
                effects="none",
                reason="r",
                yes=yes,
                reporter=NullReporter(),
            )
        else:
            self.env.restore_failed(sid)
            reply = self.svc.decide(requester, CHANNEL, sid, kind, reason="r", yes=yes, reporter=NullReporter())
        refs = [m.ref for m in reply.messages if m.kind in ("approval_request", "confirmation_request") and m.ref]
        return multiple(*refs[:1])

    @rule(rid=requests, actor=st.sampled_from(USERS), in_channel=st.booleans())
    def approve(self, rid: str, actor: str, in_channel: bool):
        self.svc.approve(actor, CHANNEL if in_channel else OTHER_CHANNEL, rid, NullReporter())

    @rule(rid=requests, actor=st.sampled_from(ALLOWED))
    def approve_as_allowed(self, rid: str, actor: str):
        """Steers towards executions, so the property is exercised on real effects too."""
        self.svc.approve(actor, CHANNEL, rid, NullReporter())

    @rule(rid=requests, actor=st.sampled_from(USERS))
    def confirm(self, rid: str, actor: str):
        self.svc.confirm(actor, CHANNEL, rid, NullReporter())

    @rule(rid=requests, actor=st.sampled_from(USERS))
    def reject(self, rid: str, actor: str):
        self.svc.reject(actor, CHANNEL, rid, "no")

    @rule(seconds=st.sampled_from([60, 1799, 1801]))
    def expire(self, seconds: int):
        self.clock.advance(seconds)
        self.svc.expire_due()

    @rule(rid=requests)
    def change_facts(self, rid: str):
        """Someone outside the bot closes the session (a decisive change: attention goes)."""
        req = self.svc.requests.get(rid)
        key = str(uuid.uuid4())
        self.outside_keys.add(key)
        httpx.post(
            f"{self.sandbox.url}/v1/sessions/{req.session_id}/recovery-decisions",
            json={"decision": "close", "reason": "outside"},
            headers={"Authorization": f"Bearer {self.sandbox.api_key}", "Idempotency-Key": key},
        )

    @rule()
    def restart(self):
        self.env = self._env()
        self.svc = self.env.service(approvers=ALLOWED)

    @rule()
    def execute_after_restart(self):
        self.svc.recover_after_restart(NullReporter())

    @rule(rid=requests, a=st.sampled_from(USERS), b=st.sampled_from(USERS))
    def concurrent_approvals(self, rid: str, a: str, b: str):
        services = [self._env().service(approvers=ALLOWED) for _ in range(2)]
        barrier = threading.Barrier(2)

        def run(svc, actor):
            barrier.wait()
            svc.approve(actor, CHANNEL, rid, NullReporter())

        threads = [threading.Thread(target=run, args=(svc, actor)) for svc, actor in zip(services, (a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    # -- the property ----------------------------------------------------------------------------

    @invariant()
    def every_effect_has_one_valid_approval(self):
        store = self.env.store
        key_to_request = {
            s.idempotency_key: s.inputs["request_id"] for s in store.steps() if s.step == "decision_sending"
        }
        per_request: Counter[str] = Counter()
        for effect in self.sandbox.admin.effects():
            key = effect["idempotency_key"]
            if key in self.outside_keys:
                continue
            assert key in key_to_request, f"an effect no request of the bot sent: {effect}"
            rid = key_to_request[key]
            per_request[rid] += 1
            req = self.svc.requests.get(rid)
            approvals = [
                s
                for s in store.steps(session_id=req.session_id)
                if s.step in ("decision_approved", "decision_confirmed") and s.inputs.get("request_id") == rid
            ]
            assert len(approvals) == 1, approvals
            approval = approvals[0]
            assert approval.actor == req.approved_by
            assert approval.inputs.get("channel") == CHANNEL
            if req.policy == "two_person":
                assert approval.step == "decision_approved"
                assert req.approved_by != req.requester
                assert req.approved_by in ALLOWED
            else:
                assert req.approved_by == req.requester
            assert effect["decision"] == req.decision
        assert all(n == 1 for n in per_request.values()), per_request


TestApprovalMachine = ApprovalMachine.TestCase
TestApprovalMachine.settings = settings(settings.get_profile("ci"), max_examples=40, stateful_step_count=12)
