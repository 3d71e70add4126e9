"""What a batch says to people: the request, its progress line, the final table and the CSV."""

from __future__ import annotations

from collections.abc import Sequence

from bot.batch.store import Batch, BatchMember
from bot.csvfile import Cell, csv_text
from bot.messages import Attachment, Button, Level, Message, approval_buttons, ref
from bot.vocab import Action, Policy, RequestState

SHOWN_MEMBERS = 25


def counts_line(counts: dict[str, int], codes: dict[str, int], total: int) -> str:
    sent = sum(
        counts.get(s, 0)
        for s in (RequestState.SENDING, RequestState.EXECUTED, RequestState.FAILED, RequestState.UNCERTAIN)
    )
    refused = ", ".join(f"{c} {n}" for c, n in sorted(codes.items())) or "0"
    return (
        f"{sent}/{total} sent · {counts.get(RequestState.EXECUTED, 0)} accepted · refused by code: {refused} · "
        f"{counts.get(RequestState.UNCERTAIN, 0)} uncertain · {counts.get(RequestState.VOID, 0)} skipped (facts "
        f"changed) · "
        f"{counts.get(RequestState.REQUESTED, 0)} not sent yet"
    )


def request_lines(batch: Batch, members: Sequence[BatchMember], groups: str) -> list[str]:
    lines = [
        f"Decision: `{batch.decision}` · members: {len(members)} · from: {groups} · requested by "
        f"{ref(batch.requester)}",
        f"Reason: {batch.reason}",
    ]
    if batch.cause_fixed:
        lines.append(f"Cause fixed: {batch.cause_fixed}")
    shown = ", ".join(f"{m.session_id} (rev {m.revision})" for m in members[:SHOWN_MEMBERS])
    more = f" … and {len(members) - SHOWN_MEMBERS} more (attached)" if len(members) > SHOWN_MEMBERS else ""
    lines.append(f"Members: {shown}{more}")
    if batch.excluded:
        lines.append(f"Left out ({len(batch.excluded)}):")
        lines.extend(
            f"  {e['session_id']}: {e['why']}" + (f" ({e['rule']})" if e.get("rule") else "")
            for e in batch.excluded[:10]
        )
        if len(batch.excluded) > 10:
            lines.append(f"  … {len(batch.excluded) - 10} more (attached)")
    lines.append(
        f"Expires {batch.expires_at}. Each member is re-checked just before its send; one whose facts "
        "changed is skipped, never sent."
    )
    return lines


#: The batch file's columns (people's sheets and scripts rely on this order).
MEMBER_COLUMNS = (
    "batch_id",
    "session_id",
    "bound_revision",
    "outcome",
    "http_status",
    "code",
    "receipt_id",
    "idempotency_key",
    "detail",
)


def members_csv(batch: Batch, members: Sequence[BatchMember]) -> str:
    """Every member's row, then every left-out session's, through the one CSV writer (details and
    reasons come from the control host)."""
    outcome: dict[str, str] = {
        RequestState.REQUESTED: "not sent",
        RequestState.VOID: "skipped (facts changed)",
        RequestState.EXECUTED: "accepted",
        RequestState.FAILED: "refused",
        RequestState.UNCERTAIN: "uncertain",
        RequestState.SENDING: "in flight",
    }
    rows: list[list[Cell]] = [
        [
            batch.id,
            m.session_id,
            m.revision,
            outcome.get(m.state, m.state),
            m.http_status,
            m.code,
            m.receipt_id,
            m.idem_key,
            m.detail,
        ]
        for m in members
    ]
    rows.extend(
        [batch.id, e["session_id"], None, "left out", None, e.get("rule"), None, None, e["why"]] for e in batch.excluded
    )
    return csv_text(MEMBER_COLUMNS, rows)


