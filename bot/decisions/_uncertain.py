"""Finishing an ``uncertain`` decision in the background (docs/requests.md).

A decision that got no definite answer (5xx, a timeout, a reply dropped after the control host
committed) may or may not have taken effect. Nobody should have to re-send it by hand, and nothing new
may be sent for it: the bot re-sends the *stored* request — same Idempotency-Key, same body, so the
control host applies it at most once — with a doubling wait, for as long as the runbook's
``uncertain_retry_for`` allows, and says each outcome in the case's thread. The chain's authority is
re-derived before every re-send. After the limit the request stays ``uncertain`` and the next start
re-sends it again. This only finishes delivering what a person decided; it never re-runs a turn (R0.3).

A batch member whose send got no definite answer is finished by the same loop (:meth:`UncertainSends.run`
over an :class:`Unanswered`): the batch says how a member is sent through the gate and settled, this
module alone says when and how often it is re-sent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

from bot.controlhost import Receipt
from bot.decisions import _text as text
from bot.decisions._authority import Gate
from bot.decisions._context import BOT as BOT_ACTOR
from bot.decisions._context import DecisionContext
from bot.decisions._poll import Pace, poll
from bot.decisions._requests import DecisionRequest
from bot.errors import ControlHostError
from bot.messages import Message, Reply, Reporter
from bot.runbook.usage import typed_line
from bot.store import IdempotencyRecord
from bot.store.leases import LeaseLost
from bot.vocab import RequestState, Step

log = logging.getLogger("bot.decisions")


def is_uncertain(exc: ControlHostError) -> bool:
    """No definite answer: no status, 5xx, 408/429, or a 2xx whose receipt could not be read."""
    status = exc.status
    return status is None or status >= 500 or status in (408, 429) or exc.code == "BAD_RESPONSE"


class Finisher:
    """At most one background thread per request; tests and shutdown can wait for them."""

    def __init__(self) -> None:
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, request_id: str, job: Callable[[], None]) -> bool:
        """Start ``job`` unless one is already running for this request (then False)."""
        with self._lock:
            running = self._threads.get(request_id)
            if running is not None and running.is_alive():
                return False
            thread = threading.Thread(target=_logged, args=(job,), name=f"finish-{request_id}", daemon=True)
            self._threads[request_id] = thread
            thread.start()
            return True

    def running(self, request_id: str) -> bool:
        with self._lock:
            thread = self._threads.get(request_id)
            return thread is not None and thread.is_alive() and thread is not threading.current_thread()

    def wait(self, timeout: float = 30.0) -> bool:
        """True once every background finishing has ended."""
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
        return not any(t.is_alive() for t in threads if t is not threading.current_thread())


def _logged(job: Callable[[], None]) -> None:
    try:
        job()
    except Exception:  # a background thread has nobody to raise to
        log.exception("finishing an uncertain decision failed")


Settle = Callable[[DecisionRequest, str, Receipt], Reply]
SettleError = Callable[[DecisionRequest, str, ControlHostError, Reporter], Reply]


class UncertainSends:
    """Marks a request ``uncertain`` and re-sends its stored record in the background until settled.

    Composed with what settles an answer (``on_accepted``/``on_error``, the execution's outcomes) and
    the gate (bot/decisions/_authority.py), which proves and sends every attempt.
    """

    def __init__(self, ctx: DecisionContext, gate: Gate, on_accepted: Settle, on_error: SettleError) -> None:
        self.ctx = ctx
        self.gate = gate
        self.on_accepted = on_accepted
        self.on_error = on_error
        self.finisher = Finisher()

    def bounds(self) -> tuple[float, float, float]:
        limit = self.ctx.runbooks.limit
        return limit("uncertain_retry_initial"), limit("uncertain_retry_max"), limit("uncertain_retry_for")

    def mark(self, req: DecisionRequest, actor: str, exc: ControlHostError) -> None:
        """``sending → uncertain``, with its step (the request keeps its key and body)."""
        ctx = self.ctx
        with ctx.store.write() as db:
            if req.idem_key:
                ctx.sends.fence(db, req.idem_key)  # a deposed sender records nothing
            ctx.requests.transition(
                db,
                req.id,
                (RequestState.SENDING,),
                RequestState.UNCERTAIN,
                actor=actor,
                http_status=exc.status,
                error_code=exc.code,
                note="sent, no definite answer",
            )
            ctx.record(
                req.session_id,
                actor,
                Step.DECISION_UNCERTAIN,
                {"request_id": req.id},
                exc.code,
                http_status=exc.status,
                idempotency_key=req.idem_key,
                db=db,
            )

    def start(self, req: DecisionRequest, actor: str, exc: ControlHostError, reporter: Reporter) -> Reply:
        """The request is ``uncertain``: say so truthfully and finish it in the background."""
        self.mark(req, actor, exc)
        every, cap, total = self.bounds()
        self.finisher.start(req.id, lambda: self.finish(req.id, reporter))
        sid = req.session_id
        return Reply.of(
            Message(
                headline=(
                    f"`{req.decision}` on `{sid}`: no definite answer yet ({exc.code}) — finishing it in the background"
                ),
                level="warn",
                lines=[
                    f"Request {req.id} is uncertain: it may or may not have taken effect. The bot re-sends the same "
                    f"request (same Idempotency-Key, same body, so it applies at most once) after "
                    f"{text.duration(every)}, doubling to {text.duration(cap)}, for up to {text.duration(total)}, "
                    "and posts the outcome in this thread.",
                    "Nothing needs doing by hand; do not decide again until it is settled.",
                ],
                rules=["R0.3"],
                session_id=sid,
            ),
            ok=False,
        )

    def finish(self, request_id: str, reporter: Reporter) -> None:
        """Re-send the request's stored record (same key, same body) until a definite answer."""
        self.run(_RequestSend(self, request_id, reporter))

    def background(self, send: Unanswered) -> bool:
        """Finish ``send`` in the background (False when it is already being finished)."""
        return self.finisher.start(send.key, lambda: self.run(send))

    def run(self, send: Unanswered) -> None:
        """THE finishing of a send whose answer never came, a single decision's or a batch member's:
        its stored record re-sent (same key, same body: applied at most once) on the bounded poll,
        first after ``uncertain_retry_initial``, doubling to ``uncertain_retry_max``, for up to
        ``uncertain_retry_for``; each attempt through the gate (``send.send``), which re-derives its
        authority. Past the limit it stays uncertain, said so, and the next start re-sends it."""
        ctx = self.ctx
        every, cap, total = self.bounds()
        attempts = 0

        def attempt() -> bool | None:
            nonlocal attempts
            record = send.stored()
            if record is None:
                return True  # settled elsewhere (another process, a restart)
            # Each attempt holds the record's send lease: while another holder's
            # send is live nothing is sent now (the next attempt looks again: settled, or its holder
            # died); a deposed attempt records nothing and stops (the new holder's result stands).
            try:
                with ctx.sends.hold(record.key) as holding:
                    if holding is None:
                        return None
                    attempts += 1
                    try:
                        send.send(record)
                    except ControlHostError as exc:
                        if not is_uncertain(exc):
                            send.refused(exc)
                            return True
                        send.unanswered(exc, attempts)
                        return None
                    return True
            except LeaseLost as exc:
                log.warning("%s: %s", send.key, exc.message)
                return True

        # One bot finishes it at a time (``finish:<key>``); when this bot stops, the lease runs out and
        # another bot's periodic job takes the finishing over.
        with ctx.sends.finishing(send.key) as mine:
            if not mine:
                return
            until = ctx.now() + timedelta(seconds=total)
            if poll(ctx.clock, until, Pace(every, cap), attempt, attempt_first=False):
                return
            if send.stored() is None:
                return
            log.warning("%s still uncertain after %.0f s", send.key, total)
            send.gave_up(text.duration(total), ctx.iso(until))


class Unanswered(Protocol):
    """One stored send whose answer never came, as :meth:`UncertainSends.run` finishes it; its owner
    (a decision request, a batch member) says how it is sent through the gate and settled."""

    #: One background finishing per key (a request id, a batch member).
    key: str

    def stored(self) -> IdempotencyRecord | None:
        """Its stored record while it is still uncertain; None once settled (anywhere)."""

    def send(self, record: IdempotencyRecord) -> None:
        """Send ``record`` through the gate and settle an answer or a refusal by the chain (said);
        raises the ControlHostError of an attempt without a definite answer or with a refusal."""

    def refused(self, exc: ControlHostError) -> None:
        """The control host's definite refusal: settle it and say so."""

    def unanswered(self, exc: ControlHostError, attempt: int) -> None:
        """One more attempt without a definite answer: record it (it is re-sent again)."""

    def gave_up(self, total: str, until: str | None) -> None:
        """Still uncertain after ``total``: say so (it stays uncertain; the next start re-sends it)."""


class _RequestSend:
    """A single decision request as :meth:`UncertainSends.run` finishes it."""

    def __init__(self, sends: UncertainSends, request_id: str, reporter: Reporter) -> None:
        self.sends = sends
        self.key = request_id
        self.reporter = reporter

    def _req(self) -> DecisionRequest | None:
        req = self.sends.ctx.requests.get(self.key)
        return req if req is not None and req.state == RequestState.UNCERTAIN and req.idem_key else None

    def stored(self) -> IdempotencyRecord | None:
        req = self._req()
        return self.sends.ctx.store.get_request(req.idem_key) if req is not None and req.idem_key else None

    def send(self, record: IdempotencyRecord) -> None:
        req = self._req()
        if req is None:
            return
        sent = self.sends.gate.send_decision(req, BOT_ACTOR, record, self.reporter)
        if isinstance(sent, Reply):
            return  # refused: voided, posted and logged by the gate
        for message in self.sends.on_accepted(req, BOT_ACTOR, sent).messages:
            self.reporter.post(message)

    def refused(self, exc: ControlHostError) -> None:
        req = self._req()
        if req is not None:
            for message in self.sends.on_error(req, BOT_ACTOR, exc, self.reporter).messages:
                self.reporter.post(message)

    def unanswered(self, exc: ControlHostError, attempt: int) -> None:
        req = self._req()
        if req is None or not req.idem_key:
            return
        ctx = self.sends.ctx
        with ctx.store.write() as db:
            ctx.sends.fence(db, req.idem_key)  # an attempt's record is the holder's alone
            ctx.record(
                req.session_id,
                BOT_ACTOR,
                Step.DECISION_UNCERTAIN,
                {"request_id": req.id, "attempt": attempt},
                exc.code,
                http_status=exc.status,
                idempotency_key=req.idem_key,
                db=db,
            )
        self.reporter.progress(
            Message(
                headline=f"`{req.decision}` on `{req.session_id}`: still no definite answer "
                f"({exc.code}); re-sending the same request again",
                level="progress",
                rules=["R0.3"],
                session_id=req.session_id,
            )
        )

    def gave_up(self, total: str, until: str | None) -> None:
        req = self._req()
        if req is None:
            return
        self.reporter.post(
            text.refusal(
                f"`{req.decision}` on `{req.session_id}` is still uncertain after {total}",
                f"Request {req.id} got no definite answer by {until}; it stays uncertain and is re-sent "
                "with the same key when the bot next starts.",
                f"Check the control host, and the session with `{typed_line('diagnose', req.session_id)}`.",
                rules=["R0.3"],
                session_id=req.session_id,
            )
        )
