"""The project's fixed vocabularies, one list each: request states, approval policies, decisions,
button actions, the step kinds a runbook subcommand runs and the audit step names.

They are ``StrEnum``s so each member *is* its string: it compares equal to the plain text stored in
SQLite rows, the step log and button values, so code can move to the names one module at a time and
nothing stored changes. The request states are exactly the list of docs/requests.md.
"""

from __future__ import annotations

from enum import StrEnum


class RequestState(StrEnum):
    """A decision request's state (docs/requests.md); batches and their members use the same names."""

    REQUESTED = "requested"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"
    VOID = "void"  # the decisive facts changed
    WAITING = "waiting"  # the previous worker is not yet confirmed gone (R3.9)
    RECHECK = "recheck"  # effects re-check after the worker is gone (R3.9, R3.10)
    SENDING = "sending"
    EXECUTED = "executed"
    FAILED = "failed"
    UNCERTAIN = "uncertain"  # sent, no definite answer (R0.3)


#: Open states: something may still be sent (docs/requests.md).
OPEN_STATES: frozenset[RequestState] = frozenset(
    {
        RequestState.REQUESTED,
        RequestState.APPROVED,
        RequestState.WAITING,
        RequestState.RECHECK,
        RequestState.SENDING,
        RequestState.UNCERTAIN,
    }
)


class Policy(StrEnum):
    """Who must agree before a decision is sent (the runbook's ``approval.policy``)."""

    TWO_PERSON = "two_person"  # a second, allowed person approves
    CONFIRM = "confirm"  # the requester confirms
    NONE = "none"


class Decision(StrEnum):
    """The decisions the control host accepts (R3); which apply when is the runbook's, not this list's."""

    RETRY_RESTORE = "retry_restore"
    START_FRESH = "start_fresh"
    CLOSE = "close"
    ABANDON = "abandon"
    CONFIRM_COMPLETED = "confirm_completed"


#: The decisions a batch may take; the others are decided per session, because each turn's external
#: effects are checked on their own (R3.10).
BATCH_DECISIONS: tuple[Decision, ...] = (Decision.RETRY_RESTORE, Decision.START_FRESH, Decision.CLOSE)
PER_SESSION: tuple[Decision, ...] = (Decision.ABANDON, Decision.CONFIRM_COMPLETED)


class Action(StrEnum):
    """What a button asks the router to do (a button's ``action``; Slack prefixes it with ``rb:``)."""

    APPROVE = "approve"
    REJECT = "reject"
    CONFIRM = "confirm"
    WITHDRAW = "withdraw"
    RECONCILE_REVIEWED = "reconcile_reviewed"
    RESUME = "resume"
    DECIDE = "decide"
    DECIDE_FORM = "decide_form"
    RUN = "run"


class StepKind(StrEnum):
    """What Python implements for a subcommand; each runbook subcommand picks one (``kind:``)."""

    HELP = "help"
    DIAGNOSE = "diagnose"
    RECONCILER_STATUS = "reconciler_status"
    RECONCILER_DRYRUN = "reconciler_dryrun"
    RECONCILER_REAL_PASS = "reconciler_real_pass"
    PREFLIGHT = "preflight"
    DECIDE = "decide"
    DRYRUN_DECIDE = "dryrun_decide"
    APPROVE = "approve"
    CONFIRM = "confirm"
    REJECT = "reject"
    RESUME = "resume"
    CASES = "cases"
    HISTORY = "history"
    TAKE = "take"
    NOTE = "note"
    HANDOFF = "handoff"
    WITHDRAW = "withdraw"
    DONE = "done"
    REPLAY = "replay"
    TEXT = "text"
    TRIAGE = "triage"
    BATCH_DECIDE = "batch_decide"
    DRYRUN_BATCH_DECIDE = "dryrun_batch_decide"
    BATCH = "batch"
    PENDING = "pending"
    DETAILS = "details"
    WATCH = "watch"
    INSTALLATIONS = "installations"
    BREAK_GLASS = "break_glass"
    REVIEW = "review"
    REMIND = "remind"


