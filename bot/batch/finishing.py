"""A batch's uncertain members finished after the run, by the decisions' own finishing (R0.3).

Why its own module: a member whose send got no definite answer (the answer lost, a timeout, a crash
between the send and its record) may have been applied. It is never dropped and never sent anew: the
decisions' one owner of that (``DecisionService.finish_uncertain``, the loop a single decision's
uncertain request takes) re-sends its stored record with its own Idempotency-Key until an answer is
recorded. Only what is particular to a member is here: it is sent through the gate's batch grant,
settled in the batch's store, then verified like every accepted member (R5.1), and the batch's one
message is edited in place, with its final message once every member is settled. No post per member.
"""

from __future__ import annotations

import functools
from typing import Protocol

from sqlite_utils import Database

from bot.batch.runner import Fence, Outcome
from bot.batch.store import Batch, BatchMember, BatchStore
from bot.batch.verifying import BatchVerification
from bot.controlhost import Receipt
from bot.decisions import BatchGrant, DecisionService, NoAuthority
from bot.errors import ControlHostError
from bot.messages import Reporter
from bot.store import IdempotencyRecord, Store
from bot.vocab import RequestState, Step

BOT = "recover-bot"


class MemberOwner(Protocol):
    """What finishing a member needs of the batch service (which imports this module)."""

    batches: BatchStore
    store: Store
    verification: BatchVerification
    decisions: DecisionService

    def grant(self, batch_id: str) -> BatchGrant: ...

    def send_member(self, grant: BatchGrant, session_id: str, record: IdempotencyRecord) -> Receipt: ...

    def settle_many(self, batch: Batch, actor: str, outcomes: list[Outcome], fence: Fence | None = None) -> None: ...


class MemberSend:
    """One uncertain member as the decisions' finishing re-sends it (``bot.decisions.Unanswered``)."""

    def __init__(self, owner: MemberOwner, batch_id: str, session_id: str, reporter: Reporter) -> None:
        self.owner = owner
        self.batch_id = batch_id
        self.session_id = session_id
        self.reporter = reporter
        self.key = f"{batch_id}:{session_id}"

    def _batch(self) -> Batch | None:
        return self.owner.batches.get(self.batch_id)

    def _member(self) -> BatchMember | None:
        member = self.owner.batches.member(self.batch_id, self.session_id)
        return member if member is not None and member.state == RequestState.UNCERTAIN and member.idem_key else None

    def stored(self) -> IdempotencyRecord | None:
        member = self._member()
        return self.owner.store.get_request(member.idem_key) if member is not None and member.idem_key else None

    def send(self, record: IdempotencyRecord) -> None:
        """Through the gate with the batch's grant, re-read from the chain for every attempt."""
        try:
            receipt = self.owner.send_member(self.owner.grant(self.batch_id), self.session_id, record)
        except NoAuthority as exc:
            self._settle(RequestState.VOID, code="NO_AUTHORITY", detail=exc.reason)
            return
        self._settle(
            RequestState.EXECUTED, key=record.key, receipt_id=receipt.id, http_status=receipt.http_status or 200
        )

    def refused(self, exc: ControlHostError) -> None:
        self._settle(RequestState.FAILED, code=exc.code, http_status=exc.status, detail=exc.message)

    def unanswered(self, exc: ControlHostError, attempt: int) -> None:
        member = self._member()
        if member is None:
            return  # settled meanwhile (another bot's finishing): nothing left to record
        with self.owner.store.write() as db:
            self._fence(db, member.idem_key)  # an attempt's record is the holder's alone, as a request's is
            self.owner.store.record_step(
                self.session_id,
                BOT,
                Step.BATCH_MEMBER_UNCERTAIN,
                {"batch_id": self.batch_id, "attempt": attempt},
                exc.code,
                http_status=exc.status,
                idempotency_key=member.idem_key,
                db=db,
            )

    def gave_up(self, total: str, until: str | None) -> None:
        """Still uncertain past the runbook's limit: settled as uncertain in the batch's message (the
        next start re-sends it with the same key)."""
        member = self._member()
        if member is None:
            return  # settled meanwhile: its outcome is in the batch's message already
        with self.owner.store.write() as db:
            self._fence(db, member.idem_key)
            self.owner.store.record_step(
                self.session_id,
                BOT,
                Step.BATCH_MEMBER_STILL_UNCERTAIN,
                {"batch_id": self.batch_id},
                RequestState.UNCERTAIN,
                detail={"after": total, "until": until},
                db=db,
            )
        self._report()

    def _fence(self, db: Database, key: str | None) -> None:
        """The member's send lease, checked in the transaction that records under it: a deposed
        finisher (paused past its lease) records nothing (bot/decisions/_sendlease.py)."""
        if key:
            self.owner.decisions.ctx.sends.fence(db, key)

    def _settle(self, to: str, **values: str | int | None) -> None:
        batch = self._batch()
        if batch is None:
            return
        member = self._member()
        key = member.idem_key if member is not None else None
        fence = functools.partial(self._fence, key=key) if key else None  # a deposed re-sender records nothing
        self.owner.settle_many(batch, BOT, [(self.session_id, (RequestState.UNCERTAIN,), to, dict(values))], fence)
        if to == RequestState.EXECUTED:
            # Accepted is not recovered (R5.1): verified like every accepted member.
            self.owner.verification.verify_members(self._batch() or batch, BOT, 1)
        self._report()

    def _report(self) -> None:
        batch = self._batch()
        if batch is not None:
            for message in self.owner.verification.report(batch):
                self.reporter.post(message)  # the batch's message, edited in place (kind and ref)
