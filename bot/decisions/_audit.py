"""The chain's view of every decision request, for ``audit verify``.

The ``decision_requests`` table is a cache of the hash chain (docs/requests.md): this check names every
row whose content hash, state or approver differs from what the chain recorded, and every request the
bot refused to send for want of authority. It reads the rows ``audit verify`` already read.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bot.decisions._authority import APPROVED, CONFIRMED, REQUESTED
from bot.decisions._glassrule import BREAK_GLASS
from bot.decisions._requests import STATE_STEP, content_hash
from bot.store.audit import AuditProblem


def _json(text: str | bytes | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


_NEEDS_APPROVAL = ("approved", "waiting", "recheck", "sending", "executed", "uncertain")


def check_request_table(conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> list[AuditProblem]:
    """Every ``decision_requests`` row against the chain: its content hash, its state, its approver."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'decision_requests'").fetchone()
    if not exists:
        return []
    made: dict[str, dict[str, Any]] = {}
    states: dict[str, str] = {}
    approvals: dict[str, list[dict[str, Any]]] = {}
    problems: list[AuditProblem] = []
    for r in rows:
        inputs = _json(r["inputs"])
        rid = inputs.get("request_id")
        if r["step"] == REQUESTED:
            detail = _json(r["detail"])
            if detail.get("request_id"):
                made[detail["request_id"]] = r
                if detail.get("state"):  # recorded since every transition is a step
                    states[detail["request_id"]] = str(detail["state"])
        elif r["step"] == STATE_STEP and rid:
            before = states.get(rid)
            if before is not None and inputs.get("from") != before:
                # The bot moved the request from a state the chain never gave it: the table was edited.
                problems.append(
                    AuditProblem(
                        r["seq"],
                        "request table",
                        f"request table: {rid} was moved from {inputs.get('from')!r}, a state the chain "
                        f"never gave it (the chain had {before!r}): the table was edited",
                    )
                )
            states[rid] = str(inputs.get("to"))
        elif r["step"] in (APPROVED, CONFIRMED, BREAK_GLASS) and rid:
            approvals.setdefault(rid, []).append(r)
        elif r["step"] == "decision_refused_no_authority" and rid:
            why = _json(r["detail"]).get("why")
            problems.append(
                AuditProblem(
                    r["seq"],
                    "request table",
                    f"request table: {rid} was refused for want of authority: {why}",
                )
            )
    conn.row_factory = sqlite3.Row
    for row in conn.execute("SELECT * FROM decision_requests ORDER BY created_at, id"):
        req = dict(row)
        rid = req["id"]
        where = f"request table: {rid}"
        step = made.get(rid)
        if step is None:
            problems.append(AuditProblem(None, "request table", f"{rid} has no request step in the chain"))
            continue
        seq = step["seq"]
        content = {k: req.get(k) for k in req}
        content["facts"] = _json(req.get("facts"))
        content["shown_facts"] = _json(req.get("shown_facts"))
        chain_hash = _json(step["detail"]).get("content_hash")
        if content_hash(content) != chain_hash or req.get("content_hash") != chain_hash:
            problems.append(
                AuditProblem(
                    seq,
                    "request table",
                    f"{where}: its content (decision {req.get('decision')!r}) differs from the hash "
                    f"recorded in the chain at step {seq}",
                )
            )
        chain_state = states.get(rid)
        if chain_state is not None and chain_state != req["state"]:
            problems.append(
                AuditProblem(
                    seq,
                    "request table",
                    f"{where}: state {req['state']!r} in the table, {chain_state!r} in the chain",
                )
            )
        granted = [
            a
            for a in approvals.get(rid, [])
            # A break-glass step is the requester's own (the gate judges it in full before a send).
            if (req.get("policy") != "two_person") or a["actor"] != req["requester"] or a["step"] == BREAK_GLASS
        ]
        if req["state"] in _NEEDS_APPROVAL and not granted:
            problems.append(
                AuditProblem(
                    seq,
                    "request table",
                    f"{where}: state {req['state']!r} but the chain records no approval or confirmation",
                )
            )
        elif req.get("approved_by") and granted and req["approved_by"] not in {a["actor"] for a in granted}:
            problems.append(
                AuditProblem(
                    seq,
                    "request table",
                    f"{where}: approved_by {req['approved_by']} in the table, "
                    f"{', '.join(sorted({a['actor'] for a in granted}))} in the chain",
                )
            )
    return problems
