"""``/recover details <id>``: everything the short replies leave out, one command (or click) away.

The router keeps the last full messages it gave out (:class:`FullMessages`); when an id is not among
them (another process, a restart) the stores answer: a request's content and the facts it was
decided on, a batch's whole list, a session's last recorded diagnosis. Nothing here is sent anywhere.
"""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from bot.app.services import Services
from bot.batch import text as batch_text
from bot.decisions import DecisionRequest
from bot.messages import DETAILS_KIND, Message, Reply, details_target, in_full, ref
from bot.vocab import RequestState, Step

KEEP = 256


class FullMessages:
    """The last full messages by their details target (request, batch or session id), bounded."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._by_target: OrderedDict[str, list[Message]] = OrderedDict()
        self._lock = Lock()

    def remember(self, message: Message) -> None:
        target = details_target(message)
        if target is None or message.kind == DETAILS_KIND or not (message.facts or message.lines):
            return
        with self._lock:
            kept = [m for m in self._by_target.pop(target, []) if m.kind != message.kind][-3:]
            self._by_target[target] = [*kept, message]
            while len(self._by_target) > self._keep:
                self._by_target.popitem(last=False)

    def get(self, target: str) -> list[Message]:
        with self._lock:
            return list(self._by_target.get(target, []))


def _request(req: DecisionRequest) -> Message:
    lines = [
        f"Requested by {ref(req.requester)} at {req.created_at}; expires at {req.expires_at}; state {req.state}",
        f"Turn: {req.turn_id or 'none'}   Evidence: {req.evidence_ref or 'none'}",
        f"Reason: {req.reason}",
        *([f"External effects (requester's account, R3.10): {req.effects}"] if req.effects is not None else []),
        f"Content hash: {req.content_hash}",
        "Facts it was requested on:",
        *(f"  {k}: {'none' if v is None else v}" for k, v in req.shown_facts.items()),
    ]
    return Message(
        headline=f"Details of request {req.id}: `{req.decision}` on `{req.session_id}`",
        lines=lines,
        kind=DETAILS_KIND,
        session_id=req.session_id,
        ref=req.id,
    )


def _from_stores(services: Services, target: str) -> list[Message]:
    req = services.decisions.requests.get(target)
    if req is not None:
        return [_request(req)]
    if services.bulk is not None:
        store = services.bulk.batches.batches
        batch = store.get(target)
        if batch is not None:
            members = store.members(batch.id)
            lines = batch_text.request_lines(batch, members, batch.source)
            lines.append(f"State: {batch.state}")
            return [
                Message(
                    headline=f"Details of batch {batch.id}: `{batch.decision}`",
                    lines=lines,
                    kind=DETAILS_KIND,
                    ref=batch.id,
                    session_id=batch.id,
                )
            ]
    diagnosed = [s for s in services.store.steps(session_id=target) if s.step == Step.DIAGNOSE]
    if diagnosed:
        last = diagnosed[-1]
        facts = last.detail or {}
        lines = [
            f"Diagnosed by {ref(last.actor)} at {last.at}: branch {last.outcome}",
            *(f"  {k}: {'unknown' if v is None else v}" for k, v in facts.items()),
        ]
        return [
            Message(
                headline=f"Details of `{target}`: its last diagnosis", lines=lines, kind=DETAILS_KIND, session_id=target
            )
        ]
    return []


def details_reply(services: Services, full: FullMessages, target: str) -> Reply:
    """The full messages behind ``target`` (kept here, else read back from the stores)."""
    kept = full.get(target)
    messages = [in_full(m) for m in kept] if kept else _from_stores(services, target)
    bulk = services.bulk
    batch = bulk.batches.batches.get(target) if bulk is not None else None
    if bulk is not None and batch is not None and batch.state == RequestState.EXECUTED:  # a line per member, only here
        lines = bulk.batches.verification.member_lines(batch)
        messages.append(
            Message(
                headline=f"Members of batch {batch.id} after `{batch.decision}` ({len(lines)})",
                lines=lines,
                kind=DETAILS_KIND,
                ref=batch.id,
                session_id=batch.id,
            )
        )
    if not messages:
        return Reply.of(
            Message(
                headline=f"No details for `{target}`: no request, batch or diagnosis has this id",
                level="error",
                lines=["`/recover pending` lists the open requests and batches."],
            ),
            ok=False,
        )
    return Reply(messages)
