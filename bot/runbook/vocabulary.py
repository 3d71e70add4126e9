"""The fixed names runbook YAML may refer to: diagnosis facts and step kinds.

The fact vocabulary mirrors ``docs/facts.md`` (a test keeps them equal): a runbook condition or template
that names anything else is rejected at load time, so a typo cannot silently make a branch unreachable.
Step kinds are what Python implements; a runbook picks one per subcommand.
"""

from __future__ import annotations

from bot.vocab import Policy, StepKind

#: The sources ``diagnose`` reads; each gets a ``source.<name>`` fact (ok, slow, unreachable, not_configured).
SOURCES: tuple[str, ...] = ("session", "turns", "events", "logs", "reconciler")

# The fact vocabulary by source (docs/facts.md). Diagnosis fills exactly these names; a runbook
# condition or template may use nothing else.
SESSION_FACTS: tuple[str, ...] = (
    "session.found",
    "session.status",
    "session.admission_state",
    "session.revision",
    "session.resumable",
    "session.queued_inputs",
    "attention.present",
    "attention.code",
    "attention.reason",
    "attention.failures",
    "attention.retry_at",
    "attention.in_backoff",
    "checkpoint.present",
    "checkpoint.id",
    "checkpoint.covers_turn_id",
    "execution.state",
    "execution.confirmed_gone",
    "execution.confirmed_gone_at",
)
TURN_FACTS: tuple[str, ...] = (
    "unknown_turn.present",
    "unknown_turn.id",
    "unknown_turn.terminal_reason",
    "unknown_turn.control_id",
    "unknown_turn.covered_by_checkpoint",
)
EVENT_FACTS: tuple[str, ...] = (
    "events.restore_failed",
    "events.startup_failed",
    "events.last_seq",
    "events.ready_seq",
    "events.ready_generation",
    "events.ready_names_checkpoint",
    "events.ready_checkpoint_id",
)
LOG_FACTS: tuple[str, ...] = (
    "logs.lines",
    "logs.restore_unavailable",
    "logs.store_unavailable",
    "logs.restore_refused",
    "logs.permanent_damage",
    "logs.worker_failed",
    "logs.stopping_failed",
    "logs.stop_kind_refused",
    "logs.likely_cause",
    "logs.interrupt_unanswered",
    "logs.outage_ongoing",
    "logs.timeline_turn_id",
    "logs.late_sdk_interrupt_answered",
    "logs.engine_terminal_timeout",
    "logs.capture_timeout",
    "logs.capture_failed",
    "logs.finalize_checkpoint_unavailable",
    "logs.missing_stages",
    "logs.control_result_outcome",
    "logs.control_result_reason_code",
)
RECONCILER_FACTS: tuple[str, ...] = ("reconciler.last_pass", "reconciler.last_pass_at")

#: Every fact, in a stable order (the order diagnose shows them in).
ALL_FACTS: tuple[str, ...] = (
    "now",
    "session.id",
    *SESSION_FACTS,
    *TURN_FACTS,
    *EVENT_FACTS,
    *LOG_FACTS,
    *RECONCILER_FACTS,
    *(f"source.{name}" for name in SOURCES),
)

#: Every fact name a runbook condition or template may use (docs/facts.md).
FACT_NAMES: frozenset[str] = frozenset(ALL_FACTS)

#: Step kinds implemented in Python. A subcommand's ``kind`` must be one of these.
STEP_KINDS: frozenset[str] = frozenset(k.value for k in StepKind)

#: Approval policies the decision machinery implements.
APPROVAL_POLICIES: frozenset[str] = frozenset(p.value for p in Policy)
