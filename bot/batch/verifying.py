"""A batch's members after acceptance: each verified like a single decision, the batch told as one thing.

Why its own module: an accepted member is not a recovered session (R5.1). Each accepted member goes
through the decisions' own verification (``DecisionService.verify_accepted``, the entry a single
decision's receipt takes), so its case shows *verifying* and the decisions' sweep closes it only on
observed recovery, or records in the same case that it is failing again. What the sweep says about
members is not posted member by member: it is folded into the batch's one message, edited in place
(accepted, verifying, recovered, failing again, uncertain), and when every member is settled one
final message says how many recovered and names only those that did not. A line per member is
behind ``/recover details bat_…``.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bot.batch import text
from bot.batch.store import Batch, BatchMember, BatchStore
from bot.clock import isoformat
from bot.controlhost import Receipt
from bot.decisions import DecisionService
from bot.errors import RecoverError
from bot.messages import Level, Message
from bot.store import Store
from bot.vocab import Decision, RequestState, Step

ACCEPTED = "accepted, not verified yet"
VERIFYING = "verifying"
RECOVERED = "recovered"
FAILING = "failing again"
UNCERTAIN = "uncertain"
NOT_SENT = "not accepted"
#: The order the counts are said in.
SHOWN = (VERIFYING, RECOVERED, FAILING, UNCERTAIN, NOT_SENT)
#: What a verification step's outcome means for a member (the decisions' vocabulary, bot/decisions/_watch.py).
_OUTCOMES = {"verifying": VERIFYING, "recovered": RECOVERED, "failed_again": FAILING}
FINAL_KIND = "batch_verified"
LISTED = 20  # members named in the batch's own messages; every one is behind details


@dataclass(frozen=True)
class MemberState:
    session_id: str
    state: str
    why: str
    overdue: bool = False  # verifying past the start-up window with no ready report (said, never recovery)
    finishing: bool = False  # uncertain, its stored send being re-sent with its key (not settled yet)

    @property
    def settled(self) -> bool:
        return self.state not in (VERIFYING, ACCEPTED) and not self.finishing


class BatchVerification:
    """Verifies a batch's accepted members through the decisions' entry and words the batch as one."""

    def __init__(self, store: Store, batches: BatchStore, decisions: DecisionService) -> None:
        self.store = store
        self.batches = batches
        self.decisions = decisions

    # -- verification: the single decisions' entry, for each accepted member ------------------------

    def verify_members(self, batch: Batch, actor: str, workers: int) -> None:
        """Each accepted member not verified yet (after a crash too) gets the verification a single
        accepted decision gets (R5.1): its case shows *verifying* until recovery is observed."""
        todo = [
            m
            for m in self.batches.members(batch.id, (RequestState.EXECUTED,))
            if self._state(batch, m).state == ACCEPTED
        ]

        def one(member: BatchMember) -> None:
            record = self.store.get_request(member.idem_key) if member.idem_key else None
            if record is None:
                return
            receipt = Receipt.parse(record.response, http_status=record.http_status, idempotency_key=record.key)
            try:
                self.decisions.verify_accepted(
                    member.session_id,
                    actor,
                    batch.decision,
                    receipt,
                    {"reason": batch.reason, "cause_fixed": batch.cause_fixed},
                    # What its send was bound to (expected_revision): a worker that reported ready
                    # before this read, but after the send, still counts (R5.1).
                    facts_before=member.facts,
                )
            except RecoverError:
                return  # unread now: the member stays "accepted" and is named as such

        with cf.ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="batch-verify") as pool:
            list(pool.map(one, todo))

    # -- where each member stands, read from its case's steps ----------------------------------------

    def _state(self, batch: Batch, member: BatchMember) -> MemberState:
        sid = member.session_id
        if member.state == RequestState.UNCERTAIN:
            return self._uncertain(batch, member)
        if member.state != RequestState.EXECUTED:
            return MemberState(sid, NOT_SENT, f"{member.state}" + (f" ({member.code})" if member.code else ""))
        steps = self.store.steps(session_id=sid)
        start = max(
            (
                i
                for i, s in enumerate(steps)
                if s.step == Step.BATCH_MEMBER_EXECUTED and (s.inputs or {}).get("batch_id") == batch.id
            ),
            default=None,
        )
        if start is None:
            return MemberState(sid, ACCEPTED, "accepted")
        after = steps[start + 1 :]
        last = next((s for s in reversed(after) if s.step == Step.VERIFICATION), None)
        closed = next((s for s in reversed(after) if s.step == "case_closed"), None)
        if last is None:
            return MemberState(sid, ACCEPTED, "accepted")
        why = str((last.detail or {}).get("why") or "")
        state = _OUTCOMES.get(last.outcome)
        if state is None:  # a decision with nothing to watch: settled by the case, else unknown
            state = RECOVERED if closed is not None else UNCERTAIN
            why = str((closed.inputs or {}).get("reason")) if closed is not None else "the case is still open"
        elif state == RECOVERED and closed is not None:
            why = str((closed.inputs or {}).get("reason") or why)
        watch = (last.detail or {}).get("watch")
        overdue = state == VERIFYING and isinstance(watch, dict) and watch.get("overdue_said") is True
        return MemberState(sid, state, why, overdue)

    def _uncertain(self, batch: Batch, member: BatchMember) -> MemberState:
        """Uncertain: being re-sent with its own key (not settled), or given up on past the runbook's
        ``uncertain_retry_for`` (settled as uncertain; the next start re-sends it)."""
        last = next(
            (
                s
                for s in reversed(self.store.steps(session_id=member.session_id))
                if s.step in (Step.BATCH_MEMBER_UNCERTAIN, Step.BATCH_MEMBER_STILL_UNCERTAIN)
                and (s.inputs or {}).get("batch_id") == batch.id
            ),
            None,
        )
        code = f" ({member.code})" if member.code else ""
        if last is not None and last.step == Step.BATCH_MEMBER_STILL_UNCERTAIN:
            after = (last.detail or {}).get("after")
            why = f"no definite answer{code} after {after} of re-sends; re-sent with the same key at the next start"
            return MemberState(member.session_id, UNCERTAIN, why)
        why = f"no definite answer yet{code}; re-sent with its own Idempotency-Key until answered (R0.3)"
        return MemberState(member.session_id, UNCERTAIN, why, finishing=True)

    def states(self, batch: Batch) -> list[MemberState]:
        return [self._state(batch, m) for m in self.batches.members(batch.id)]

    # -- the batch as one thing ------------------------------------------------------------------------

    def counts_line(self, states: Sequence[MemberState]) -> str:
        counts = Counter(s.state for s in states)
        accepted = sum(counts[k] for k in (ACCEPTED, VERIFYING, RECOVERED, FAILING))
        return (
            f"accepted {accepted} · "
            + " · ".join(f"{k} {counts[k]}" for k in SHOWN)
            + (f" · {ACCEPTED} {counts[ACCEPTED]}" if counts[ACCEPTED] else "")
        )

    def lines(self, batch: Batch, states: Sequence[MemberState]) -> list[str]:
        """Where the members stand: the counts, and who fails again (named, so nobody has to dig)."""
        failing = [s for s in states if s.state == FAILING]
        lines = [self.counts_line(states)]
        if failing:
            lines.append("Failing again (do not repeat the decision before the cause is fixed, R5.4):")
            lines.extend(f"  {s.session_id}: {s.why}" for s in failing[:LISTED])
        finishing = [s for s in states if s.finishing]
        if finishing:
            lines.append(
                f"Uncertain ({len(finishing)}): no definite answer yet; each is re-sent with its own "
                "Idempotency-Key until answered, never anew (R0.3), then verified:"
            )
            lines.extend(f"  {s.session_id}" for s in finishing[:LISTED])
        late = [s for s in states if s.overdue]
        if late:
            # The single path says this once per case (R5.1: time passing is not recovery); here once per batch.
            lines.append(
                f"Still verifying: no worker has reported ready within the start-up window ({len(late)}); "
                "their cases stay open until one does (R5.1):"
            )
            lines.extend(f"  {s.session_id}" for s in late[:LISTED])
        return lines

    def details_line(self, batch: Batch) -> str:
        return f"Each case closes only on observed recovery (R5.1); one line per member: `/recover details {batch.id}`."

    def message(self, batch: Batch, states: Sequence[MemberState] | None = None) -> Message:
        """The batch's one message (the run's own, edited in place): the counts, and who fails again."""
        states = list(states if states is not None else self.states(batch))
        counts, codes = self.batches.counts(batch.id), self.batches.codes(batch.id)
        lines = [
            *self.lines(batch, states),
            "Sent: " + text.counts_line(counts, codes, len(states)),
            self.details_line(batch),
        ]
        return Message(
            headline=f"Batch {batch.id}: `{batch.decision}` · {self.phase(states)} · {len(states)} member(s)",
            level=self.level(states),
            lines=lines,
            kind="batch_progress",
            ref=batch.id,
            session_id=batch.id,
            rules=["R5.1"],
        )

    @staticmethod
    def phase(states: Sequence[MemberState]) -> str:
        return "verified" if all(s.settled for s in states) else "verifying"

    @staticmethod
    def level(states: Sequence[MemberState]) -> Level:
        if any(s.state == FAILING for s in states):
            return "error"
        return "ok" if all(s.settled for s in states) else "progress"

    def settle(self, batch: Batch, states: Sequence[MemberState]) -> Message | None:
        """Once every member is settled: ONE final message (a compare-and-set: one process says it)."""
        if not all(s.settled for s in states):
            return None
        with self.store.write() as db:
            won = (
                db.execute(
                    "UPDATE batches SET verified_at = ? WHERE id = ? AND verified_at IS NULL",
                    [isoformat(self.store.clock.now()), batch.id],
                ).rowcount
                == 1
            )
        if not won:
            return None
        recovered = [s for s in states if s.state == RECOVERED]
        others = [s for s in states if s.state != RECOVERED]
        self.store.record_step(
            None,
            "recover-bot",
            Step.BATCH_VERIFIED,
            {"batch_id": batch.id},
            "settled",
            detail=dict(Counter(s.state for s in states)),
        )
        lines = (
            [f"Not recovered ({len(others)}):", *(f"  {s.session_id}: {s.state} — {s.why}" for s in others[:LISTED])]
            if others
            else []
        )
        if len(others) > LISTED:
            lines.append(f"  … {len(others) - LISTED} more: `/recover details {batch.id}`")
        level: Level = "ok" if not others else "warn"
        word = "closed" if batch.decision == Decision.CLOSE else "recovered"  # close ends, never recovers
        return Message(
            headline=f"Batch {batch.id}: `{batch.decision}` settled · {len(recovered)}/{len(states)} {word} (observed)",
            level=level,
            lines=lines,
            kind=FINAL_KIND,
            ref=batch.id,
            session_id=batch.id,
            rules=["R5.1"],
        )

    def report(self, batch: Batch) -> list[Message]:
        """The batch's message as it stands, and the final one if every member is settled now."""
        states = self.states(batch)
        final = self.settle(batch, states)
        return [self.message(batch, states), *([final] if final is not None else [])]

    def fold(self, messages: Sequence[Message]) -> list[Message]:
        """The sweep's per-member news folded into each batch's one message (no post per member)."""
        open_batches = [b for b in self.batches.find((RequestState.EXECUTED,)) if b.verified_at is None]
        if not open_batches:
            return list(messages)
        member_of: dict[str, Batch] = {}
        for b in open_batches:
            member_of.update({m.session_id: b for m in self.batches.members(b.id, (RequestState.EXECUTED,))})
        kept: list[Message] = []
        touched: dict[str, Batch] = {}
        for m in messages:
            batch = member_of.get(m.session_id or "")
            if batch is None:
                kept.append(m)
            else:
                touched[batch.id] = batch
        for batch in touched.values():
            kept.extend(self.report(batch))
        return kept

    def member_lines(self, batch: Batch) -> list[str]:
        """One line per member, for ``details`` only."""
        return [f"{s.session_id}: {s.state}" + (f" — {s.why}" if s.why else "") for s in self.states(batch)]
