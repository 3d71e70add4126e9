"""Evidence packs: the steps of one session (or a time window), signed, checkable offline.

``recover-bot audit export --pack FILE --session ID`` writes the selected steps exactly as stored,
each with the hashes that link it into the whole chain (its ``prev_hash`` and ``hash``: the boundary
hashes), the store's head at export, and an HMAC-SHA256 over all of it under the audit key.
``recover-bot audit verify-pack FILE`` checks one without the database: the signature (made by whoever
holds the key, nothing changed since), every step's hash recomputed from its content (the chain's own
function, :func:`bot.store.chain.step_hash`), and the order. Whether the steps are still in the store,
and nothing was cut, is what ``audit verify --head`` against the pack's head answers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.errors import StoreError
from bot.store.audit import _rows
from bot.store.chain import KeyRequired, canonical_json, head_ref, step_hash

FORMAT = "recover-bot-evidence/1"


@dataclass(frozen=True)
class PackFilter:
    """Which steps go in: one session, and/or ``since`` <= at < ``until`` (ISO text as stored)."""

    session_id: str | None = None
    since: str | None = None
    until: str | None = None

    def admits(self, row: dict[str, Any]) -> bool:
        at = str(row["at"])
        return (
            (self.session_id is None or row["session_id"] == self.session_id)
            and (self.since is None or at >= self.since)
            and (self.until is None or at < self.until)
        )


@dataclass
class PackReport:
    """What ``verify-pack`` found; ``ok`` only without a problem."""

    steps: int
    head: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            return (
                f"OK: evidence pack of {self.steps} steps, signature and every step's hash verified; "
                f"the store's head was {self.head} (check the store with `audit verify --head {self.head}`)"
            )
        return "\n".join([f"TAMPERED: {len(self.problems)} problem(s) in the evidence pack", *self.problems])


def build_pack(db_path: str | Path, key: bytes, selection: PackFilter) -> dict[str, Any]:
    """The signed pack (a JSON-able mapping). Raises :class:`StoreError` when nothing matches."""
    rows = _rows(db_path)
    chosen = [r for r in rows if selection.admits(r)]
    if not chosen:
        raise StoreError("no step matches: check --session, --since and --until")
    head = head_ref(rows[-1]["seq"], rows[-1]["hash"])
    pack: dict[str, Any] = {
        "format": FORMAT,
        "store_head": head,
        "filter": {"session_id": selection.session_id, "since": selection.since, "until": selection.until},
        "steps": chosen,
    }
    pack["signature"] = _sign(pack, key)
    return pack


def write_pack(pack: dict[str, Any], out: Path) -> None:
    if out.exists():
        raise StoreError(f"{out} exists: an evidence pack is never overwritten; give a new file name")
    out.write_text(json.dumps(pack, ensure_ascii=False, sort_keys=True, indent=1) + "\n", encoding="utf-8")


def verify_pack(path: str | Path, key: bytes) -> PackReport:
    """Check a pack offline: its signature under ``key``, each step's hash, their order."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise StoreError(f"cannot read the evidence pack {path}: {exc.strerror or exc}") from exc
    try:
        pack = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return PackReport(steps=0, head="unknown", problems=[f"not readable as a pack's JSON ({exc})"[:200]])
    if not isinstance(pack, dict) or pack.get("format") != FORMAT or not isinstance(pack.get("steps"), list):
        return PackReport(
            steps=0,
            head="unknown",
            problems=[f"not a recover-bot evidence pack ({FORMAT}): its format, or its list of steps, is not there"],
        )
    steps: list[Any] = pack["steps"]
    report = PackReport(steps=len(steps), head=str(pack.get("store_head")))
    # Whatever the file holds, a malformed pack is TAMPERED (exit 1), never a crash: every value is
    # checked for its kind before it is used, and digests are compared as bytes (non-ASCII text too).
    if not _same_digest(_sign(pack, key), pack.get("signature", "")):
        report.problems.append("signature: does not verify under this audit key (edited, or another key)")
    last = 0
    for index, row in enumerate(steps, start=1):
        if not isinstance(row, dict):
            report.problems.append(f"entry {index}: not a step record")
            continue
        seq = row.get("seq", 0)
        if not isinstance(seq, int) or isinstance(seq, bool):
            report.problems.append(f"entry {index}: its seq {str(seq)[:20]!r} is not a step number")
            continue
        if seq <= last:
            report.problems.append(f"step {seq}: out of order (after step {last})")
        last = max(last, seq)
        try:
            if not _same_digest(step_hash(row, str(row["prev_hash"]), key), row["hash"]):
                report.problems.append(f"step {seq}: its content does not match its hash (edited)")
        except (KeyError, KeyRequired, ValueError, TypeError) as exc:
            report.problems.append(f"step {seq}: cannot be checked ({type(exc).__name__}: {str(exc)[:80]})")
    head_seq = str(pack.get("store_head", "0:")).partition(":")[0]
    if head_seq.isdigit() and last > int(head_seq):
        report.problems.append(f"store_head: step {head_seq} is before the pack's last step {last}")
    return report


def _same_digest(expected: str, claimed: object) -> bool:
    """A constant-time comparison of a hex digest with whatever the pack holds in its place."""
    if not isinstance(claimed, str):
        return False
    return hmac.compare_digest(expected.encode("ascii"), claimed.encode("utf-8", "surrogatepass"))


def _sign(pack: dict[str, Any], key: bytes) -> str:
    body = {k: v for k, v in pack.items() if k != "signature"}
    return hmac.new(key, canonical_json(body).encode("utf-8"), hashlib.sha256).hexdigest()
