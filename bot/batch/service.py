"""BatchService: ``batch decide``, its approval, its sending, progress, stop, take and hand-off.

One decision for many sessions at once, under the same rules as one: the members are bound with the
facts they were read with, a batch of ``close`` or one larger than the runbook's threshold needs a
second person's approval of the whole list (the core's approver rules, never the requester, ``--yes``
never replaces it), approval and execution are compare-and-sets in the database (one winner across
processes), and each member is re-checked and sent once with a stored Idempotency-Key.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.batch import text
from bot.batch.finishing import MemberSend
from bot.batch.gating import approver_refusal, claim_of, tampered
from bot.batch.plan import Candidate, plan
from bot.batch.runner import Fence, Outcome, Runner
from bot.batch.store import OPEN_STATES, Batch, BatchStore, new_batch_id
from bot.batch.verifying import BatchVerification
from bot.clock import Clock, isoformat, parse_time
from bot.controlhost import PURPOSE_DECISION, ControlHostClient, Receipt
from bot.decisions import (
    BEFORE,
    EXECUTED_OVER,
    BatchGrant,
    DecisionPolicy,
    DecisionService,
    NoAuthority,
    approval_evidence_of,
    batch_policy,
    decision_policy,
    person_of,
    requester_refusal,
    same_person,
)
from bot.diagnosis import facts as F
from bot.errors import CommandError, ControlHostError
from bot.messages import Message, Reply, Reporter, ref
from bot.runbook.evaluate import evaluate
from bot.runbook.model import RunbookSet
from bot.store import IdempotencyRecord, Store
from bot.store.leases import LeaseHolding, LeaseLost
from bot.triage.engine import runbook_limit
from bot.triage.facts import gather
from bot.triage.pace import Throttle
from bot.triage.store import TriageStore
from bot.vocab import BATCH_DECISIONS, PER_SESSION, Action, Policy, RequestState, Step

BOT = "recover-bot"
log = logging.getLogger(__name__)


def batch_job(batch_id: str) -> str:
    """The lease a batch's runner holds while it sends its members."""
    return f"batch:{batch_id}"


def _refuse(headline: str, *lines: str) -> Reply:
    return Reply.of(Message(headline=headline, level="error", lines=list(lines)), ok=False)


