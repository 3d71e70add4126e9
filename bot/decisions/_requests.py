"""Decision requests in the step store: the approval state machine and its compare-and-set.

Why it lives in SQLite and not in memory: two bot processes may share one database file, a process
may be killed between approval and execution, and pending requests must survive restarts. Every
state change is ``UPDATE … WHERE id = ? AND state IN (…)`` inside ``BEGIN IMMEDIATE`` and checks the
row count, so exactly one writer wins a transition whatever the number of processes or threads.

States: the one list in docs/requests.md (every part of the bot uses these names)::

    requested ─approve/confirm─▶ approved ─facts unchanged─▶ sending ─2xx─▶ executed
       │                            │                          │  │  └─4xx─▶ failed
       ├─▶ rejected                 └─▶ void (facts changed)   │  └─409 RECOVERY_REQUIRED─▶ waiting ─▶ …
       ├─▶ withdrawn (by its requester)                        └─no definite answer─▶ uncertain
       ├─▶ expired                                                   (re-sent, same key and body)
       └─▶ void (facts changed / content tampered)

Every transition is also a ``request_state`` step of the hash chain (see :meth:`RequestStore.transition`),
so the table is a cache the chain can be checked against, never the authority for an execution.

The content a second person approves is bound by a hash over the request's content; the content
columns cannot be updated (a trigger), and the hash is also written into the hash-chained step log
when the request is made, so a changed row is detected at approval.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.clock import isoformat
from bot.decisions import _ladder_rows as ladder_rows
from bot.ids import DEFAULT_INSTALLATION, IdKind, new_id
from bot.store import Store
from bot.store.chain import canonical_json
from bot.vocab import Policy, RequestState

migrations = Migrations("decisions")
REQUESTS = "decision_requests"
WAITS = "decision_waits"

# Content columns: fixed once the request exists (the approver approves exactly these).
CONTENT_FIELDS = (
    "id",
    "session_id",
    "decision",
    "turn_id",
    "evidence_ref",
    "effects",
    "reason",
    "requester",
    "channel",
    "policy",
    "facts",
    "shown_facts",
    "repeated",
    "created_at",
    "expires_at",
    "installation",
)

# The request life cycle, one list for the whole project (docs/requests.md).
STATES = tuple(RequestState)  # the one list (bot/vocab.py, docs/requests.md)
_R = RequestState
OPEN_STATES = (_R.REQUESTED, _R.APPROVED, _R.WAITING, _R.RECHECK, _R.SENDING, _R.UNCERTAIN)
# Nothing was sent for a request in these states, so its requester may withdraw it.
WITHDRAWABLE_STATES = (_R.REQUESTED, _R.APPROVED, _R.WAITING, _R.RECHECK)
# States in which a request has been (or may have been) sent with its stored key.
IN_FLIGHT_STATES = (_R.SENDING, _R.UNCERTAIN)
# The step that records a state change (one per transition, in the same commit).
STATE_STEP = "request_state"
# Transition values worth repeating in that step (who, why, which key, what answer).
_STATE_DETAIL = ("approved_by", "decided_by", "note", "idem_key", "receipt_id", "http_status", "error_code")


_CONTENT_TRIGGER = """
CREATE TRIGGER decision_requests_content_fixed
BEFORE UPDATE OF id, session_id, decision, turn_id, evidence_ref, effects, reason, requester,
                 channel, policy, facts, shown_facts, repeated, created_at, expires_at, content_hash
