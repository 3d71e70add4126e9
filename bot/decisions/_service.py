"""DecisionService: decide, the two-person rule, execution exactly once, verification, resume, cases.

One thin class the router calls; each method hands over to the room that owns the job (composed over
one :class:`bot.decisions._context.DecisionContext`, no mixins):
lifecycle — ``_decide``, ``_approvals``, ``_recheck``, ``_cases``, ``_authority``;
execution — ``_execution`` (send once), ``_outcomes`` (settle the answer), ``_waits`` (R3.9, R4.2 on
``_poll``), ``_verify`` (R5.1), ``_uncertain`` (background re-sends), ``_resume``, ``_restart``,
``_unfinished`` (withdraw, Ctrl-C, the start-up listing).

Plain Python, no Slack: the Slack app and the console both reach it through the router, so no front
end can skip a rule. Every method returns a :class:`bot.messages.Reply`; slow work (waits, resume)
reports through a :class:`bot.messages.Reporter`. Time comes from the injected clock only.

Exactly once, whatever happens to the network or the process:
- approval is a compare-and-set ``pending → approved`` in the database (one winner across processes);
- execution is a second compare-and-set ``approved → sending`` committed together with the idempotency
  record (the client's ``begin``: new key, exact body) before anything is sent; ``expected_revision``
  comes from the same fresh diagnosis that compared the decisive facts;
- after a crash :meth:`recover_after_restart` finishes ``approved`` requests (fresh facts check) and
  re-sends ``sending``/``uncertain`` ones with their stored key and body, so the API sees one logical request.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta

from bot.channels import RecoveryChannels
from bot.clock import Clock
from bot.controlhost import ControlHostClient, Receipt
from bot.decisions._approvals import ApprovalRoom, approvals_unshown
from bot.decisions._authority import Gate
from bot.decisions._cases import CaseBook, HandoffDigest
from bot.decisions._context import DecisionContext
from bot.decisions._decide import DecideRoom
from bot.decisions._execution import ExecutionRoom
from bot.decisions._glass import BreakGlassRoom, Notice
from bot.decisions._outcomes import Outcomes
from bot.decisions._policy import Limits
from bot.decisions._requests import DecisionRequest
from bot.decisions._restart import RestartRoom
from bot.decisions._resume import ResumeRoom
from bot.decisions._reviews import ReviewRoom
from bot.decisions._rules import ApproverDirectory
from bot.decisions._uncertain import Unanswered
from bot.decisions._unfinished import Unfinished, UnfinishedRoom
from bot.decisions._verify import Verifier, results_recorded
from bot.diagnosis import Diagnoser
from bot.messages import Message, Reply, Reporter
from bot.runbook.model import RunbookSet
from bot.store import Store


class DecisionService:
    """The decisions core as the router calls it: each method hands over to the room that owns it.

    Cheap to construct: all state lives in the store's SQLite file.
    """

    def __init__(
        self,
        *,
        store: Store,
        client: ControlHostClient,
        runbooks: RunbookSet,
        diagnoser: Diagnoser,
        clock: Clock,
        approvers: tuple[str, ...] = (),
        channels: RecoveryChannels | Sequence[str] = (),
        directory: ApproverDirectory | None = None,
        console_users: Mapping[str, str] | None = None,
        notice: Notice | None = None,
    ) -> None:
        self.ctx = ctx = DecisionContext(
            store=store,
            client=client,
            runbooks=runbooks,
            diagnoser=diagnoser,
            clock=clock,
            approvers=tuple(approvers),
            # A plain list is RECOVER_CHANNELS alone (one installation of today's settings).
            channels=channels if isinstance(channels, RecoveryChannels) else RecoveryChannels.of(channels),
            directory=directory,
            console_users=dict(console_users or {}),
        )
        # Read by the router, batches and tests; the rooms take ``ctx``.
        self.store = store
        self.client = client
        self.runbooks = runbooks
        self.diagnoser = diagnoser
        self.clock = clock
        self.directory = directory
        self.approvers = ctx.approvers
        self.channels = ctx.channels
        self.console_users = ctx.console_users
        self.requests = ctx.requests
        self.limits: Limits = ctx.limits
        # THE gate: every POST to the control host passes through it (docs/requests.md).
        self.gate = self.authority = Gate(ctx)
        self.casebook = CaseBook(ctx)
        self.verifier = Verifier(ctx)
        self.outcomes = Outcomes(ctx, self.gate, self.verifier)
        self.leftovers = UnfinishedRoom(ctx, self.outcomes.uncertain.mark)
        self.execution = ExecutionRoom(ctx, self.gate, self.outcomes, self.leftovers.interruptible)
        self.resuming = ResumeRoom(ctx, self.gate, self.verifier, self.leftovers)
        self.restart = RestartRoom(ctx, self.gate, self.execution, self.resuming, self.leftovers)
        self.deciding = DecideRoom(ctx, self.execution)
        self.approvals = ApprovalRoom(ctx, self.execution)
        # Break-glass and its reviews (docs/requests.md); ``notice``: the front's loud-notice poster.
        self.reviews = ReviewRoom(ctx)
        self.glass = BreakGlassRoom(ctx, self.execution, self.reviews, notice)

    # == the lifecycle: decide, the two-person rule, expiry ========================================

    def decide(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None = None,
        evidence: str | None = None,
        effects: str | None = None,
        reason: str,
        yes: bool = False,
        reporter: Reporter,
        cause_fixed: str | None = None,
    ) -> Reply:
        """Check a decision against a fresh diagnosis; then ask for approval, confirmation, or send it."""
        return self.deciding.decide(
            actor,
            channel,
            session_id,
            decision,
            turn=turn,
            evidence=evidence,
            effects=effects,
            reason=reason,
            yes=yes,
            reporter=reporter,
            cause_fixed=cause_fixed,
        )

    def dryrun_decide(
        self,
        actor: str,
        channel: str | None,
        session_id: str,
        decision: str,
        *,
        turn: str | None = None,
        evidence: str | None = None,
        effects: str | None = None,
        reason: str,
        yes: bool = False,
        reporter: Reporter,
        cause_fixed: str | None = None,
    ) -> Reply:
        """Show exactly what ``decide`` would send and what is expected back; send nothing."""
        return self.deciding.dryrun(
            actor,
            channel,
            session_id,
            decision,
            turn=turn,
            evidence=evidence,
            effects=effects,
            reason=reason,
            yes=yes,
            cause_fixed=cause_fixed,
        )

    def approve(self, actor: str, channel: str | None, request_id: str, reporter: Reporter) -> Reply:
        """A second, allowed person approves (R3.10); then it executes once."""
        return self.approvals.approve(actor, channel, request_id, reporter)

    def confirm(
        self, actor: str, channel: str | None, request_id: str, reporter: Reporter, effects: str | None = None
    ) -> Reply:
        """The requester's confirmation, or the effects re-check once the worker is gone (R3.9, R3.10)."""
        return self.approvals.confirm(actor, channel, request_id, reporter, effects)

    def reject(self, actor: str, channel: str | None, request_id: str, reason: str | None = None) -> Reply:
        """An allowed approver rejects; the requester may withdraw their own request."""
        return self.approvals.reject(actor, channel, request_id, reason)

    def expire_due(self) -> list[Message]:
        """The periodic sweep: expire every pending request past its expiry, and re-read the sessions
        being verified after an accepted decision (R5.1); returns the messages to show."""
        return [*self.approvals.expire_due(), *self.verifier.watch_due()]

    def verify_accepted(
        self,
        session_id: str,
        actor: str,
        decision: str,
        receipt: Receipt,
        flags: Mapping[str, object],
        facts_before: Mapping[str, object] | None = None,
    ) -> Reply:
        """The verification an accepted decision gets (R5.1): the case shows *verifying* and the sweep
        closes it only on observed recovery. A batch member calls this too, so one rule decides
        "recovered" for single and batch decisions alike; ``facts_before``: the facts its send was
        bound to (its ``expected_revision``), when no sending step of the request keeps them."""
        policy = self.ctx.policy(decision)
        return self.verifier.verify(session_id, actor, policy, flags, receipt, facts_before=facts_before)

    def results_recorded(
        self, after_seq: int, *, older_than: timedelta, within: timedelta
    ) -> list[tuple[int, Message]]:
        """Requests' verification results recorded after step ``after_seq``, in the last ``within`` and
        at least ``older_than`` ago, as they were said: (seq, message). A front says each once (its
        ``ref`` is the request)."""
        return results_recorded(self.ctx, after_seq, older_than, within)

    def approvals_unshown(
        self, *, older_than: timedelta, within: timedelta, skip: Collection[str] = ()
    ) -> list[tuple[str | None, Message]]:
        """Two-person requests waiting for approval, made in the last ``within`` and at least
        ``older_than`` ago, but those in ``skip``: (their channel, the request as first shown, said
        once). A front shows those it never posted."""
        return approvals_unshown(self.ctx, older_than, within, skip)

    def warnings_before_send(
        self,
        session_id: str,
        decision: str,
        facts: Mapping[str, object],
        flags: Mapping[str, object],
        *,
        cause_fixed: str | None = None,
    ) -> list[str]:
        """What must be seen before a send beyond the standard question (R2.4, R2.11, R5.3, R5.4), in
        the single path's own words and with its own R5.4 count and threshold, for a batch's members."""
        policy = self.ctx.policy(decision)
        repeated = self.deciding.repeats_to_flag(policy, session_id, facts)
        return self.deciding.warnings(policy, dict(facts), flags, {"repeated": repeated}, cause_fixed)

    def repeats_to_flag(self, session_id: str, decision: str, facts: Mapping[str, object]) -> int:
        """R5.4: how often this decision already ran here without fixing the cause, single or as a
        batch's member; 0 below the runbook's threshold (the one count and threshold of both paths)."""
        return self.deciding.repeats_to_flag(self.ctx.policy(decision), session_id, facts)

    # == cases and hand-offs =========================================================================

    def cases(self, actor: str | None = None) -> Reply:
        return self._with_reviews(self.casebook.cases(actor))

    def _with_reviews(self, reply: Reply) -> Reply:
        """Open break-glass reviews stay in ``cases`` and ``handoff`` (with their age) until signed."""
        reviews = self.reviews.message(self.clock.now())
        if reviews is not None:
            reply.messages.append(reviews)
        return reply

    def history(self, session_id: str, actor: str | None = None) -> Reply:
        return self.casebook.history(session_id, actor)

    def take(self, actor: str, session_id: str) -> Reply:
        return self.casebook.take(actor, session_id)

    def note(self, actor: str, session_id: str, note_text: str) -> Reply:
        return self.casebook.note(actor, session_id, note_text)

    def done(self, actor: str, session_id: str, reason: str | None = None) -> Reply:
        return self.casebook.done(actor, session_id, reason)

    def handoff(self, actor: str, *, before: datetime | None = None) -> HandoffDigest:
        """The hand-off as data (bot/app/handoff.py words it, with the open reviews and batches)."""
        return self.casebook.handoff(actor, before=before)

    def close_if_settled(
        self, session_id: str, actor: str, facts: Mapping[str, object], found_by: str
    ) -> list[Message]:
        # A case whose verification began closes on observed recovery only, never on "looks healthy"
        # (R5.1), nor after the case said R5.2 cannot be known: the verifier's one rule decides.
        verified = self.verifier.on_diagnosis(session_id, actor, facts)
        if verified is not None:
            return verified
        return self.casebook.close_if_settled(session_id, actor, facts, found_by)

    # == execution, resume, restart, withdrawal (the execution half's rooms) ==========================

    def resume(self, actor: str, channel: str | None, session_id: str, reporter: Reporter) -> Reply:
        """Resume, riding through 503 BACKEND_UNAVAILABLE with backoff (R4.2), one key throughout."""
        return self.resuming.resume(actor, channel, session_id, reporter)

    def recover_after_restart(self, reporter: Reporter, *, actor: str | None = None) -> Reply:
        """Finish what a previous process left: in-flight requests re-sent, approved ones executed once."""
        return self.restart.recover(reporter, actor=actor)

    def sweep(self, reporter: Reporter) -> Reply:
        """The periodic job: finish what a stopped bot left while others serve."""
        return self.restart.sweep(reporter)

    def replay(self, actor: str, channel: str | None, reporter: Reporter) -> Reply:
        """The console's `/recover replay`: finish what earlier runs left (same keys, never anew)."""
        return self.restart.replay(actor, channel, reporter)

    def unfinished(self) -> list[Unfinished]:
        """Every open decision request and every stored send without an answer, oldest first."""
        return self.leftovers.unfinished()

    def unfinished_report(self, *, console: bool) -> Reply:
        """Names every unfinished request (session, decision, since when); sends nothing."""
        return self.leftovers.unfinished_report(console=console)

    def withdraw(self, actor: str, channel: str | None, request_id: str) -> Reply:
        """The requester takes back a request nothing was sent for; it is never sent after that."""
        return self.leftovers.withdraw(actor, channel, request_id)

    def pending_of(self, actor: str, since: str) -> list[DecisionRequest]:
        """What ``actor`` requested since ``since`` that still waits (what Ctrl-C would withdraw)."""
        return self.leftovers.pending_of(actor, since)

    def left_waiting(self, actor: str, since: str) -> Reply:
        """Leaving the console without Ctrl-C: this run's requests that stay waiting, said once."""
        return self.leftovers.left_waiting(actor, since)

    def withdraw_pending_of(self, actor: str, since: str) -> Reply:
        """Ctrl-C at the console: withdraw what ``actor`` requested since ``since`` and nothing was sent for."""
        return self.leftovers.withdraw_pending_of(actor, since)

    def finish_uncertain(self, send: Unanswered) -> bool:
        """A send with no definite answer, finished in the background by the one owner single decisions
        use (R0.3): its stored record re-sent with its own key until answered, bounded by the runbook's
        ``uncertain_retry_*``. A batch member goes here too. False when it is already being finished."""
        return self.outcomes.uncertain.background(send)

    def wait_background(self, timeout: float = 30.0) -> bool:
        """Wait for uncertain sends being finished in the background (tests, shutdown)."""
        return self.outcomes.uncertain.finisher.wait(timeout)
