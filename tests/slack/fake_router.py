"""A tiny stand-in for the router, for front-end tests that are about Slack mechanics only.

Stories that need the real rules use the real router over the sandbox (test_stories.py).
"""

from __future__ import annotations

import threading
import time

from bot.buttons import DecisionChoice
from bot.errors import ApprovalError, CommandError
from bot.messages import Attachment, Button, Message, Reply, Reporter
from bot.runbook import load_runbooks
from bot.runbook.usage import FormField, decide_form
from bot.settings import packaged_runbooks

_RUNBOOKS = load_runbooks(packaged_runbooks())

SESSION_COMMANDS = {"diagnose", "decide", "resume", "history", "take", "note", "slow"}


class FakeRouter:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[tuple[str, str, str]] = []
        self.requests: dict[str, dict[str, str]] = {}
        self.executed: list[str] = []
        self._lock = threading.Lock()

    def session_of(self, text: str) -> str | None:
        words = text.split()
        return words[1] if len(words) > 1 and words[0] in SESSION_COMMANDS else None

    def help_text(self) -> str:
        return "/recover diagnose <session_id>"

    def decision_form(self, decision: str) -> list[FormField]:
        # The form comes from the repository's runbook, as the real router's does.
        return decide_form(_RUNBOOKS, decision)

    def decision_choice(self, value: str) -> DecisionChoice:
        # Parsed by the core's one parser against the repository's runbook, as the real router does.
        return DecisionChoice.parse(value, ids=_RUNBOOKS.id_pattern, decisions=_RUNBOOKS.decisions)

    def open_cases_view(self) -> list[Message]:
        return [Message(headline=f"case {r['session']}") for r in self.requests.values()]

    def pending_approvals_view(self) -> list[Message]:
        return [
            Message(headline=f"{rid} waiting", buttons=[Button("Approve", "approve", rid)])
            for rid, r in self.requests.items()
            if r["state"] == "pending"
        ]

    def handle_text(self, text: str, *, actor: str, channel: str | None, reporter: Reporter) -> Reply:
        self.calls.append(("text", text, actor))
        words = text.split()
        verb = words[0] if words else "help"
        if verb == "diagnose":
            sid = words[1]
            reporter.progress(Message(headline=f"Diagnosing {sid}", level="progress", session_id=sid))
            time.sleep(self.delay)
            return Reply.of(
                Message(
                    headline=f"{sid}: restore failed 3 times",
                    level="warn",
                    facts=[("attention", "RESTORE_FAILED"), ("failures", "3")],
                    rules=["R2.1", "R2.10"],
                    buttons=[
                        Button("Retry restore", "decide_form", DecisionChoice(sid, "retry_restore").encode()),
                        Button("Close", "decide_form", DecisionChoice(sid, "close").encode(), style="danger"),
                    ],
                    attachment=Attachment("timeline.txt", "\n".join(f"line {i}" for i in range(2000))),
                    session_id=sid,
                )
            )
        if verb == "slow":
            time.sleep(self.delay)
            return Reply.of(Message(headline="slow done", session_id=words[1]))
        if verb == "decide":
            return self._decide(words[1], words[2], actor)
        if verb == "cases":
            return Reply.of(Message(headline="no open case"))
        raise CommandError(f"unknown command {verb!r}", usage="/recover help")

    def _decide(self, sid: str, decision: str, actor: str) -> Reply:
        with self._lock:
            rid = f"req_{len(self.requests) + 1}"
            self.requests[rid] = {"session": sid, "decision": decision, "requester": actor, "state": "pending"}
        return Reply.of(
            Message(
                headline=f"Approval needed: {decision} on {sid}",
                kind="approval_request",
                ref=rid,
                lines=[f"Request {rid}", f"`/recover approve {rid}`"],
                buttons=[
                    Button("Approve", "approve", rid, command=f"/recover approve {rid}", style="primary"),
                    Button("Reject", "reject", rid, command=f"/recover reject {rid}", style="danger"),
                ],
                mentions=["UBOB", "SONCALL"],
                session_id=sid,
            )
        )

    def handle_action(
        self,
        action: str,
        value: str,
        *,
        actor: str,
        channel: str | None,
        reporter: Reporter,
        form: dict[str, str] | None = None,
    ) -> Reply:
        self.calls.append(("action", f"{action}:{value}", actor))
        if action == "decide":
            sid, _, decision = value.partition("|")
            assert form is not None and form.get("reason")
            return self._decide(sid, decision, actor)
        if action == "approve":
            with self._lock:
                if value not in self.requests:
                    raise ApprovalError(f"no approval request {value}")
                req = self.requests[value]
                if req["requester"] == actor:
                    raise ApprovalError("R-two-person: the requester cannot approve their own request")
                if req["state"] != "pending":
                    return Reply.of(Message(headline=f"{value} is already {req['state']}"), ok=False)
                req["state"] = "approved"
                self.executed.append(value)
            time.sleep(self.delay)
            return Reply.of(
                Message(
                    headline=f"Approved by {actor}",
                    kind="approval_request",
                    ref=value,
                    level="ok",
                    session_id=req["session"],
                ),
                Message(headline=f"Verified: {req['session']} accepted", level="ok", session_id=req["session"]),
            )
        raise CommandError(f"unknown action {action}")
