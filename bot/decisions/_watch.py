"""The recovery rule: what a re-read of a session shows after an accepted decision or resume.

Why its own module: acceptance is not the worker being gone nor a successful resume (R5.1, R5.2;
the seed: "수락은 worker 부재나 실제 재개 성공과 다르다"), so a case stays open, *verifying*, after
an accepted ``retry_restore``, ``start_fresh`` or resume, and closes only on evidence the seed names:
a worker reporting ready after the send (R2.1: a restore or start worked once its worker reports
ready), with the session's revision, admission and status consistent with it (R5.1), and after a
resume that worker having restored the checkpoint the resume continues from (R5.2). Never because
the answer or a read shows no attention (a host may clear it in its answer), never because time
passed. The rule is one pure function of (before the send, the answer, a later read), so every path
that re-reads a session — the verification right after the receipt, the periodic sweep, a diagnosis,
a batch member — judges it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from bot.clock import isoformat, parse_time

VERIFYING = "verifying"
RECOVERED = "recovered"
FAILED_AGAIN = "failed_again"
GAVE_UP = "unconfirmed"  # R5.2 cannot be known from the host: the case stays open, the watch ends
_COUNTED = ("RESTORE_FAILED", "STARTUP_FAILED")
# What is kept of the read made just before a send: the evidence after it is judged against it.
BEFORE_FACTS = ("events.last_seq", "session.revision", "checkpoint.id")
#: The detail name under which a sending step keeps :func:`before_send` of its pre-send read.
BEFORE = "before"


def before_send(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the pre-send read a later verification needs (recorded with the sending step)."""
    return {name: facts.get(name) for name in BEFORE_FACTS}


@dataclass(frozen=True)
class Watch:
    """An open verification: which decision, since when, how often to look, the start-up window, and
    what it is judged against — the event stream's position before the send (``after_seq``), the
    revision the answer gave (``receipt_revision``) and, for a resume, the checkpoint it continues from."""

    decision: str
    since: str
    every: float
    window: float
    after_seq: int | None = None
    receipt_revision: int | None = None
    checkpoint_id: str | None = None
    overdue_said: bool = False  # the start-up window passed and the case said so (once)

    @classmethod
    def start(
        cls,
        decision: str,
        *,
        since: str,
        every: float,
        window: float,
        before: Mapping[str, Any],
        receipt_revision: int | None,
    ) -> Watch:
        """A watch over (before, answer): ``before`` is :func:`before_send` of the pre-send read."""
        seq = before.get("events.last_seq")
        checkpoint = before.get("checkpoint.id")
        return cls(
            decision=decision,
            since=since,
            every=every,
            window=window,
            after_seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
            receipt_revision=receipt_revision,
            checkpoint_id=checkpoint if isinstance(checkpoint, str) else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "since": self.since,
            "every": self.every,
            "window": self.window,
            "after_seq": self.after_seq,
            "receipt_revision": self.receipt_revision,
            "checkpoint_id": self.checkpoint_id,
            "overdue_said": self.overdue_said,
        }

    @classmethod
    def parse(cls, data: object) -> Watch | None:
        if not isinstance(data, Mapping):
            return None

        def opt_int(name: str) -> int | None:
            value = data.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        def opt_str(name: str) -> str | None:
            value = data.get(name)
            return value if isinstance(value, str) else None

        try:
            return cls(
                decision=str(data["decision"]),
                since=str(data["since"]),
                every=float(data["every"]),
                window=float(data["window"]),
                after_seq=opt_int("after_seq"),
                receipt_revision=opt_int("receipt_revision"),
                checkpoint_id=opt_str("checkpoint_id"),
                overdue_said=data.get("overdue_said") is True,
            )
        except (KeyError, TypeError, ValueError):
            return None

    def said_overdue(self) -> Watch:
        return replace(self, overdue_said=True)

    def window_ends(self) -> datetime | None:
        since = parse_time(self.since)
        return since + timedelta(seconds=self.window) if since is not None else None


@dataclass(frozen=True)
class Observation:
    """One re-read's verdict, the sentence people read in the case thread, and the evidence it used
    (recorded with the verification step and the case's closing, R5.1). ``overdue``: still verifying
    past the start-up window — said once, never taken as recovery."""

    state: str
    why: str
    evidence: dict[str, Any] = field(default_factory=dict)
    overdue: bool = False