def approval_message(
    batch: Batch,
    members: Sequence[BatchMember],
    groups: str,
    mentions: list[str],
    *,
    irreversible: bool = False,
    warnings: Sequence[str] = (),
    yes_held: bool = False,
) -> Message:
    two = batch.policy == Policy.TWO_PERSON
    why = f"{batch.decision} is irreversible" if irreversible else "more members than the runbook's threshold"
    headline = (
        f"Batch {batch.id}: `{batch.decision}` on {len(members)} session(s) needs a second person's approval ({why})"
        if two
        else f"Batch {batch.id}: `{batch.decision}` on {len(members)} session(s): confirm to send"
    )
    buttons = (
        approval_buttons(batch.id, batch.decision, f"{len(members)} session(s)", irreversible=irreversible)
        if two
        else [
            Button("Confirm", Action.CONFIRM, batch.id, f"/recover confirm {batch.id}", "primary"),
            Button("Withdraw", Action.WITHDRAW, batch.id, f"/recover withdraw {batch.id}"),
        ]
    )
    lines = request_lines(batch, members, groups)
    lines.append(
        f"To approve (another person): /recover approve {batch.id}"
        if two
        else f"To confirm (you): /recover confirm {batch.id}"
        + ("" if warnings else " — or repeat the command with --yes")
    )
    # The runbook's warnings before any send, once per kind of member (R2.11, R5.3, R5.4).
    lines[2:2] = [f"[!] {w}" for w in warnings]
    if yes_held:
        lines.insert(0, "`--yes` did not send it: read what it does below, then confirm. Nothing was sent.")
    if two:
        lines.insert(0, "`--yes` never replaces the second person's approval of the whole list.")
    return Message(
        headline=headline,
        level="warn",
        lines=lines,
        buttons=buttons,
        kind="batch_request",
        ref=batch.id,
        session_id=batch.id,
        mentions=mentions if two else [],
        attachment=Attachment(f"{batch.id}-members.csv", members_csv(batch, members))
        if len(members) > SHOWN_MEMBERS
        else None,
        rules=["R3.10", "R5.4", *(["R2.11", "R5.3"] if warnings else [])],
    )


def progress_message(
    batch: Batch, counts: dict[str, int], codes: dict[str, int], total: int, elapsed: float, note: str | None
) -> Message:
    state = "stopping: no new sends" if batch.stop_requested else "sending"
    lines = [
        counts_line(counts, codes, total),
        f"`/recover batch {batch.id}` shows it; `/recover batch {batch.id} stop` stops new sends.",
    ]
    if note:
        lines.insert(1, note)
    return Message(
        headline=f"Batch {batch.id}: `{batch.decision}` · {state} · {elapsed:.1f} s",
        level="progress",
        lines=lines,
        kind="batch_progress",
        ref=batch.id,
        session_id=batch.id,
    )


def final_message(
    batch: Batch, members: Sequence[BatchMember], counts: dict[str, int], codes: dict[str, int], csv_path: str | None
) -> Message:
    total = len(members)
    refused = ", ".join(f"{c} {n}" for c, n in sorted(codes.items())) or "none"
    # One line of counts; every member's outcome is in the CSV (and behind details).
    lines = [
        f"accepted {counts.get(RequestState.EXECUTED, 0)} · refused: {refused} · "
        f"uncertain {counts.get(RequestState.UNCERTAIN, 0)} · skipped (changed) {counts.get(RequestState.VOID, 0)} · "
        f"not sent {counts.get(RequestState.REQUESTED, 0)} · left out {len(batch.excluded)}"
    ]
    skipped = [m for m in members if m.state == RequestState.VOID]
    if skipped:
        lines.append("Skipped, never sent (facts changed since they were bound):")
        lines.extend(f"  {m.session_id}: {m.detail}" for m in skipped[:3])
    # Uncertain members: the verification's lines say how they are finished (bot/batch/verifying.py).
    if csv_path:
        lines.append(f"Every member's outcome: {csv_path}")
    stopped = " (stopped)" if batch.stop_requested else ""
    level: Level = "ok" if counts.get(RequestState.EXECUTED, 0) == total else "warn"
    return Message(
        headline=(
            f"Batch {batch.id}: `{batch.decision}` finished{stopped} · "
            f"{counts.get(RequestState.EXECUTED, 0)}/{total} accepted"
        ),
        level=level,
        lines=lines,
        kind="batch_progress",
        ref=batch.id,
        session_id=batch.id,
        attachment=Attachment(f"{batch.id}.csv", members_csv(batch, members)),
    )