class BatchService:
    def __init__(
        self,
        *,
        store: Store,
        client: ControlHostClient,
        runbooks: RunbookSet,
        clock: Clock,
        decisions: DecisionService,
        csv_dir: Path | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.runbooks = runbooks
        self.clock = clock
        self.decisions = decisions
        self.batches = BatchStore(store)
        self.triages = TriageStore(store)
        self.csv_dir = csv_dir
        self.verification = BatchVerification(store, self.batches, decisions)

    def limit(self, name: str) -> float:
        return runbook_limit(self.runbooks, name)

    def policy(self, decision: str) -> DecisionPolicy:
        return decision_policy(self.runbooks, decision, self.decisions.limits)

    def _step(self, batch_id: str, actor: str, step: str, outcome: str, **detail: object) -> None:
        self.store.record_step(None, actor, step, {"batch_id": batch_id}, outcome, detail=detail or None)

    # == request ==================================================================================

    def _candidates(self, target: str, sessions: str | None) -> tuple[list[Candidate], str]:
        if sessions:
            ids = list(dict.fromkeys(s.strip() for s in sessions.split(",") if s.strip()))
            now = self.clock.now()

            def read(sid: str) -> Candidate:
                try:
                    session = self.client.get_session(sid)
                except ControlHostError as exc:
                    if exc.code != "NOT_FOUND":
                        raise
                    missing = {**F.empty_facts(sid, now), **F.session_missing_facts()}
                    return Candidate(sid, None, missing, "unknown_session")  # left out: 404 NOT_FOUND
                facts, _ = gather(self.client, session, now)
                branch = evaluate(self.runbooks, facts).branch_id
                return Candidate(sid, session.revision, facts, branch)

            workers = max(1, int(self.limit("bulk_concurrency")))
            with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="batch-read") as pool:
                return list(pool.map(read, ids)), f"--sessions ({len(ids)})"
        group = self.triages.group(target)
        if group is None:
            raise CommandError(
                f"no triage group {target!r}",
                usage="Run `/recover triage` and copy a group id (t7.g1), or name sessions with --sessions a,b,c.",
            )
        damage = bool(group.data.get("damage"))
        return [Candidate(m.session_id, m.revision, m.facts, m.branch, damage) for m in group.members], group.id

    def decide(
        self,
        actor: str,
        channel: str | None,
        target: str,
        decision: str | None,
        *,
        sessions: str | None,
        reason: str,
        cause_fixed: str | None,
        yes: bool,
        dry: bool,
        reporter: Reporter,
    ) -> Reply:
        if sessions and not decision:
            target, decision = "", target
        decision = (decision or "").lower()
        if decision in PER_SESSION:
            return _refuse(
                f"`{decision}` is decided per session, never in a batch",
                "Each turn's external effects must be checked on their own (R3.10): "
                f"use `/recover decide <session_id> {decision} …`.",
            )
        if decision == Action.RESUME:  # not a Decision: its own command, with its own checks
            return _refuse(
                "`resume` is never made in a batch: each resume is its own `/recover resume <session_id>`",
                "Its checks belong to the one resume path: a stopped session with no committed checkpoint is "
                "refused before anything is sent (R4.1), and its case stays open until the resumed worker "
                "shows it restored the checkpoint's context, or says that cannot be known (R5.2).",
            )
        if decision not in BATCH_DECISIONS:
            return _refuse(f"`batch decide` takes retry_restore, start_fresh or close, not {decision!r}")
        if not dry and not self.decisions.channels.allows(channel):
            return _refuse(
                f"`batch decide` is refused outside the recovery channels ({self.decisions.channels.source})",
                self.decisions.channels.hint(channel),
            )
        candidates, source = self._candidates(target, sessions)
        policy = self.policy(decision)
        console_users = self.decisions.console_users

        def repeated(c: Candidate) -> int:
            # R5.4: the decisions' one count and threshold, which read single and batch executions alike.
            done: int = self.decisions.repeats_to_flag(c.session_id, decision, c.facts)
            return done

        chosen = plan(
            self.runbooks,
            decision,
            candidates,
            reason=reason,
            cause_fixed=cause_fixed,
            repeated=repeated,
        )
        if not chosen.members:
            lines = [f"{e['session_id']}: {e['why']}" for e in chosen.excluded[:15]]
            return _refuse(f"No member of {source or 'the list'} can take `{decision}`: nothing to send", *lines)
        irreversible = self.runbooks.decisions[decision].irreversible  # needs two people (R5.4)
        two = batch_policy(self.decisions.ctx, decision, len(chosen.members)) == Policy.TWO_PERSON
        unmapped = requester_refusal(actor, Policy.TWO_PERSON if two else Policy.CONFIRM, console_users)
        if unmapped is not None and not dry:
            return _refuse(*unmapped)
        now = self.clock.now()
        content = {
            "id": new_batch_id(self.store.installation),
            "requester": actor,
            "channel": channel,
            "decision": decision,
            "reason": reason,
            "cause_fixed": cause_fixed,
            "source": source,
            "policy": Policy.TWO_PERSON if two else Policy.CONFIRM,
            "created_at": isoformat(now),
            "expires_at": isoformat(now + timedelta(seconds=policy.expiry_seconds)),
            "excluded": chosen.excluded,
        }
        members = [{"session_id": c.session_id, "revision": c.revision, "facts": dict(c.facts)} for c in chosen.members]
        warned = self._warnings(decision, chosen.members, reason=reason, cause_fixed=cause_fixed)
        if dry:
            return self._dry(content, members, policy, warned)
        with self.store.write() as db:
            batch = self.batches.insert(db, content, members)
            self.store.record_step(
                None,
                actor,
                Step.BATCH_REQUESTED,
                {"batch_id": batch.id},
                RequestState.REQUESTED,
                detail={
                    "content_hash": batch.content_hash,
                    "decision": decision,
                    "members": len(members),
                    "source": source,
                    # who asked, by Slack id (the gate compares the approver with it)
                    "person": person_of(actor, console_users),
                },
                db=db,
            )
        stored = self.batches.members(batch.id)
        if two or not yes or warned:
            # With consequences to read (R2.11, R5.3), --yes does not send: the button or `confirm` does.
            return Reply.of(
                text.approval_message(
                    batch,
                    stored,
                    source,
                    list(self.decisions.approvers),
                    irreversible=irreversible,
                    warnings=warned,
                    yes_held=yes and not two and bool(warned),
                )
            )
        return self._confirm(batch, actor, channel, reporter)

    def _warnings(
        self,
        decision: str,
        members: list[Candidate],
        *,
        reason: str,
        cause_fixed: str | None,
    ) -> list[str]:
        """The single path's warnings before a send, in its words (what start_fresh drops, an
        incompatible checkpoint, a repeat: R2.11, R5.3, R5.4), said once per distinct kind of member."""
        kinds: dict[str, list[str]] = {}
        for c in members:
            said = self.decisions.warnings_before_send(
                c.session_id,
                decision,
                c.facts,
                {"reason": reason, "cause_fixed": cause_fixed},
                cause_fixed=cause_fixed,
            )
            for warning in said:
                kinds.setdefault(_kind_of(warning, c.facts), []).append(c.session_id)
        return [f"{w} — {len(ids)} member(s), e.g. {ids[0]}" for w, ids in kinds.items()]

    def _dry(
        self, content: dict[str, Any], members: list[dict[str, Any]], policy: DecisionPolicy, warned: list[str]
    ) -> Reply:
        lines = [f"[!] {w}" for w in warned]
        if warned:
            lines.append("With these, `--yes` does not send it: the Confirm button or `/recover confirm bat_…` does.")
        lines.append(f"Members ({len(members)}), each re-checked just before its send:")
        for m in members[:30]:
            _, path, body = policy.request(m["session_id"], m["facts"], {"reason": content["reason"]})
            lines.append(f"  POST {path} {body}")
        if len(members) > 30:
            lines.append(f"  … {len(members) - 30} more")
        for e in content["excluded"][:30]:
            lines.append(f"  left out {e['session_id']}: {e['why']}" + (f" ({e['rule']})" if e.get("rule") else ""))
        who = (
            "a second person's approval of the whole list"
            if content["policy"] == Policy.TWO_PERSON
            else "your confirmation (--yes or the button)"
        )
        lines.append(f"It would need {who}. Each POST carries its own Idempotency-Key, stored before the first send.")
        return Reply.of(
            Message(
                headline=f"Dry run: batch `{content['decision']}` on {len(members)} session(s) "
                f"from {content['source']} (nothing sent)",
                lines=lines,
            )
        )

    # == approval =================================================================================

    def approve(self, actor: str, channel: str | None, batch_id: str, reporter: Reporter) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None:
            return _refuse(f"no batch {batch_id!r}", "Copy the id from the batch request (bat_…).")
        if not self.decisions.channels.allows(channel):
            return _refuse(
                f"batch approvals are refused outside the recovery channels ({self.decisions.channels.source})",
                self.decisions.channels.hint(channel),
            )
        # The decisions' identity and approver rules, by Slack id (a console login through its mapping).
        console_users = self.decisions.console_users
        if batch.policy == Policy.CONFIRM:
            if not self.is_requester(actor, batch):
                return _refuse(f"only {ref(batch.requester)}, who asked for it, confirms batch {batch.id}")
            return self._confirm(batch, actor, channel, reporter)
        refusal = approver_refusal(actor, batch, console_users)
        if refusal is not None:
            self._step(batch.id, actor, Step.BATCH_APPROVE, refusal[0])
            return _refuse(refusal[1], *refusal[2])
        evidence, problem = approval_evidence_of(
            actor, self.decisions.approvers, self.decisions.directory, console_users
        )
        if evidence is None:
            return _refuse(
                f"{ref(actor)} is not an allowed approver (RECOVER_APPROVERS)", *([problem] if problem else [])
            )
        if batch.state == RequestState.APPROVED:
            return self.execute(batch.id, actor, reporter)
        return self._approve_cas(batch, actor, reporter, Step.BATCH_APPROVED, channel, evidence)

    def _confirm(self, batch: Batch, actor: str, channel: str | None, reporter: Reporter) -> Reply:
        if batch.state == RequestState.APPROVED:
            return self.execute(batch.id, actor, reporter)
        return self._approve_cas(batch, actor, reporter, Step.BATCH_CONFIRMED, channel)

    def _approve_cas(
        self,
        batch: Batch,
        actor: str,
        reporter: Reporter,
        step: str,
        channel: str | None,
        evidence: dict[str, Any] | None = None,
    ) -> Reply:
        if batch.state != RequestState.REQUESTED:
            return _refuse(f"batch {batch.id} is already {batch.state}: nothing more to do")
        if tampered(self.store, self.batches, batch):
            return _refuse(
                f"batch {batch.id} was changed after it was requested: approval refused",
                "Make a new batch, and check the step store with `recover-bot audit verify`.",
            )
        expires = parse_time(batch.expires_at)
        if expires is not None and self.clock.now() >= expires:
            with self.store.write() as db:
                self.batches.transition(db, batch.id, (RequestState.REQUESTED,), RequestState.EXPIRED, decided_by=actor)
            return _refuse(f"batch {batch.id} has expired: nothing was sent", "Make a new batch if it is still needed.")
        with self.store.write() as db:
            won = self.batches.transition(
                db,
                batch.id,
                (RequestState.REQUESTED,),
                RequestState.APPROVED,
                approved_by=actor,
                approved_at=isoformat(self.clock.now()),
            )
            if won:
                # What the gate reads: the content approved, where, and what allowed the approver then.
                inputs: dict[str, Any] = {"batch_id": batch.id, "content_hash": batch.content_hash, "channel": channel}
                if evidence is not None:
                    inputs["allowed_by"] = evidence
                self.store.record_step(
                    None, actor, step, inputs, RequestState.APPROVED, detail={"content_hash": batch.content_hash}, db=db
                )
        if not won:
            fresh = self.batches.get(batch.id)
            return _refuse(f"batch {batch.id} is already {fresh.state if fresh else 'gone'}: nothing more to do")
        return self.execute(batch.id, actor, reporter)

    def is_requester(self, actor: str, batch: Batch) -> bool:
        """The requester under any of their names (a console login and its Slack id are one person)."""
        return same_person(actor, batch.requester, self.decisions.console_users)

    def reject(self, actor: str, channel: str | None, batch_id: str, reason: str | None) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None:
            return _refuse(f"no batch {batch_id!r}")
        if not self.decisions.channels.allows(channel):
            return _refuse(
                f"batch rejections are refused outside the recovery channels ({self.decisions.channels.source})",
                self.decisions.channels.hint(channel),
            )
        state = RequestState.WITHDRAWN if self.is_requester(actor, batch) else RequestState.REJECTED
        if state == RequestState.REJECTED:
            evidence, _ = approval_evidence_of(
                actor, self.decisions.approvers, self.decisions.directory, self.decisions.console_users
            )
            if evidence is None:
                return _refuse(f"{ref(actor)} is not an allowed approver (RECOVER_APPROVERS)")
        with self.store.write() as db:
            won = self.batches.transition(db, batch.id, (RequestState.REQUESTED,), state, decided_by=actor, note=reason)
        if not won:
            return _refuse(f"batch {batch.id} is already {batch.state}: nothing more to do")
        self._step(batch.id, actor, Step(f"batch_{state}"), state, reason=reason)
        return Reply.of(
            Message(
                headline=f"Batch {batch.id} {state} by {ref(actor)}; nothing was sent",
                level="warn",
                kind="batch_request",
                ref=batch.id,
                session_id=batch.id,
            )
        )

    # == execution ================================================================================

    def grant(self, batch_id: str) -> BatchGrant:
        """The gate's proof for this batch as stored now (raises NoAuthority); the runner asks per chunk."""
        batch = self.batches.get(batch_id)
        if batch is None:
            raise NoAuthority(f"no batch {batch_id}")
        return self.decisions.gate.batch_grant(claim_of(self.batches, batch))

    def send_member(self, grant: BatchGrant, session_id: str, record: IdempotencyRecord) -> Receipt:
        """One member through the gate: its record must be the request its bound facts give."""
        return self.decisions.gate.send_member(grant, session_id, record)

    def execute(self, batch_id: str, actor: str, reporter: Reporter) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is not None and batch.state in (RequestState.APPROVED, RequestState.SENDING):
            try:  # the gate's proof, before anything moves (the runner asks again for every chunk)
                self.grant(batch_id)
            except NoAuthority as exc:
                problem = exc.reason
                self._step(batch_id, actor, Step.BATCH_REFUSED, "no_authority", why=problem)
                return _refuse(
                    f"batch {batch_id} is not sent: {problem}",
                    "Nothing was sent. Check the step store with `recover-bot audit verify`.",
                )
        # The runner holds the batch: one runner at a time on any host, renewed while it
        # runs; when it dies its lease runs out and the periodic job resumes the batch elsewhere.
        leases, ttl = self.store.leases, self.limit("batch_lease")
        lease = leases.acquire(batch_job(batch_id), self.decisions.ctx.sends.holder, ttl)
        if lease is None:
            return Reply.of(
                Message(
                    headline=f"batch {batch_id} is being sent by another bot: nothing sent from here",
                    lines=["Its runner holds the batch; if that bot stops, another one resumes it."],
                )
            )
        with leases.held(lease, ttl) as holding:
            runner_id = holding.lease.holder
            with self.store.write() as db:
                won = self.batches.transition(
                    db, batch_id, (RequestState.APPROVED,), RequestState.SENDING, runner=runner_id
                )
            batch = self.batches.get(batch_id)
            if batch is None or (not won and batch.state != RequestState.SENDING):
                return _refuse(f"batch {batch_id} is {batch.state if batch else 'unknown'}: nothing to send")
            if not won:
                self.batches.set(batch_id, runner=runner_id)
            return self._run(batch, actor, reporter, holding)

    def running(self, batch_id: str) -> bool:
        """Whether a runner's lease on the batch runs now (here or at another bot)."""
        lease = self.store.leases.get(batch_job(batch_id))
        return lease is not None and lease.until >= self.clock.now()

    def _run(self, batch: Batch, actor: str, reporter: Reporter, holding: LeaseHolding) -> Reply:
        total = len(self.batches.members(batch.id))
        throttle = Throttle(reporter, self.limit("progress_interval"))
        started = time.monotonic()

        def progress() -> Message:
            fresh = self.batches.get(batch.id) or batch
            return text.progress_message(
                fresh,
                self.batches.counts(batch.id),
                self.batches.codes(batch.id),
                total,
                time.monotonic() - started,
                throttle.note(),
            )

        leases = self.store.leases
        runner = Runner(
            self,
            batch.id,
            actor,
            lambda: throttle.update(progress),
            fence=lambda db: leases.fence(db, holding.lease),
            lost=lambda: holding.lost,
        )
        try:
            runner.run(int(self.limit("bulk_concurrency")))
        finally:
            throttle.close()
        try:
            with self.store.write() as db:
                leases.fence(db, holding.lease)  # a deposed runner ends nothing: the new one finishes it
                self.batches.transition(db, batch.id, (RequestState.SENDING,), RequestState.EXECUTED)
        except LeaseLost as exc:
            log.warning("batch %s: %s", batch.id, exc.message)
            return Reply.of(
                Message(
                    headline=f"batch {batch.id}: another bot took its run over; its outcome is told from there",
                    level="warn",
                )
            )
        fresh = self.batches.get(batch.id) or batch
        counts, codes = self.batches.counts(batch.id), self.batches.codes(batch.id)
        self._step(batch.id, actor, Step.BATCH_FINISHED, RequestState.EXECUTED, counts=counts, codes=codes)
        # Accepted is not recovered (R5.1): each accepted member gets the single decisions'
        # verification; the batch's message then says where the members stand, as one thing.
        # Half the batch's concurrency: each verification is a diagnosis whose sources share the
        # process's diagnose pool with everyone else's diagnoses.
        self.verification.verify_members(fresh, actor, int(self.limit("bulk_concurrency")) // 2)
        members = self.batches.members(batch.id)
        path = self._write_csv(fresh, members)
        sent = text.final_message(fresh, members, counts, codes, path)
        states = self.verification.states(fresh)
        final = self.verification.settle(fresh, states)
        merged = dataclasses.replace(
            sent,
            headline=f"{sent.headline} · {self.verification.phase(states)}",
            lines=[*self.verification.lines(fresh, states), *sent.lines, self.verification.details_line(fresh)],
            level="error" if self.verification.level(states) == "error" else sent.level,
        )
        self.finish_uncertain(fresh, reporter)
        return Reply([merged, *([final] if final is not None else [])], ok=True)

    def finish_uncertain(self, batch: Batch, reporter: Reporter, *, left_only: bool = False) -> int:
        """Each uncertain member handed to the decisions' one finishing of uncertain sends (R0.3): its
        stored record re-sent with its own key in the background until an answer is recorded, then
        verified, the batch's message edited in place. Returns how many were handed over now.
        ``left_only`` (the periodic job): only members whose finishing bot stopped."""
        started = 0
        sends = self.decisions.ctx.sends
        for member in self.batches.members(batch.id, (RequestState.UNCERTAIN,)):
            send = MemberSend(self, batch.id, member.session_id, reporter)
            if left_only and not sends.finisher_died(send.key):
                continue
            started += self.decisions.finish_uncertain(send)
        return started

    def begin_members(
        self,
        batch: Batch,
        ready: list[tuple[str, str, str, dict[str, Any]]],
        positions: dict[str, int | None],
    ) -> list[tuple[str, str]]:
        """One commit: each member ``requested → sending`` with its idempotency record (the client's
        key rule: new key, exact body, stored before any send) and its ``batch_member_sending`` step,
        which keeps where its event stream stood before the send (``positions``), as a single
        decision's sending step does: its verification judges a ready report against it (R5.1), on
        every send of that key (a crash's, an uncertain one's). Returns (session, key) for the members
        this process won."""
        won: list[tuple[str, str]] = []
        if not ready:
            return won
        with self.store.write() as db:
            for session_id, method, path, body in ready:
                if not self.batches.member_transition(
                    db, batch.id, session_id, (RequestState.REQUESTED,), RequestState.SENDING, method=method, path=path
                ):
                    continue
                record = self.client.begin(method, path, body, PURPOSE_DECISION, session_id=session_id, db=db)
                self.decisions.ctx.sends.take(db, record.key)  # held from the commit that stores it
                self.batches.member_set(db, batch.id, session_id, idem_key=record.key, body=record.body)
                if session_id in positions:
                    self.store.record_step(
                        session_id,
                        BOT,
                        Step.BATCH_MEMBER_SENDING,
                        {"batch_id": batch.id, "decision": batch.decision},
                        RequestState.SENDING,
                        detail={BEFORE: {"events.last_seq": positions[session_id]}},
                        idempotency_key=record.key,
                        db=db,
                    )
                won.append((session_id, record.key))
        return won

    def settle_many(self, batch: Batch, actor: str, outcomes: list[Outcome], fence: Fence | None = None) -> None:
        """Members' outcomes and their steps in the sessions' cases, in one commit. An executed member's
        step names the attention it was sent over: the decisions' R5.4 count reads it (``repeated``).
        ``fence`` (the runner's batch lease) runs first: a deposed runner records nothing (LeaseLost)."""
        bound = (
            {m.session_id: m.facts for m in self.batches.members(batch.id)}
            if any(to == RequestState.EXECUTED for _, _, to, _ in outcomes)
            else {}
        )
        with self.store.write() as db:
            if fence is not None:
                fence(db)
            for session_id, from_states, to, values in outcomes:
                key = values.pop("key", None)
                if not self.batches.member_transition(db, batch.id, session_id, from_states, to, **values):
                    continue
                status, receipt_id = values.get("http_status"), values.get("receipt_id")
                inputs: dict[str, Any] = {"batch_id": batch.id, "decision": batch.decision}
                if to == RequestState.EXECUTED:
                    inputs[EXECUTED_OVER] = (bound.get(session_id) or {}).get("attention.code")
                self.store.record_step(
                    session_id,
                    actor,
                    Step(f"batch_member_{to}"),
                    inputs,
                    str(values.get("code") or to),
                    detail={k: v for k, v in values.items() if v is not None} or None,
                    http_status=status if isinstance(status, int) else None,
                    idempotency_key=key if isinstance(key, str) else None,
                    receipt_id=receipt_id if isinstance(receipt_id, str) else None,
                    db=db,
                )

    def _write_csv(self, batch: Batch, members: list[Any]) -> str | None:
        if self.csv_dir is None:
            return None
        try:
            self.csv_dir.mkdir(parents=True, exist_ok=True)
            path = self.csv_dir / f"{batch.id}.csv"
            path.write_text(text.members_csv(batch, members), encoding="utf-8")
            return str(path)
        except OSError:
            return None

    def resume_open(self, reporter: Reporter, *, periodic: bool = False) -> list[Message]:
        """At start-up and in the periodic job: finish batches a stopped bot left approved or sending,
        on any host — a sending batch once its runner's lease ran out, and none of its in-flight members'
        send leases runs — and the uncertain members of sent ones (same keys, never anew). The periodic
        job leaves an approved batch to its approver's bot for a lease's time."""
        out: list[Message] = []
        stale = isoformat(self.clock.now() - timedelta(seconds=self.limit("batch_lease"))) or ""
        sends = self.decisions.ctx.sends
        for batch in self.batches.find((RequestState.APPROVED, RequestState.SENDING)):
            if self.running(batch.id):
                continue  # its runner is alive
            in_flight = self.batches.members(batch.id, (RequestState.SENDING,))
            if any(m.idem_key and sends.running(m.idem_key) for m in in_flight):
                continue  # a member's send is still live: resumed once its lease ran out
            if periodic and batch.state == RequestState.APPROVED and batch.updated_at > stale:
                continue
            with self.store.write() as db:
                self.batches.transition(
                    db, batch.id, (RequestState.APPROVED, RequestState.SENDING), RequestState.APPROVED
                )
            out.extend(self.execute(batch.id, BOT, reporter).messages)
        for batch in self.batches.find((RequestState.EXECUTED,)):
            # Sent, some answers never came: finished with their own keys (their run handed them over).
            if self.finish_uncertain(batch, reporter, left_only=periodic):
                out.append(self.verification.message(batch))
        return out

    # == views ====================================================================================

    def show(self, actor: str, channel: str | None, batch_id: str, action: str | None) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None:
            return _refuse(f"no batch {batch_id!r}")
        if action == "stop":
            if not self.decisions.channels.allows(channel):
                return _refuse(
                    f"`batch … stop` is refused outside the recovery channels ({self.decisions.channels.source})",
                    self.decisions.channels.hint(channel),
                )
            if batch.state not in OPEN_STATES:
                return _refuse(f"batch {batch.id} is already {batch.state}: nothing to stop")
            self.batches.set(batch.id, stop_requested=1)
            self._step(batch.id, actor, Step.BATCH_STOP, "stop_requested")
            if batch.state == RequestState.REQUESTED:
                with self.store.write() as db:
                    self.batches.transition(
                        db,
                        batch.id,
                        (RequestState.REQUESTED,),
                        RequestState.WITHDRAWN,
                        decided_by=actor,
                        note="stopped",
                    )
            batch = self.batches.get(batch.id) or batch
        return Reply.of(self.summary(batch))

    def summary(self, batch: Batch) -> Message:
        counts, codes = self.batches.counts(batch.id), self.batches.codes(batch.id)
        total = sum(counts.values())
        stop = " · stop requested" if batch.stop_requested else ""
        return Message(
            session_id=batch.id,
            headline=f"Batch {batch.id}: `{batch.decision}` · {batch.state}{stop} · {total} member(s)",
            lines=[
                text.counts_line(counts, codes, total),
                f"Requested by {ref(batch.requester)} · owner {ref(batch.owner) if batch.owner else 'none'}"
                f" · from {batch.source} · reason: {batch.reason}",
            ],
        )

    def take(self, actor: str, batch_id: str) -> Reply:
        batch = self.batches.get(batch_id)
        if batch is None:
            return _refuse(f"no batch {batch_id!r}")
        self.batches.set(batch.id, owner=actor)
        self._step(batch.id, actor, Step.BATCH_TAKE, "owner", previous=batch.owner)
        return Reply.of(
            Message(
                headline=f"{ref(actor)} now owns batch {batch.id}",
                level="ok",
                lines=[self.summary(self.batches.get(batch.id) or batch).lines[0]],
            )
        )

    def history(self, batch_id: str) -> Reply:
        steps = [s for s in self.store.steps() if (s.inputs or {}).get("batch_id") == batch_id]
        if not steps:
            return _refuse(f"no recorded step for batch {batch_id!r}")
        lines = [
            f"{s.at} {s.actor} {s.step} → {s.outcome}" + (f" ({s.session_id})" if s.session_id else "")
            for s in steps[-60:]
        ]
        return Reply.of(Message(headline=f"History of batch {batch_id} ({len(steps)} steps)", lines=lines))

    def handoff_messages(self) -> list[Message]:
        open_batches = self.batches.find(OPEN_STATES)
        if not open_batches:
            return []
        lines = []
        for b in open_batches:
            lines.extend(self.summary(b).marked_text().splitlines())  # mentions stay live in Slack
        return [Message(headline=f"Open batches ({len(open_batches)})", lines=lines)]


def _kind_of(warning: str, facts: dict[str, Any]) -> str:
    """A warning with the member's own ids left out, so members of one kind are warned about once."""
    for name, value in facts.items():
        if name.endswith(".id") and isinstance(value, str) and value:
            warning = warning.replace(value, "…")
    return warning
