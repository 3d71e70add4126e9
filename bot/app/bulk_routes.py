"""The router's part for triage and batches: parsed commands → the bulk services (kept out of router.py)."""

from __future__ import annotations

from bot.app.bulk import Bulk
from bot.decisions import DecisionService
from bot.errors import CommandError, ControlHostError
from bot.messages import Message, Reply, Reporter, ref
from bot.runbook import ParsedCommand
from bot.runbook.usage import typed_line
from bot.vocab import Policy, RequestState, StepKind
from bot.watch import Watcher
from bot.watch.commands import watch_command

#: The step kinds the bulk services answer (watch mode reads through the same paced client and triage).
BULK_KINDS = (StepKind.TRIAGE, StepKind.BATCH_DECIDE, StepKind.DRYRUN_BATCH_DECIDE, StepKind.BATCH, StepKind.WATCH)


def settle_member_cases(bulk: Bulk, decisions: DecisionService, batch_id: str, actor: str) -> list[Message]:
    """After a batch ran: the case of each member whose session the control host now shows closed is
    closed (a recorded step, read fresh: acceptance is not recovery, R5.1). The other members' cases
    stay open; the hand-off names the batch's outcome as their state."""
    batch = bulk.batches.batches.get(batch_id)
    if batch is None or batch.state != RequestState.EXECUTED:
        return []
    closed: list[str] = []
    for member in bulk.batches.batches.members(batch_id, (RequestState.EXECUTED,)):
        try:
            session = bulk.client.get_session(member.session_id)
        except ControlHostError:
            continue  # unread: the case stays open, the next diagnose closes it
        if "closed" not in (session.status, session.admission_state):
            continue
        facts = {"session.status": session.status, "session.admission_state": session.admission_state}
        if decisions.close_if_settled(member.session_id, actor, facts, f"batch {batch_id}"):
            closed.append(member.session_id)
    if not closed:
        return []
    shown = ", ".join(f"`{sid}`" for sid in closed[:5]) + (f" … and {len(closed) - 5} more" if len(closed) > 5 else "")
    return [
        Message(
            headline=f"{len(closed)} case(s) closed after batch {batch_id}: their sessions are closed",
            level="ok",
            lines=[shown],
            session_id=batch_id,
        )
    ]


def fold_sweep(bulk: Bulk | None, messages: list[Message]) -> list[Message]:
    """The sweep's news about batch members folded into each batch's one message (edited in place),
    plus its one final message once every member is settled; no post per member."""
    return messages if bulk is None else bulk.batches.verification.fold(messages)


def batch_verb(
    bulk: Bulk, kind: StepKind, batch_id: str, *, actor: str, channel: str | None, reporter: Reporter
) -> Reply:
    """``confirm bat_…`` and ``withdraw bat_…`` (and the batch's Confirm / Withdraw buttons): the
    requester's own words for the batch service's confirmation and withdrawal. ``approve`` and
    ``reject`` keep their meaning for a second person; who is the requester is the service's check."""
    batch = bulk.batches.batches.get(batch_id)
    if batch is not None and kind == StepKind.CONFIRM and batch.policy == Policy.TWO_PERSON:
        return Reply.of(
            Message(
                headline=f"batch {batch.id} needs a second person's approval: it is approved, not confirmed",
                level="error",
                lines=[f"Ask another on-call engineer to run `{typed_line('approve', batch.id)}`."],
                session_id=batch.id,
            ),
            ok=False,
        )
    if kind == StepKind.CONFIRM:
        return bulk.batches.approve(actor, channel, batch_id, reporter)
    if batch is not None and not bulk.batches.is_requester(actor, batch):
        return Reply.of(
            Message(
                headline=f"only {ref(batch.requester)}, who asked for it, withdraws batch {batch.id}",
                level="error",
                lines=[f"A second person turns it down with `{typed_line('reject', batch.id)}`."],
                session_id=batch.id,
            ),
            ok=False,
        )
    return bulk.batches.reject(actor, channel, batch_id, None)


def dispatch(
    bulk: Bulk | None,
    cmd: ParsedCommand,
    *,
    watcher: Watcher | None,
    actor: str,
    channel: str | None,
    reporter: Reporter,
) -> Reply:
    if bulk is None:
        raise CommandError(f"`{cmd.name}` is not available: no control host is configured.")
    kind = cmd.kind
    if kind == StepKind.WATCH:
        return watch_command(watcher, cmd, actor)
    if kind == StepKind.TRIAGE:
        result: Reply = bulk.triage.run(actor, reporter)
        return result
    if kind in (StepKind.BATCH_DECIDE, StepKind.DRYRUN_BATCH_DECIDE):
        return bulk.batches.decide(
            actor,
            channel,
            cmd.arg("target") or "",
            cmd.arg("decision"),
            sessions=cmd.flag_text("sessions"),
            reason=cmd.flag_text("reason") or "",
            cause_fixed=cmd.flag_text("cause-fixed"),
            yes=bool(cmd.flag("yes")),
            dry=kind == StepKind.DRYRUN_BATCH_DECIDE,
            reporter=reporter,
        )
    if kind == StepKind.BATCH:
        return bulk.batches.show(actor, channel, cmd.arg("batch_id") or "", cmd.arg("action"))
    batch_id = cmd.arg("request_id") or cmd.arg("session_id") or ""
    if kind == StepKind.APPROVE:
        return bulk.batches.approve(actor, channel, batch_id, reporter)
    if kind == StepKind.REJECT:
        return bulk.batches.reject(actor, channel, batch_id, cmd.flag_text("reason"))
    if kind in (StepKind.CONFIRM, StepKind.WITHDRAW):
        return batch_verb(bulk, cmd.kind, batch_id, actor=actor, channel=channel, reporter=reporter)
    if kind == StepKind.TAKE:
        return bulk.batches.take(actor, batch_id)
    if kind == StepKind.HISTORY:
        return bulk.batches.history(batch_id)
    raise CommandError(f"`{cmd.name}` cannot run here.")
