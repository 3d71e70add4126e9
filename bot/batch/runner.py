"""Sending a batch: each member re-checked just before its send, sent once with a stored key.

Per member: its facts are re-read (a listing snapshot no older than the runbook's
``batch_recheck_age``, or its own GET); a member whose bound facts changed is skipped (void) and
never sent. Otherwise a compare-and-set ``requested → sending`` stores its Idempotency-Key and exact
body, the store's idempotency record is written (the same rule as single decisions), and the client
sends it; after a crash a ``sending`` member is re-sent from that record with the same key and body,
so the control host applies it at most once. ``expected_revision`` is the bound revision: a change
between the re-check and the send is refused by the API (409 REQUEST_STALE), never applied.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time
import uuid
from typing import Any

from bot.controlhost import PURPOSE_DECISION, RequestPendingError
from bot.errors import ControlHostError, StoreError
from bot.triage.facts import BOUND_FACTS, session_only_facts

RECHECKED = tuple(f for f in BOUND_FACTS if not f.startswith("unknown_turn."))
SMALL = 20  # up to this many members, each is re-read with its own GET


def changes(bound: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    return [
        f"{name}: {bound.get(name)} → {fresh.get(name)}"
        for name in RECHECKED
        if name in bound and bound.get(name) != fresh.get(name)
    ]


class Recheck:
    """Fresh session facts for members, from a shared listing snapshot or one GET each."""

    def __init__(self, client: Any, clock: Any, *, size: int, max_age: float, page_size: int) -> None:
        self.client = client
        self.clock = clock
        self.use_listing = size > SMALL
        self.max_age = max_age
        self.page_size = page_size
        self._snapshot: dict[str, Any] = {}
        self._at = -1e9
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        snapshot: dict[str, Any] = {}
        cursor: str | None = None
        for _ in range(10_000):
            page = self.client.list_sessions_needing_operator(cursor, limit=self.page_size)
            snapshot.update({s.id: s for s in page.sessions})
            if not page.next or page.next == cursor:
                break
            cursor = page.next
        self._snapshot = snapshot
        self._at = time.monotonic()

    def facts(self, session_id: str) -> dict[str, Any]:
        session = None
        if self.use_listing:
            with self._lock:
                if time.monotonic() - self._at > self.max_age:
                    self._refresh()
                session = self._snapshot.get(session_id)
        if session is None:
            session = self.client.get_session(session_id)
        return session_only_facts(session, self.clock.now())


class Runner:
    """Sends one batch's remaining members with bounded concurrency (the paced client bounds the rate)."""

    def __init__(self, service: Any, batch_id: str, actor: str, on_change: Any) -> None:
        self.s = service
        self.batch_id = batch_id
        self.actor = actor
        self.on_change = on_change
        self._stop_checked = 0.0
        self._stopped = False

    def stopped(self) -> bool:
        now = time.monotonic()
        if not self._stopped and now - self._stop_checked > 0.2:
            batch = self.s.batches.get(self.batch_id)
            self._stopped = bool(batch and batch.stop_requested)
            self._stop_checked = now
        return self._stopped

    def run(self, concurrency: int) -> None:
        batch = self.s.batches.get(self.batch_id)
        assert batch is not None
        pending = self.s.batches.members(self.batch_id, ("requested", "sending"))
        recheck = Recheck(
            self.s.client, self.s.clock, size=len(pending), max_age=self.s.limit("batch_recheck_age"),
            page_size=int(self.s.limit("bulk_page_size")),
        )
        with cf.ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="batch") as pool:
            list(pool.map(lambda m: self._one(batch, m, recheck), pending))
        # Uncertain members: the same logical request again, same key and body (never a new one).
        for member in self.s.batches.members(self.batch_id, ("uncertain",)):
            self._send(batch, member.session_id, member.idem_key, retry=True)

    def _one(self, batch: Any, member: Any, recheck: Recheck) -> None:
        try:
            if member.state == "sending":
                self._send(batch, member.session_id, member.idem_key)  # a crash left it in flight
                return
            if self.stopped():
                return
            try:
                fresh = recheck.facts(member.session_id)
            except ControlHostError as exc:
                if exc.code == "NOT_FOUND":
                    fresh = {"session.found": False}
                else:
                    return  # unreadable now: stays requested, nothing sent; shown as not sent
            changed = changes(member.facts, fresh)
            if changed:
                self.s.settle(batch, member.session_id, ("requested",), "void", self.actor,
                              code="FACTS_CHANGED", detail="; ".join(changed))
                return
            policy = self.s.policy(batch.decision)
            method, path, body = policy.request(member.session_id, member.facts, {"reason": batch.reason})
            key = str(uuid.uuid4())
            text = json.dumps(dict(body), separators=(",", ":"), ensure_ascii=False)
            with self.s.store.write() as db:
                won = self.s.batches.member_transition(
                    db, batch.id, member.session_id, ("requested",), "sending",
                    idem_key=key, method=method, path=path, body=text,
                )
            if won:
                self._send(batch, member.session_id, key)
        finally:
            self.on_change()

    def _send(self, batch: Any, session_id: str, key: str | None, *, retry: bool = False) -> None:
        member = self.s.batches.member(batch.id, session_id)
        if member is None or key is None or member.body is None:
            return
        record = self.s.store.get_request(key)
        if record is None:
            try:
                record = self.s.store.begin_request(
                    member.method or "POST", member.path or "", member.body, PURPOSE_DECISION,
                    key=key, session_id=session_id,
                )
            except StoreError:
                record = self.s.store.get_request(key)  # another process wrote it just now
        if record is None:
            return
        from_states = ("uncertain",) if retry else ("sending", "uncertain")
        try:
            receipt = self.s.client.send(record)
        except RequestPendingError as exc:
            self.s.settle(batch, session_id, from_states, "uncertain", self.actor, code=exc.code, key=key)
        except ControlHostError as exc:
            if exc.status is None or exc.status >= 500 or exc.status in (408, 429):
                self.s.settle(batch, session_id, from_states, "uncertain", self.actor, code=exc.code, key=key)
            else:
                self.s.settle(batch, session_id, from_states, "failed", self.actor, code=exc.code,
                              http_status=exc.status, key=key, detail=exc.message)
        else:
            self.s.settle(batch, session_id, from_states, "executed", self.actor,
                          receipt_id=getattr(receipt, "id", None),
                          http_status=getattr(receipt, "http_status", None) or 200, key=key)