class Step(StrEnum):
    """The names of the audit step log's steps (``steps.step``), what ``audit export`` shows.

    A command's refusal is recorded under the command's own name (``decide``, ``approve``, …).
    """

    # commands, and their refusals
    DECIDE = "decide"
    DRYRUN_DECIDE = "dryrun_decide"
    APPROVE = "approve"
    CONFIRM = "confirm"
    REJECT = "reject"
    RESUME = "resume"
    WITHDRAW = "withdraw"
    REPLAY = "replay"
    CASES = "cases"
    HISTORY = "history"
    TAKE = "take"
    NOTE = "note"
    HANDOFF = "handoff"
    DIAGNOSE = "diagnose"
    DIAGNOSE_FOLLOWUP = "diagnose_followup"
    TRIAGE = "triage"
    WATCH = "watch"  # /recover watch pause|resume
    # watch mode: a stop's dedup key committed before it is posted (bot/watch/store.py)
    WATCH_STOP = "watch_stop"
    WATCH_HEALTH = "watch_health"  # the listing keeps failing, or reads again
    WATCH_DIGEST = "watch_digest"  # the stops held in quiet hours, taken for the one digest
    # the escalation ladder of a two-person request (bot/escalation): each step it runs, then the expiry
    REMIND = "remind"  # a refused /recover remind
    ESCALATION_REMINDED = "escalation_reminded"
    ESCALATION_MENTIONED = "escalation_mentioned"
    ESCALATION_WIDENED = "escalation_widened"
    ESCALATION_EXPIRED = "escalation_expired"
    # a decision request's life (docs/requests.md)
    REQUEST_STATE = "request_state"  # every transition, with ``from`` and ``to``
    DECISION_REQUESTED = "decision_requested"
    DECISION_APPROVED = "decision_approved"
    DECISION_CONFIRMED = "decision_confirmed"
    DECISION_REJECTED = "decision_rejected"
    DECISION_EXPIRED = "decision_expired"
    DECISION_WITHDRAWN = "decision_withdrawn"
    DECISION_VOID = "decision_void"
    DECISION_EFFECTS_RECHECKED = "decision_effects_rechecked"
    DECISION_SENDING = "decision_sending"
    DECISION_EXECUTED = "decision_executed"
    DECISION_UNCERTAIN = "decision_uncertain"
    DECISION_REFUSED_BY_API = "decision_refused_by_api"
    DECISION_REFUSED_NO_AUTHORITY = "decision_refused_no_authority"
    DECISION_WAIT_GAVE_UP = "decision_wait_gave_up"
    # break-glass (docs/requests.md): asked (or refused), the loud notice posted, the send alone, signed
    BREAK_GLASS_ASKED = "break_glass_asked"
    BREAK_GLASS_ANNOUNCED = "break_glass_announced"
    BREAK_GLASS = "break_glass"
    BREAK_GLASS_REVIEWED = "break_glass_reviewed"
    REVIEW = "review"  # a refused review
    VERIFICATION = "verification"
    # resume (R4.2)
    RESUME_REQUESTED = "resume_requested"
    RESUME_ACCEPTED = "resume_accepted"
    RESUME_REFUSED = "resume_refused"
    RESUME_UNCERTAIN = "resume_uncertain"
    RESUME_GAVE_UP = "resume_gave_up"
    RESUME_WITHDRAWN = "resume_withdrawn"
    # start-up
    UNFINISHED_FOUND = "unfinished_found"
    RECOVER_AFTER_RESTART = "recover_after_restart"
    # the reconciler (R1)
    RECONCILER_DRYRUN = "reconciler_dryrun"
    RECONCILER_PASS = "reconciler_pass"
    RECONCILER_REVIEWED = "reconciler_reviewed"
    # batches
    BATCH_REQUESTED = "batch_requested"
    BATCH_APPROVE = "batch_approve"  # a refused approval
    BATCH_APPROVED = "batch_approved"
    BATCH_CONFIRMED = "batch_confirmed"
    BATCH_REJECTED = "batch_rejected"
    BATCH_WITHDRAWN = "batch_withdrawn"
    BATCH_REFUSED = "batch_refused"
    BATCH_STOP = "batch_stop"
    BATCH_TAKE = "batch_take"
    BATCH_FINISHED = "batch_finished"
    BATCH_VERIFIED = "batch_verified"  # every accepted member's verification settled, said once
    BATCH_MEMBER_VOID = "batch_member_void"  # facts changed: skipped, nothing sent
    BATCH_MEMBER_SENDING = "batch_member_sending"  # its key stored; keeps the stream position before the send
    BATCH_MEMBER_EXECUTED = "batch_member_executed"
    BATCH_MEMBER_FAILED = "batch_member_failed"
    BATCH_MEMBER_UNCERTAIN = "batch_member_uncertain"
    # re-sent with its key up to the runbook's uncertain_retry_for, no definite answer: the next start re-sends it
    BATCH_MEMBER_STILL_UNCERTAIN = "batch_member_still_uncertain"