ON decision_requests
BEGIN SELECT RAISE(ABORT, 'a decision request''s content cannot change'); END
"""

# The first schema's state names (a migration never changes once released; 0002 renames them).
_V1_STATES = (
    "pending",
    "approved",
    "executing",
    "waiting",
    "executed",
    "failed",
    "rejected",
    "expired",
    "void",
)
_V1_TO_V2 = {"pending": "requested", "executing": "sending"}
# The states 0002 allows; a new state needs a new migration (SQLite rebuilds the table for a CHECK).
_V2_STATES = (
    "requested",
    "approved",
    "rejected",
    "expired",
    "withdrawn",
    "void",
    "waiting",
    "recheck",
    "sending",
    "executed",
    "failed",
    "uncertain",
)


@migrations(name="0001_decision_requests")
def _m0001(db: Database) -> None:
    """Decision requests (approval state machine) and waits in progress."""
    states = ", ".join(f"'{s}'" for s in _V1_STATES)
    statements = [
        f"""
        CREATE TABLE decision_requests (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            decision TEXT NOT NULL,
            turn_id TEXT,
            evidence_ref TEXT,
            effects TEXT,
            reason TEXT NOT NULL,
            requester TEXT NOT NULL,
            channel TEXT,
            policy TEXT NOT NULL,
            facts TEXT NOT NULL,
            shown_facts TEXT NOT NULL,
            repeated INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ({states})),
            approved_by TEXT,
            approved_at TEXT,
            decided_by TEXT,
            decided_at TEXT,
            note TEXT,
            idem_key TEXT,
            body TEXT,
            sends INTEGER NOT NULL DEFAULT 0,
            receipt_id TEXT,
            http_status INTEGER,
            error_code TEXT,
            result TEXT,
            updated_at TEXT NOT NULL
        )
        """,  # noqa: S608 - fixed state names, no input
        "CREATE INDEX decision_requests_state ON decision_requests(state, expires_at)",
        "CREATE INDEX decision_requests_session ON decision_requests(session_id, created_at)",
        # What a second person approved cannot change underneath them (tampering needs raw SQL
        # that drops this trigger, and is then caught by the content hash).
        _CONTENT_TRIGGER,
        """
        CREATE TABLE decision_waits (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            request_id TEXT,
            kind TEXT NOT NULL,
            actor TEXT NOT NULL,
            started_at TEXT NOT NULL,
            deadline TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'active',
            detail TEXT,
            ended_at TEXT
        )
        """,
        "CREATE INDEX decision_waits_state ON decision_waits(state)",
    ]
    for sql in statements:
        db.execute(sql)


@migrations(name="0002_request_states")
def _m0002(db: Database) -> None:
    """The one list of request states (docs/requests.md): pending → requested, executing → sending.

    SQLite cannot change a CHECK constraint in place: the table is rebuilt, with its index and the
    trigger that keeps a request's content fixed.
    """
    cols = [r[1] for r in db.execute("PRAGMA table_info(decision_requests)").fetchall()]
    states = ", ".join(f"'{s}'" for s in _V2_STATES)
    create = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'decision_requests'").fetchone()[
        0
    ]
    start = create.index("state TEXT NOT NULL")
    end = create.index(")),", start) + 3
    new_create = (
        create[:start] + f"state TEXT NOT NULL DEFAULT 'requested' CHECK (state IN ({states}))," + create[end:]
    ).replace("CREATE TABLE decision_requests", "CREATE TABLE decision_requests_v2", 1)
    names = ", ".join(cols)
    mapped = ", ".join(
        "CASE state " + " ".join(f"WHEN '{a}' THEN '{b}'" for a, b in _V1_TO_V2.items()) + " ELSE state END"
        if c == "state"
        else c
        for c in cols
    )
    for sql in (
        new_create,
        f"INSERT INTO decision_requests_v2 ({names}) SELECT {mapped} FROM decision_requests",  # noqa: S608
        "DROP TABLE decision_requests",
        "ALTER TABLE decision_requests_v2 RENAME TO decision_requests",
        "CREATE INDEX decision_requests_state ON decision_requests(state, expires_at)",
        "CREATE INDEX decision_requests_session ON decision_requests(session_id, created_at)",
        _CONTENT_TRIGGER,
    ):
        db.execute(sql)


@migrations(name="0003_effects_recheck")
def _m0003(db: Database) -> None:
    """R3.9/R3.10: the effects re-check after the worker is confirmed gone.

    ``gone_seen_at`` is the confirmed-gone observation a submission was made for (one submission per
    observation); ``rechecked_by``/``rechecked_at`` who re-checked the effects account, and when;
    ``superseded_by`` the new request a changed account made. None of them is content.
    """
    for column in ("gone_seen_at", "rechecked_by", "rechecked_at", "superseded_by"):
        db.execute(f"ALTER TABLE decision_requests ADD COLUMN {column} TEXT")  # noqa: S608 - fixed names


@migrations(name="0004_request_installation")
def _m0004(db: Database) -> None:
    """The request's installation: content (NULL on older rows: the default's), fixed like the rest."""
    db.execute("ALTER TABLE decision_requests ADD COLUMN installation TEXT")
    db.execute("DROP TRIGGER decision_requests_content_fixed")
    db.execute(_CONTENT_TRIGGER.replace("expires_at, content_hash", "expires_at, content_hash, installation"))


@dataclass(frozen=True)
class DecisionRequest:
    """One request for a decision, as stored."""

    id: str
    session_id: str
    decision: str
    turn_id: str | None
    evidence_ref: str | None
    effects: str | None
    reason: str
    requester: str
    channel: str | None
    policy: Policy
    facts: dict[str, Any]
    shown_facts: dict[str, Any]
    repeated: int
    created_at: str
    expires_at: str
    content_hash: str
    state: RequestState
    approved_by: str | None = None
    approved_at: str | None = None
    decided_by: str | None = None
    decided_at: str | None = None
    note: str | None = None
    idem_key: str | None = None
    body: str | None = None
    sends: int = 0
    receipt_id: str | None = None
    http_status: int | None = None
    error_code: str | None = None
    result: dict[str, Any] | None = None  # the API's receipt, as JSON
    updated_at: str = ""
    gone_seen_at: str | None = None
    rechecked_by: str | None = None
    rechecked_at: str | None = None
    superseded_by: str | None = None
    installation: str | None = None  # None: made before installations were recorded (the default's)

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES

    def content(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CONTENT_FIELDS}


@dataclass(frozen=True)
class Wait:
    """A wait in progress (for the scheduler's confirmation, or for reclamation to end)."""

    id: int
    session_id: str
    request_id: str | None
    kind: str
    actor: str
    started_at: str
    deadline: str
    state: str
    detail: str | None
    ended_at: str | None


def content_hash(content: Mapping[str, Any]) -> str:
    """sha256 over the canonical JSON of a request's content (what the approver approves). The installation
    is hashed only when set: a row made before it was recorded (the default's) hashes as it always did."""
    values = {n: content.get(n) for n in CONTENT_FIELDS if n != "installation" or content.get(n) is not None}
    return hashlib.sha256(canonical_json(values).encode("utf-8")).hexdigest()


def new_request_id(installation: str = DEFAULT_INSTALLATION) -> str:  # req_…, req_….eu-1 (bot/ids.py)
    return new_id(IdKind.REQUEST, installation)


def _request(row: Mapping[str, Any]) -> DecisionRequest:
    values = dict(row)
    values["facts"] = json.loads(values["facts"])
    values["shown_facts"] = json.loads(values["shown_facts"])
    values["result"] = json.loads(values["result"]) if values.get("result") else None
    values["state"], values["policy"] = RequestState(values["state"]), Policy(values["policy"])
    return DecisionRequest(**{k: values[k] for k in DecisionRequest.__dataclass_fields__})


class RequestStore:
    """The decision requests and waits of one step store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.require(migrations)

    def _now(self) -> str:
        return isoformat(self.store.clock.now()) or ""

    # -- requests --------------------------------------------------------------------------------

    def insert(self, db: Database, content: Mapping[str, Any]) -> DecisionRequest:
        """Insert a new pending request inside the caller's write transaction."""
        row = {name: content.get(name) for name in CONTENT_FIELDS}
        row["facts"] = canonical_json(row["facts"] or {})
        row["shown_facts"] = canonical_json(row["shown_facts"] or {})
        row["content_hash"] = content_hash(content)
        row["state"] = "requested"
        row["updated_at"] = self._now()
        db.table(REQUESTS).insert(row)
        made = self.get(str(row["id"]), db=db)
        assert made is not None  # just inserted in this transaction
        return made

    def get(self, request_id: str, *, db: Database | None = None) -> DecisionRequest | None:
        if db is None:
            with self.store.read() as rdb:
                return self.get(request_id, db=rdb)
        rows = db.table(REQUESTS).rows_where("id = ?", [request_id], limit=1)
        return next((_request(r) for r in rows), None)

    def find(
        self, *, states: Sequence[str] | None = None, session_id: str | None = None, updated_since: str | None = None
    ) -> list[DecisionRequest]:
        clauses: list[str] = []
        params: list[str] = []
        if updated_since is not None:  # the periodic job's recent window, not the whole history
            clauses.append("updated_at >= ?")
            params.append(updated_since)
        if states:
            clauses.append(f"state IN ({', '.join('?' for _ in states)})")
            params.extend(states)
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        with self.store.read() as db:
            rows = db.table(REQUESTS).rows_where(" AND ".join(clauses) or None, params, order_by="created_at, id")
            return [_request(r) for r in rows]

    def transition(
        self,
        db: Database,
        request_id: str,
        from_states: Sequence[str],
        to_state: str,
        *,
        actor: str | None = None,
        **values: object,
    ) -> bool:
        """Compare-and-set the request's state inside the caller's ``BEGIN IMMEDIATE``.

        Returns False when another writer moved the request first (rowcount 0): the caller lost.
        A won transition is also appended to the hash chain (a ``request_state`` step, same commit):
        the table is a cache of the chain, so ``audit verify`` can compare the two.
        """
        if not db.conn.in_transaction:
            raise RuntimeError("transition() needs a connection from Store.write()")
        if to_state not in STATES:
            raise ValueError(f"unknown request state {to_state!r}")
        before = next(db.table(REQUESTS).rows_where("id = ?", [request_id], select="session_id, state", limit=1), None)
        if before is None or before["state"] not in from_states:
            return False
        if values.get("result") is not None:
            values["result"] = canonical_json(values["result"])
        sets = ["state = ?", "updated_at = ?"] + [f"{name} = ?" for name in values]
        marks = ", ".join("?" for _ in from_states)
        cur = db.execute(
            f"UPDATE {REQUESTS} SET {', '.join(sets)} WHERE id = ? AND state IN ({marks})",  # noqa: S608
            [to_state, self._now(), *values.values(), request_id, *from_states],
        )
        if cur.rowcount != 1:
            return False
        # The request leaves requested/recheck: its ladder ends in this same commit (bot/escalation).
        ladder_rows.settle(db, self.store, request_id, before["state"], to_state, self.store.clock.now())
        who = actor or values.get("decided_by") or values.get("approved_by") or "recover-bot"
        self.store.record_step(
            before["session_id"],
            str(who),
            STATE_STEP,
            {"request_id": request_id, "from": before["state"], "to": to_state},
            to_state,
            detail={k: v for k, v in values.items() if k in _STATE_DETAIL and v is not None} or None,
            db=db,
        )
        return True

    def mark(self, db: Database, request_id: str, **values: str | None) -> None:
        """Set bookkeeping columns that are neither content nor state (see migration 0003)."""
        allowed = {"gone_seen_at", "rechecked_by", "rechecked_at", "superseded_by"}
        if not values or set(values) - allowed:
            raise ValueError(f"mark() sets only {sorted(allowed)}")
        db.table(REQUESTS).update(request_id, values)

    def count_sends(self, db: Database, request_id: str) -> None:
        db.table(REQUESTS).update(request_id, {"sends": 1}, conversions={"sends": "sends + ?"})

    # -- waits -----------------------------------------------------------------------------------

    def start_wait(
        self,
        session_id: str,
        kind: str,
        actor: str,
        deadline: str,
        *,
        request_id: str | None = None,
        detail: str | None = None,
    ) -> int:
        row = {
            "session_id": session_id,
            "request_id": request_id,
            "kind": kind,
            "actor": actor,
            "started_at": self._now(),
            "deadline": deadline,
            "detail": detail,
        }
        with self.store.write() as db:
            return int(db.table(WAITS).insert(row).last_pk or 0)

    def end_wait(self, wait_id: int, state: str) -> None:
        """active → ``state`` (a compare-and-set: a wait ends once)."""
        with self.store.write() as db:
            db.execute(
                f"UPDATE {WAITS} SET state = ?, ended_at = ? WHERE id = ? AND state = 'active'",  # noqa: S608
                [state, self._now(), wait_id],
            )

    def active_waits(self, session_id: str | None = None) -> list[Wait]:
        where = "state = 'active'" + (" AND session_id = ?" if session_id is not None else "")
        with self.store.read() as db:
            rows = db.table(WAITS).rows_where(where, [session_id] if session_id is not None else [], order_by="id")
            return [Wait(**r) for r in rows]
