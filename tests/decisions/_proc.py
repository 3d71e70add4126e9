"""A bot process for the multi-process tests: the real core on a shared database file.

Run as ``python -m tests.decisions._proc <db> <url> <action> <request_id> <actor> <channel> <go_file>``
(for ``resume`` the request id is the session id);
the sandbox API key comes in the environment (SANDBOX_API_KEY), never on the command line.
HANG=after_approval makes the diagnosis after the approval hang (the test SIGKILLs the process there);
HANG=after_post lets the POST reach the control host and hangs before its answer is recorded;
HANG=after_answer hangs once the host's answer is recorded, in the verification's read (R5.1);
HANG=before_post hangs after the key and body were stored (the client's ``begin``) and before the POST
leaves (the client's ``send``).
Prints one JSON line: {"ok": bool, "headlines": [...]}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx

from bot.app.services import MIGRATIONS
from bot.clock import ManualClock
from bot.controlhost import ControlHostClient, RetryPolicy
from bot.decisions import DecisionService
from bot.diagnosis import Diagnoser
from bot.messages import NullReporter
from bot.runbook import load_runbooks
from bot.store import Store, binding

REPO = Path(__file__).resolve().parents[2]


def _marker(name: str) -> None:
    Path(os.environ["MARKER_DIR"], name).write_text(str(os.getpid()))


class HangingTransport(httpx.HTTPTransport):
    """Lets the POST through, then never returns its answer (a process dying mid-request)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST":
            response.read()
            _marker("posted")
            time.sleep(600)
        return response


class StalledTransport(httpx.HTTPTransport):
    """Holds every POST before it leaves: the request is stored, nothing reached the control host."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            _marker("begun")
            time.sleep(600)
        return super().handle_request(request)


class HangingDiagnoser(Diagnoser):
    def gather(self, session_id: str):  # type: ignore[no-untyped-def]
        _marker("approved")
        time.sleep(600)
        return super().gather(session_id)


class AnswerHangingDiagnoser(Diagnoser):
    """Reads as usual until the session's decision is recorded as executed: the next read (the
    verification's) hangs, so the process dies between the answer and its verification."""

    def gather(self, session_id: str):  # type: ignore[no-untyped-def]
        if any(s.step == "decision_executed" for s in self.store.steps(session_id=session_id)):
            _marker("answered")
            time.sleep(600)
        return super().gather(session_id)


def main() -> int:
    db, url, action, request_id, actor, channel, go_file = sys.argv[1:8]
    hang = os.environ.get("HANG", "")
    clock = ManualClock()
    store = Store(db, clock, migrations=MIGRATIONS)
    runbooks = load_runbooks(REPO / "runbooks")
    transports = {"after_post": HangingTransport, "before_post": StalledTransport}
    transport = transports[hang]() if hang in transports else None
    client = ControlHostClient(
        url,
        os.environ["SANDBOX_API_KEY"],
        store=store,
        clock=clock,
        transport=transport,
        retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02, jitter=0.0),
    )
    binding.bind(store, client.identity.base_url, client.identity.key_sha256)  # as every start does
    cls = {"after_approval": HangingDiagnoser, "after_answer": AnswerHangingDiagnoser}.get(hang, Diagnoser)
    diagnoser = cls(client=client, runbooks=runbooks, store=store, log_source=None, reconciler_status=None, clock=clock)
    svc = DecisionService(
        store=store, client=client, runbooks=runbooks, diagnoser=diagnoser, clock=clock, channels=(channel,)
    )
    deadline = time.monotonic() + 30
    while not Path(go_file).exists():  # start together with the other process
        if time.monotonic() > deadline:
            return 2
        time.sleep(0.005)
    if action == "approve":
        reply = svc.approve(actor, channel, request_id, NullReporter())
    elif action == "resume":
        reply = svc.resume(actor, channel, request_id, NullReporter())  # request_id names the session here
    elif action == "recover":
        reply = svc.recover_after_restart(NullReporter())
    else:
        return 2
    print(json.dumps({"ok": reply.ok, "headlines": [m.headline for m in reply.messages]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