def observe(watch: Watch, facts: Mapping[str, Any], now: datetime) -> Observation:
    """Judge a later read against the watch (before the send, the answer): the facts decide, never the
    receipt, an absent attention or the clock (R5.1, R5.2, R2.1, R2.2)."""
    status = facts.get("session.status")
    admission = facts.get("session.admission_state")
    code = facts.get("attention.code")
    failures = facts.get("attention.failures")
    if status == "closed" or admission == "closed":
        return Observation(
            RECOVERED, "the session is closed", {"session.status": status, "session.admission_state": admission}
        )
    if facts.get("unknown_turn.present") is True:
        turn = facts.get("unknown_turn.id") or "a turn"
        return Observation(
            FAILED_AGAIN,
            f"turn {turn} ended outcome_unknown ({facts.get('unknown_turn.terminal_reason') or 'no terminal_reason'})",
        )
    if code in _COUNTED and isinstance(failures, int) and failures > 0:
        reason = facts.get("attention.reason") or "no reason given"
        retry_at = facts.get("attention.retry_at")
        when = f", next attempt at {retry_at}" if retry_at else ", stopped (retry_at null)"
        return Observation(FAILED_AGAIN, f"{code} again ({reason}), failures {failures}{when}")
    if admission == "recovery_required" or status == "failed":
        return Observation(
            FAILED_AGAIN, f"the session is {status}, admission {admission}" + (f", attention {code}" if code else "")
        )
    ready = _ready_after(watch, facts)
    if ready is not None:
        evidence = _evidence(watch, facts, ready)
        inconsistent = _inconsistent(watch, facts)
        if inconsistent:
            return Observation(VERIFYING, f"a worker reported ready (event {ready}), but {inconsistent}", evidence)
        past = f" (the answer's {watch.receipt_revision})" if watch.receipt_revision is not None else ""
        said = (
            f"the next worker (generation {facts.get('events.ready_generation') or 'unknown'}) reported ready "
            f"after the send (event {ready}); the session is {status}, admission open, revision "
            f"{facts.get('session.revision')}{past}"
        )
        if watch.decision != "resume":
            return Observation(RECOVERED, said, evidence)
        return _resumed(watch, facts, said, evidence)
    ends = watch.window_ends()
    overdue = ends is not None and now >= ends
    return Observation(VERIFYING, _waiting(watch, facts, ends, overdue), overdue=overdue)


def _ready_after(watch: Watch, facts: Mapping[str, Any]) -> int | None:
    """The seq of a ready report made after the send, if the read shows one. Without the stream's
    position before the send no report can be told from an earlier worker's: none counts."""
    seq = facts.get("events.ready_seq")
    if not isinstance(seq, int) or watch.after_seq is None or seq <= watch.after_seq:
        return None
    return seq


def _inconsistent(watch: Watch, facts: Mapping[str, Any]) -> str | None:
    """R5.1: the session's own fields must agree with a ready report (running or idle, admission open,
    a revision past the answer's: a report moves it)."""
    status = facts.get("session.status")
    admission = facts.get("session.admission_state")
    revision = facts.get("session.revision")
    if status not in ("running", "idle") or admission != "open":
        return f"the session is {status}, admission {admission}"
    if isinstance(revision, int) and watch.receipt_revision is not None and revision <= watch.receipt_revision:
        return f"the revision ({revision}) has not moved past the answer's ({watch.receipt_revision})"
    return None


def _evidence(watch: Watch, facts: Mapping[str, Any], ready: int) -> dict[str, Any]:
    return {
        "events.ready_seq": ready,
        "events.after_seq": watch.after_seq,
        "events.ready_generation": facts.get("events.ready_generation"),
        "events.ready_checkpoint_id": facts.get("events.ready_checkpoint_id"),
        "session.revision": facts.get("session.revision"),
        "receipt.revision": watch.receipt_revision,
        "session.status": facts.get("session.status"),
        "session.admission_state": facts.get("session.admission_state"),
        "session.resumable": facts.get("session.resumable"),
    }


def _resumed(watch: Watch, facts: Mapping[str, Any], said: str, evidence: dict[str, Any]) -> Observation:
    """R5.2: after a resume, running again is not enough: the worker must show it restored the
    checkpoint the resume continues from; when the host does not say, the bot says it cannot know."""
    wanted = watch.checkpoint_id
    evidence = {**evidence, "checkpoint.resumed_from": wanted}
    if facts.get("events.ready_names_checkpoint") is not True:
        return Observation(
            GAVE_UP,
            f"{said}, but the control host does not say which checkpoint that worker restored: whether the "
            f"new turn picked up the context of checkpoint {wanted or 'unknown'} cannot be known from here (R5.2)",
            evidence,
        )
    restored = facts.get("events.ready_checkpoint_id")
    if wanted is not None and restored == wanted:
        return Observation(
            RECOVERED,
            f"{said}, having restored checkpoint {wanted}, the one the resume continues from (R5.2)",
            evidence,
        )
    return Observation(
        FAILED_AGAIN,
        f"the worker reported ready without the checkpoint's context: it restored {restored or 'no checkpoint'}, "
        f"not {wanted or 'the resumed checkpoint'} (R5.2)",
        evidence,
    )


def _waiting(watch: Watch, facts: Mapping[str, Any], ends: datetime | None, overdue: bool) -> str:
    until = isoformat(ends) if ends is not None else "unknown"
    what = (
        "the resumed worker to report ready with the checkpoint's context (R5.2)"
        if watch.decision == "resume"
        else "the next worker to report ready"
    )
    now = (
        f"now status {facts.get('session.status')}, admission {facts.get('session.admission_state')}, "
        f"attention {_none(facts.get('attention.code'))}, failures {_none(facts.get('attention.failures'))}"
    )
    if overdue:
        return f"no worker has reported ready since the send, and the start-up window ended at {until}; {now}"
    return f"waiting for {what} (start-up window until {until}); {now}"


def _none(value: object) -> str:
    """None for none (no attention block), as everywhere in the bot's words."""
    return "none" if value is None else str(value)
