"""Finishing an ``uncertain`` decision in the background (docs/requests.md).

A decision that got no definite answer (5xx, a timeout, a reply dropped after the control host
committed) may or may not have taken effect. Nobody should have to re-send it by hand, and nothing new
may be sent for it: the bot re-sends the *stored* request — same Idempotency-Key, same body, so the
control host applies it at most once — with a doubling wait, for as long as the runbook's
``uncertain_retry_for`` allows, and says each outcome in the case's thread. The chain's authority is
re-derived before every re-send. After the limit the request stays ``uncertain`` and the next start
re-sends it again. This only finishes delivering what a person decided; it never re-runs a turn (R0.3).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from bot.controlhost import Receipt
from bot.decisions import _text as text
from bot.decisions._authority import Gate
from bot.decisions._context import BOT as BOT_ACTOR
from bot.decisions._context import DecisionContext
from bot.decisions._poll import Pace, poll
from bot.decisions._requests import DecisionRequest
from bot.errors import ControlHostError
from bot.messages import Message, Reply, Reporter
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
        """Re-send the stored record (same key, same body) on the bounded poll until a definite answer."""
        ctx = self.ctx
        every, cap, total = self.bounds()
        start = ctx.now()
        attempts = 0

        def attempt() -> bool | None:
            nonlocal attempts
            req = ctx.requests.get(request_id)
            if req is None or req.state != RequestState.UNCERTAIN or not req.idem_key:
                return True  # settled elsewhere (another process, a restart)
            record = ctx.store.get_request(req.idem_key)
            if record is None:
                return True
            attempts += 1
            try:
                sent = self.gate.send_decision(req, BOT_ACTOR, record, reporter)
            except ControlHostError as exc:
                if not is_uncertain(exc):
                    for message in self.on_error(req, BOT_ACTOR, exc, reporter).messages:
                        reporter.post(message)
                    return True
                ctx.record(
                    req.session_id,
                    BOT_ACTOR,
                    Step.DECISION_UNCERTAIN,
                    {"request_id": req.id, "attempt": attempts},
                    exc.code,
                    http_status=exc.status,
                    idempotency_key=req.idem_key,
                )
                reporter.progress(
                    Message(
                        headline=f"`{req.decision}` on `{req.session_id}`: still no definite answer "
                        f"({exc.code}); re-sending the same request again",
                        level="progress",
                        rules=["R0.3"],
                        session_id=req.session_id,
                    )
                )
                return None
            if isinstance(sent, Reply):
                return True  # refused: voided, posted and logged by the gate
            for message in self.on_accepted(req, BOT_ACTOR, sent).messages:
                reporter.post(message)
            return True

        until = start + timedelta(seconds=total)
        if poll(ctx.clock, until, Pace(every, cap), attempt, attempt_first=False):
            return
        req = ctx.requests.get(request_id)
        if req is None or req.state != RequestState.UNCERTAIN:
            return
        msg = text.refusal(
            f"`{req.decision}` on `{req.session_id}` is still uncertain after {text.duration(total)}",
            f"Request {req.id} got no definite answer by {ctx.iso(until)}; it stays uncertain and is re-sent "
            "with the same key when the bot next starts.",
            f"Check the control host, and the session with `/recover diagnose {req.session_id}`.",
            rules=["R0.3"],
            session_id=req.session_id,
        )
        log.warning("request %s still uncertain after %.0f s", req.id, total)
        reporter.post(msg)
