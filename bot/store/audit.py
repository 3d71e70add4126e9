"""Audit of the step log: verify the hash chain, export it as JSON lines.

The triggers stop the bot (and anyone using its code) from rewriting steps; they do not stop a person
with write access to the file, who can drop them. ``verify`` therefore trusts nothing in the file but
the hashes: it recomputes each step's hash, follows ``prev_hash`` links, and names every step that was
edited, removed or moved. A tail cut off cleanly leaves a valid chain, so only a head published
outside the database (``audit export`` prints it; hand-off digests repeat it) can reveal truncation.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bot.errors import StoreError
from bot.store.chain import step_hash
from bot.store.schema import GENESIS_HASH

_COLUMNS = (
    "seq, case_id, session_id, actor, at, step, inputs, outcome, detail, http_status, "
    "idempotency_key, receipt_id, prev_hash, hash"
)


@dataclass(frozen=True)
class AuditProblem:
    """One finding: ``kind`` is edited | removed | reordered | renumbered | truncated."""

    seq: int | None
    kind: str
    message: str

    def __str__(self) -> str:
        where = f"step {self.seq}" if self.seq is not None else "log"
        return f"{where}: {self.kind}: {self.message}"


@dataclass
class AuditReport:
    """What ``audit verify`` found. ``ok`` is True only when there is no problem."""

    steps: int
    head: str
    problems: list[AuditProblem] = field(default_factory=list)
    published_head: str | None = None
    published_head_seq: int | None = None
    steps_after_head: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        lines = []
        if self.ok:
            lines.append(f"OK: {self.steps} steps, hash chain intact; head {self.head}")
            if self.published_head is not None and self.published_head_seq is not None:
                later = self.steps_after_head
                lines.append(
                    f"The published head is step {self.published_head_seq}; {later} step(s) recorded since."
                )
        else:
            lines.append(f"TAMPERED: {len(self.problems)} problem(s) in {self.steps} steps")
            lines.extend(f"  {p}" for p in self.problems)
        return "\n".join(lines)


def _open_ro(db_path: str | Path) -> sqlite3.Connection:
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


def _rows(db_path: str | Path) -> list[dict[str, Any]]:
    conn = _open_ro(db_path)
    try:
        return [dict(r) for r in conn.execute(f"SELECT {_COLUMNS} FROM steps ORDER BY seq")]  # noqa: S608
    finally:
        conn.close()


def verify(db_path: str | Path, head: str | None = None) -> AuditReport:
    """Check the chain; with ``head`` (published earlier) also detect a truncated tail."""
    rows = _rows(db_path)
    problems: list[AuditProblem] = []
    by_hash = {r["hash"]: r for r in rows}
    edited: set[int] = set()

    for i, row in enumerate(rows):
        seq = row["seq"]
        if step_hash(row, row["prev_hash"]) != row["hash"]:
            edited.add(seq)
            problems.append(AuditProblem(seq, "edited", "its content no longer matches its hash"))
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

    report = AuditReport(steps=len(rows), head=rows[-1]["hash"] if rows else GENESIS_HASH, problems=problems)
    if head is not None:
        head = head.strip().lower()
        report.published_head = head
        if head == GENESIS_HASH:
            report.published_head_seq = 0
            report.steps_after_head = len(rows)
        elif head in by_hash:
            found = by_hash[head]
            report.published_head_seq = found["seq"]
            report.steps_after_head = sum(1 for r in rows if r["seq"] > found["seq"])
        else:
            last = f"step {rows[-1]['seq']}" if rows else "no step at all"
            problems.append(
                AuditProblem(
                    None,
                    "truncated",
                    f"the published head {head[:16]}… is not in the log: steps after it were removed "
                    f"(the log now ends at {last})",
                )
            )
    return report


def export(db_path: str | Path, out: TextIO) -> str:
    """Write every step as one JSON object per line; return the head to publish elsewhere."""
    rows = _rows(db_path)
    for row in rows:
        record = dict(row)
        for name in ("inputs", "detail"):
            if record[name] is not None:
                with contextlib.suppress(ValueError):
                    record[name] = json.loads(record[name])
        out.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    return rows[-1]["hash"] if rows else GENESIS_HASH
