"""Audit of the step log: verify the hash chain, export it as JSON lines.

The triggers stop the bot (and anyone using its code) from rewriting steps; they do not stop a person
with write access to the file, who can drop them. ``verify`` therefore trusts nothing in the file but
the hashes: it recomputes each step's hash, follows ``prev_hash`` links, and names every step that was
edited, removed or moved. With the audit key it also checks keyed steps (chain version 2): an edit
re-hashed to the end no longer verifies. A tail cut off cleanly leaves a valid chain, so only a head
published outside the database (``audit export`` prints it as ``SEQ:HASH``; hand-off digests repeat
it) can reveal truncation; the steps recorded after that head are listed, since it does not vouch for
them. Tables kept beside the chain (decision requests) are checked against it by the checks the
caller passes (``recover-bot audit verify`` passes the decisions' check; the store imports no area).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bot.dburl import looks_like_url
from bot.errors import StoreError
from bot.store._engine import engine_for
from bot.store.binding import foreign_steps
from bot.store.chain import KEYED_VERSION, PLAIN_VERSION, hash_matches, head_ref, parse_head, step_version
from bot.store.schema import GENESIS_HASH

DEFAULT_BUSY_TIMEOUT = 10.0

_COLUMNS = (
    "seq, case_id, session_id, actor, at, step, inputs, outcome, detail, http_status, "
    "idempotency_key, receipt_id, prev_hash, hash"
)
# How many steps after a published head are listed one by one.
_LISTED_AFTER_HEAD = 20


@dataclass(frozen=True)
class AuditProblem:
    """One finding: ``kind`` is edited | removed | reordered | renumbered | broken link | unkeyed |
    truncated | head mismatch | installation (a step of another installation than the binding's), or a
    cache check's kind (e.g. ``request table``)."""

    seq: int | None
    kind: str
    message: str

    def __str__(self) -> str:
        where = f"step {self.seq}" if self.seq is not None else "log"
        return f"{where}: {self.kind}: {self.message}"


# A check of a table kept beside the chain (a cache of it), written by the area that owns the table:
# ``check(conn, rows) -> problems`` with a read-only connection and the verified step rows.
CacheCheck = Callable[[sqlite3.Connection, list[dict[str, Any]]], list[AuditProblem]]


@dataclass
class AuditReport:
    """What ``audit verify`` found. ``ok`` is True only when there is no problem."""

    steps: int
    head: str
    problems: list[AuditProblem] = field(default_factory=list)
    published_head: str | None = None
    published_head_seq: int | None = None
    steps_after_head: int = 0
    head_seq: int = 0
    keyed_steps: int = 0
    unchecked_steps: int = 0
    key_given: bool = False
    # Steps after the published head, which that head does not vouch for: (seq, step, actor, at).
    unvouched: list[tuple[int, str, str, str]] = field(default_factory=list)
    # The seq of every step after the published head (``unvouched`` lists the first of them).
    after_head_seqs: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No step, link, key or table check failed (steps after a published head are not damage)."""
        return not self.problems

    @property
    def flagged(self) -> bool:
        """Steps follow the published head: it does not vouch for them (``audit verify`` exits 1)."""
        return bool(self.after_head_seqs)

    @property
    def head_ref(self) -> str:
        return head_ref(self.head_seq, self.head)

    @property
    def first_bad_step(self) -> int | None:
        seqs = [p.seq for p in self.problems if p.seq is not None]
        return min(seqs) if seqs else None

    def summary(self) -> str:
        lines = []
        if self.ok:
            lines.append(f"OK: {self.steps} steps, hash chain intact; head {self.head_ref}")
        else:
            lines.append(f"TAMPERED: {len(self.problems)} problem(s) in {self.steps} steps")
            if self.first_bad_step is not None:
                lines.append(f"  first bad step: {self.first_bad_step}")
            lines.extend(f"  {p}" for p in self.problems)
        if self.keyed_steps:
            if self.key_given:
                lines.append(f"{self.keyed_steps} keyed step(s) checked with the audit key.")
            else:
                lines.append(
                    f"NOT CHECKED: the content of {self.unchecked_steps} keyed step(s) (no audit key given: "
                    "pass --key-file or set RECOVER_AUDIT_KEY); only their links were followed."
                )
        elif self.key_given and self.steps:
            lines.append("No step is keyed yet: every step is plain sha256 (written before the key).")
        if self.published_head is not None and self.published_head_seq is not None:
            later = self.steps_after_head
            lines.append(f"The published head is step {self.published_head_seq}; {later} step(s) recorded since.")
            if self.unvouched:
                lines.append(f"FLAGGED: {later} step(s) after the published head, which it does not vouch for:")
                lines.extend(f"  step {seq}: {step} by {actor} at {at}" for seq, step, actor, at in self.unvouched)
                if later > len(self.unvouched):
                    lines.append(f"  … and {later - len(self.unvouched)} more")
        return "\n".join(lines)


def _open_ro(db_path: str | Path) -> sqlite3.Connection:
    if isinstance(db_path, str) and looks_like_url(db_path):
        return _open_server_ro(db_path)
    path = Path(db_path)
    if not path.is_file():
        raise StoreError(f"no step store at {path}", hint="Pass --db or set RECOVER_DB.")
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=10.0)
        conn.row_factory = sqlite3.Row
        conn.execute("SELECT 1 FROM steps LIMIT 1")
    except sqlite3.Error as exc:
        raise StoreError(f"{path} is not a readable step store: {exc}") from exc
    return conn


def _open_server_ro(url: str) -> sqlite3.Connection:
    """A PostgreSQL store, read in one read-only snapshot (its rows come back readable by name)."""
    engine = engine_for(url, DEFAULT_BUSY_TIMEOUT)
    db = engine.connect()
    try:
        db.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        db.conn.execute("SELECT 1 FROM steps LIMIT 1")
    except sqlite3.Error as exc:
        db.close()
        raise StoreError(f"{engine.where} is not a readable step store: {exc}") from exc
    return db.conn


def _select(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    names = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
    version = ", v" if "v" in names else ""  # a store from before chain versions: all version 1
    # A store from before installations were recorded: every step is the default installation's (NULL).
    installation = ", installation" if "installation" in names else ""
    return [
        dict(r)
        for r in conn.execute(f"SELECT {_COLUMNS}{version}{installation} FROM steps ORDER BY seq")  # noqa: S608
    ]


def _rows(db_path: str | Path) -> list[dict[str, Any]]:
    conn = _open_ro(db_path)
    try:
        return _select(conn)
    finally:
        conn.close()


def verify(
    db_path: str | Path, head: str | None = None, key: bytes | None = None, *, checks: Iterable[CacheCheck] = ()
) -> AuditReport:
    """Check the chain (keyed steps with ``key``), the caches beside it (``checks``), and with ``head``
    (published earlier as ``SEQ:HASH`` or ``HASH``) a truncated or rewritten tail and the steps it
    does not vouch for."""
    conn = _open_ro(db_path)
    try:
        rows = _select(conn)
        problems = _chain_problems(rows, key)
        problems.extend(AuditProblem(seq, "installation", why) for seq, why in foreign_steps(rows))
        for check in checks:
            try:
                problems.extend(check(conn, rows))
            except sqlite3.Error as exc:
                problems.append(AuditProblem(None, "unreadable", f"{getattr(check, '__name__', check)}: {exc}"))
    finally:
        conn.close()
    keyed = [r for r in rows if step_version(r) == KEYED_VERSION]
    report = AuditReport(
        steps=len(rows),
        head=rows[-1]["hash"] if rows else GENESIS_HASH,
        head_seq=rows[-1]["seq"] if rows else 0,
        problems=problems,
        keyed_steps=len(keyed),
        unchecked_steps=0 if key else len(keyed),
        key_given=bool(key),
    )
    if head is not None:
        _check_head(report, rows, head)
    return report


def _chain_problems(rows: list[dict[str, Any]], key: bytes | None) -> list[AuditProblem]:
    problems: list[AuditProblem] = []
    by_hash = {r["hash"]: r for r in rows}
    edited: set[int] = set()
    seen_keyed = False

    for i, row in enumerate(rows):
        seq = row["seq"]
        version = step_version(row)
        if version == PLAIN_VERSION and seen_keyed:
            edited.add(seq)
            problems.append(
                AuditProblem(
                    seq,
                    "unkeyed",
                    "a plain-hashed step after keyed steps: written or re-hashed by someone without the audit key",
                )
            )
        elif version not in (PLAIN_VERSION, KEYED_VERSION):
            edited.add(seq)
            problems.append(AuditProblem(seq, "edited", f"unknown chain version {version}"))
        elif hash_matches(row, key) is False:
            edited.add(seq)
            why = "its content no longer matches its hash"
            if version == KEYED_VERSION:
                why += " under the audit key (edited, or re-hashed without the key)"
            problems.append(AuditProblem(seq, "edited", why))
        seen_keyed = seen_keyed or version == KEYED_VERSION
        prev = rows[i - 1] if i else None
        expected_prev = prev["hash"] if prev else GENESIS_HASH
        if row["prev_hash"] == expected_prev:
            if prev is not None and seq != prev["seq"] + 1:
                problems.append(
                    AuditProblem(
                        seq,
                        "renumbered",
                        f"the chain is intact but seq jumps from {prev['seq']} to {seq}",
                    )
                )
            elif prev is None and seq != 1:
                problems.append(AuditProblem(seq, "renumbered", f"the first step has seq {seq}, not 1"))
            continue
        # The link to the previous stored step is broken: say why as precisely as the data allows.
        origin = by_hash.get(row["prev_hash"])
        if origin is not None and origin is not row:
            where = f"after step {prev['seq']}" if prev else "first"
            problems.append(
                AuditProblem(
                    seq,
                    "reordered",
                    f"it was recorded right after step {origin['seq']} but is stored {where}",
                )
            )
        elif prev is None:
            problems.append(
                AuditProblem(
                    seq,
                    "removed",
                    f"the step(s) before it were removed (the log starts at seq {seq})",
                )
            )
        elif seq != prev["seq"] + 1:
            first, last = prev["seq"] + 1, seq - 1
            span = f"step {first}" if first == last else f"steps {first}–{last}"
            problems.append(AuditProblem(first, "removed", f"{span} missing between {prev['seq']} and {seq}"))
        elif row["prev_hash"] == GENESIS_HASH:
            problems.append(AuditProblem(seq, "reordered", "it was the first step but is stored later"))
        elif prev["seq"] not in edited:
            # The previous row matches its own (recomputed) hash, yet this step was chained to a
            # step that is no longer there: either the previous step was rewritten and re-hashed,
            # or a step between them was removed and the later ones renumbered.
            problems.append(
                AuditProblem(
                    seq,
                    "broken link",
                    f"it was chained to a step that is no longer in the log: step {prev['seq']} was "
                    f"rewritten and re-hashed, or a step before {seq} was removed and the rest renumbered",
                )
            )
    return problems


def _check_head(report: AuditReport, rows: list[dict[str, Any]], head: str) -> None:
    """Where is the published head now? Truncation, a rewritten prefix, and what it does not vouch for."""
    try:
        seq, hash_ = parse_head(head)
    except ValueError as exc:
        report.problems.append(AuditProblem(None, "bad head", str(exc)))
        return
    report.published_head = head.strip().lower()
    by_hash = {r["hash"]: r for r in rows}
    by_seq = {r["seq"]: r for r in rows}
    last_seq = rows[-1]["seq"] if rows else 0
    found: dict[str, Any] | None = by_hash.get(hash_)
    if hash_ == GENESIS_HASH and seq in (None, 0):
        report.published_head_seq = 0
    elif found is not None and (seq is None or found["seq"] == seq):
        report.published_head_seq = found["seq"]
    elif seq is not None and seq in by_seq:
        # The head's step is still there but with another hash: it or a step before it was rewritten
        # (and the rest re-hashed). Not a truncation; the first bad step is named by the chain check.
        first = report.first_bad_step
        named = f"; the first bad step is {first}" if first is not None and first <= seq else ""
        report.problems.append(
            AuditProblem(
                seq,
                "head mismatch",
                f"step {seq} no longer has the published head's hash {hash_[:16]}…: it or a step before it "
                f"was rewritten and the chain re-hashed{named}",
            )
        )
        report.published_head_seq = seq
    else:
        first = report.first_bad_step
        if seq is not None and seq > last_seq:
            what = f"steps after step {last_seq} were removed (the published head is step {seq})"
        elif first is not None:
            what = f"the log was rewritten from step {first} on (or truncated)"
        else:
            what = (
                f"steps after it were removed (the log now ends at {f'step {last_seq}' if rows else 'no step at all'})"
            )
        report.problems.append(
            AuditProblem(None, "truncated", f"the published head {hash_[:16]}… is not in the log: {what}")
        )
        return
    after = [r for r in rows if r["seq"] > (report.published_head_seq or 0)]
    report.steps_after_head = len(after)
    report.unvouched = [(r["seq"], r["step"], r["actor"], r["at"]) for r in after[:_LISTED_AFTER_HEAD]]
    report.after_head_seqs = [int(r["seq"]) for r in after]


def adoption_refusal(report: AuditReport, accepted: Iterable[int]) -> str | None:
    """Why a chain may not be blessed (``adopt-key``, ``rebind``), or None: it must verify (steps,
    links, the tables kept beside it), up to a published head given, with nothing after that head but
    the steps the operator read and accepted one by one (``accepted``). A published head vouches for
    what came before it and nothing else: a writer of the file can append plain steps anyone can hash."""
    if not report.ok:
        return "the chain does not verify (above)"
    if report.published_head is None:
        return "no published head given: pass --head SEQ:HASH, the head you last published with `audit export`"
    taken = set(accepted)
    unread = [seq for seq in report.after_head_seqs if seq not in taken]
    strays = sorted(taken - set(report.after_head_seqs))
    if strays:
        return f"--accept-after {', '.join(map(str, strays))}: not a step after the published head"
    if unread:
        shown = ", ".join(map(str, unread[:10])) + (" …" if len(unread) > 10 else "")
        return (
            f"{len(unread)} step(s) after the published head (steps {shown}), listed above: read each, "
            "then pass --accept-after SEQ for every one you vouch for"
        )
    return None


def export(db_path: str | Path, out: TextIO) -> str:
    """Write every step as one JSON object per line; return the head to publish elsewhere (``SEQ:HASH``)."""
    rows = _rows(db_path)
    for row in rows:
        record = dict(row)
        for name in ("inputs", "detail"):
            if record[name] is not None:
                with contextlib.suppress(ValueError):
                    record[name] = json.loads(record[name])
        out.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    return head_ref(rows[-1]["seq"], rows[-1]["hash"]) if rows else head_ref(0, GENESIS_HASH)
