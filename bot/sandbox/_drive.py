"""The admin API's hands on a session's worker: what a real worker or host does on its own, made to
happen now (``POST /_sandbox/sessions/{id}/fail-restore``, ``worker-ready``, ``worker-stop``, ...).

Each one checks that the machine could be in that place (a live, starting worker), then goes through
the worker lifecycle (``Workers``), so a driven failure counts exactly as a real one would.
"""

from __future__ import annotations

from bot.sandbox._lifecycle import NEVER_READY, Workers
from bot.sandbox._wire import AdminError, Attention, Session

# R2.15: endings that are not failures (drain: SIGTERM, release with stop_kind "drain").
STOP_KINDS = ("drain", "pause", "terminate", "close", "revoked")


def _starting(workers: Workers, session: Session, what: str) -> None:
    execution = workers.alive(session, what)
    if execution.phase != "starting":
        raise AdminError(409, "NOT_STARTING", f"the worker of {session.id} already reported ready")


def fail_restore(workers: Workers, session: Session, reason: str) -> None:
    """The starting worker's restore is refused (``incompatible_checkpoint``: R2.3)."""
    _starting(workers, session, "fail_restore")
    if session.checkpoint is None:
        raise AdminError(409, "NO_CHECKPOINT", f"{session.id} has no checkpoint to restore (use fail_startup)")
    now = workers.now()
    code = "INCOMPATIBLE_CHECKPOINT" if reason == "incompatible_checkpoint" else reason
    session.log_json(
        now, "worker.checkpoint.restore_refused", level="error", code=code, checkpoint_id=session.checkpoint.id
    )
    workers.failed(session, "RESTORE_FAILED", reason, now)


def fail_startup(workers: Workers, session: Session, reason: str, error: str | None = None) -> None:
    """The starting worker exits before ready without a restore (R2.12)."""
    _starting(workers, session, "fail_startup")
    now = workers.now()
    text = error or reason
    session.log_text(now, f'worker.stopping kind=failed session_id={session.id} error="{text}"')
    workers.failed(session, "STARTUP_FAILED", reason, now)


def worker_ready(workers: Workers, session: Session) -> None:
    """The current worker restored / prepared its workspace and reported ready: failures reset."""
    execution = workers.alive(session, "worker_ready")
    if workers.ready_behaviour == NEVER_READY:
        raise AdminError(409, "NEVER_READY", f"{session.id}: this sandbox runs with ready_behaviour never_ready")
    if session.store_outage and execution.phase == "starting":
        raise AdminError(409, "STORE_OUTAGE", f"{session.id}: the store is out; the worker keeps retrying (R2.6)")
    workers.ready(session, workers.now())


def store_outage(workers: Workers, session: Session, on: bool) -> None:
    """Start/end a transient store outage (R2.6): never a failure while within the startup budget."""
    now = workers.now()
    if on and not session.store_outage:
        session.store_outage = True
        execution = session.execution
        if execution and execution.alive and execution.phase == "starting":
            workers.log_outage_line(session, now, attempt=1)
    elif not on and session.store_outage:
        session.store_outage = False
        # R2.6: the same worker goes on; no new generation, no failure counted.
        session.log_json(now, "worker.checkpoint.store_available")


def check_stop_kind(kind: str) -> None:
    if kind not in STOP_KINDS:
        raise AdminError(400, "BAD_REQUEST", f"kind must be one of {', '.join(STOP_KINDS)}")


def worker_stop(workers: Workers, session: Session, kind: str, *, old_api: bool = False) -> None:
    """The current worker ends without failing: pause, terminate, close, revoked rights or a SIGTERM
    drain. None of them counts as a failure (R2.15); a drained session continues at the next
    scheduler pass (R1.9). ``old_api``: the API predates ``stop_kind`` and refuses it with 400
    (R2.16): the worker logs ``worker.release.stop_kind_refused``, releases again without it, and
    the old API counts the ending by the old rules: one failure when the claim carried a restore.
    ``kind`` is one of :data:`STOP_KINDS` (:func:`check_stop_kind`, asked first by the caller)."""
    execution = workers.alive(session, "worker_stop")
    now = workers.now()
    execution.alive = False
    execution.state = "draining"  # ended; the scheduler confirms it gone (R1.5)
    if kind == "drain" and old_api:
        session.log_json(now, "worker.release.stop_kind_refused", level="warn", status=400, code="BAD_REQUEST")
        session.log_json(now, "worker.released", generation=execution.generation)
        if execution.restore:
            workers.failed(session, "RESTORE_FAILED", "worker_released", now)
            return
    else:
        session.log_json(now, "worker.released", generation=execution.generation, stop_kind=kind)
    session.status = "idle"
    session.relaunch = kind == "drain"
    session.revision += 1
    session.add_event("worker_stopped", now, stop_kind=kind, generation=execution.generation)


def stray_workers(session: Session, count: int) -> None:
    """Leave ``count`` containers of the session for later scheduler passes to find (R3.9 tests)."""
    if session.execution is None:
        raise AdminError(409, "NO_WORKER", f"{session.id} has no execution")
    if count < 0:
        raise AdminError(400, "BAD_REQUEST", "count must be >= 0")
    session.execution.strays = count


def stop(workers: Workers, session: Session, code: str, reason: str | None, failures: int | None) -> None:
    """Stop a session as the control host does at the 3rd failure (R2.1, R2.12): failed,
    recovery_required, retry_at null, with this attention; for driving the watcher over HTTP."""
    now = workers.now()
    if session.execution is not None:
        session.execution.alive = False
    session.attention = Attention(code=code, reason=reason, failures=failures, retry_at=None)
    session.status = "failed"
    session.admission_state = "recovery_required"
    session.resumable = False
    session.revision += 1
    name = {"RESTORE_FAILED": "checkpoint_restore_failed", "STARTUP_FAILED": "startup_failed"}.get(
        code, "session_stopped"
    )
    session.add_event(name, now, reason=reason, failures=failures, code=code)


def settle(workers: Workers, session: Session) -> None:
    """The session needs no operator any more (idle, open, no attention): it leaves the listing."""
    session.attention = None
    session.status = "idle"
    session.admission_state = "open"
    session.revision += 1
    session.add_event("session_settled", workers.now())
