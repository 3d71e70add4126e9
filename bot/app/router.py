"""One entry point for every front end: a typed command or a clicked button → a :class:`Reply`.

The Slack app and the console both call :class:`Router`; the rules (the two-person rule, channel
restrictions, the runbook's preconditions) are enforced behind it, in the core, so no front end can
skip one. Errors are turned into messages in one place (:func:`error_reply`); a person never sees a
stack trace and never a secret.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from bot.app.bulk_routes import BULK_KINDS, batch_verb, dispatch, fold_sweep, settle_member_cases
from bot.app.details import FullMessages, details_reply
from bot.app.glass_routes import glass_dispatch, glass_route
from bot.app.handoff import handoff_reply
from bot.app.pending import pending_of
from bot.app.replies import KeepingReporter, completions_of, docker_notice, error_reply
from bot.app.routing import Completions
from bot.app.services import Services
from bot.buttons import DecisionChoice
from bot.clock import isoformat
from bot.decisions import lease_limit
from bot.errors import CommandError, RecoverError
from bot.escalation.remind import remind
from bot.escalation.runner import LadderRunner
from bot.escalation.status import pending_line
from bot.ids import is_batch_id
from bot.messages import Message, Reply, Reporter
from bot.runbook import ParsedCommand, help_text, parse_command
from bot.runbook.usage import FormField, decide_form
from bot.textclean import clean_optional, clean_text
from bot.vocab import Action, RequestState, StepKind
from bot.watch import Watcher

log = logging.getLogger(__name__)
BOT_ACTOR = "recover-bot"  # the actor of what the bot finishes by itself at start (as the core records it)


def _batch_id(cmd: ParsedCommand) -> bool:
    """approve/reject/confirm/withdraw/take/history name a batch by its ``bat_`` prefix (docs/commands.md)."""
    value = cmd.arg("request_id") or cmd.arg("session_id") or ""
    batch_kinds = (
        StepKind.APPROVE,
        StepKind.REJECT,
        StepKind.CONFIRM,
        StepKind.WITHDRAW,
        StepKind.TAKE,
        StepKind.HISTORY,
    )
    return cmd.kind in batch_kinds and is_batch_id(value)


def _remind(ladder: LadderRunner, cmd: ParsedCommand, actor: str) -> Reply:
    """``/recover remind <request_id>``: the ladder's next step now, through the installation's runner
    (it posts where the front can, Slack; else it answers in the reply, the console)."""
    request_id = cmd.arg("request_id")
    if not request_id:
        raise CommandError("`remind` needs <request_id>.", usage=cmd.spec.usage if cmd.spec else None)
    return remind(ladder, actor, request_id)


#: Docker-only step kinds: over the demo's sandbox each explains what it needs instead of running.
_DOCKER_KINDS = (
    StepKind.RECONCILER_STATUS,
    StepKind.RECONCILER_DRYRUN,
    StepKind.RECONCILER_REAL_PASS,
    StepKind.PREFLIGHT,
)


@dataclass(frozen=True)
class Call:
    """One parsed command and who, where and to whom it reports: what each verb's handler gets."""

    cmd: ParsedCommand
    actor: str
    channel: str | None
    reporter: Reporter


class Router:
    """Dispatches parsed commands by their runbook step kind, and button actions, to the core."""

    def __init__(
        self, services: Services, *, watcher: Watcher | None, ladder: LadderRunner, demo: bool = False
    ) -> None:
        self.services = services
        self.watcher = watcher  # `/recover watch` shows and steers it (None: watch mode is off here)
        self.ladder = ladder  # `/recover remind` runs the ladder's next step through it
        self.demo = demo  # over the embedded sandbox: Docker-only commands explain what they need
        self.runbooks = services.runbooks
        self.startup_reply: Reply = Reply()
        self.full = FullMessages()  # what `details <id>` shows: the last full messages given out
        self._verbs = self._verb_table()  # verb → handler: the dispatch of every text command

    # -- life cycle ---------------------------------------------------------------------------

    def startup(self, reporter: Reporter) -> Reply:
        """Finish what a previous run left half-done: replay unanswered requests with their stored
        keys and bodies, and execute approved requests exactly once (never re-create them)."""
        try:
            self.startup_reply = self.services.decisions.recover_after_restart(reporter)
            bulk = self.services.bulk
            if bulk is not None:  # batches a killed process left half-sent (same keys)
                resumed = bulk.batches.resume_open(reporter)
                self.startup_reply.messages.extend(resumed)
                for batch_id in {m.ref for m in resumed if is_batch_id(m.ref)}:
                    self.startup_reply.messages.extend(
                        settle_member_cases(bulk, self.services.decisions, batch_id, BOT_ACTOR)
                    )
        except Exception as exc:  # noqa: BLE001 - a start-up problem is shown, the bot still serves
            self.startup_reply = error_reply(exc)
        return self.startup_reply

    def sweep(self, reporter: Reporter) -> Reply:
        """One round of the periodic job: what a stopped bot left — sends whose lease
        ran out or was never taken, approved requests nothing was sent for, batches whose runner's
        lease ran out — finished through the start-up replay's own functions, by one bot at a time
        (the lease ``replay:<installation>``). Empty when another bot sweeps now or nothing was left."""
        services = self.services
        leases, ttl = services.store.leases, lease_limit(self.runbooks, "send_lease")
        lease = leases.acquire(f"replay:{services.installation}", services.decisions.ctx.sends.holder, ttl)
        if lease is None:
            return Reply()
        with leases.held(lease, ttl):
            reply = services.decisions.sweep(reporter)
            bulk = services.bulk
            if bulk is not None:
                resumed = bulk.batches.resume_open(reporter, periodic=True)
                reply.messages.extend(resumed)
                for batch_id in {m.ref for m in resumed if is_batch_id(m.ref)}:
                    reply.messages.extend(settle_member_cases(bulk, services.decisions, batch_id, BOT_ACTOR))
        return reply

    def sweep_every(self, stopping: threading.Event, reporter: Reporter) -> None:
        """The periodic job's loop (a daemon thread of ``Composed.start``): :meth:`sweep` every
        ``replay_every`` of the runbook until ``stopping``; a failed round is logged, the next one runs."""
        every = lease_limit(self.runbooks, "replay_every")
        while not stopping.wait(every):
            try:
                for message in self.sweep(reporter).messages:
                    reporter.post(message)
            except Exception:  # noqa: BLE001 - a daemon thread has nobody to raise to
                log.exception("the periodic finishing of unfinished work failed; the next round tries again")

    # -- text commands ------------------------------------------------------------------------

    def decision_form(self, decision: str) -> list[FormField]:
        """The fields a decision's form asks for (only those it uses), from the runbook."""
        return decide_form(self.runbooks, decision)

    def decision_choice(self, value: str) -> DecisionChoice:
        """A decision button's value, parsed strictly against the runbook (:class:`BadButtonValue` if not)."""
        return DecisionChoice.parse(value, ids=self.runbooks.id_pattern, decisions=self.runbooks.decisions)

    def help_text(self) -> str:
        return help_text(self.runbooks)

    def completions(self) -> Completions:
        """What the console's Tab completes, from the runbook (subcommands, flags, decisions)."""
        return completions_of(self.runbooks)

    def parse(self, text: str) -> ParsedCommand:
        return parse_command(text, self.runbooks)

    def session_of(self, text: str) -> str | None:
        """The session a command is about (for threading); None when it is about none or does not parse."""
        try:
            cmd = self.parse(clean_text(text))
        except CommandError:
            return None
        session = cmd.arg("session_id")
        if session:
            return session
        request_id = cmd.arg("request_id")
        if request_id:
            request = self.services.decisions.requests.get(request_id)
            return request.session_id if request else None
        return None

    def handle_text(self, text: str, *, actor: str, channel: str | None, reporter: Reporter) -> Reply:
        # Outside text is cleaned once, here, before anything parses, hashes or stores it.
        text, actor, channel = clean_text(text), clean_text(actor), clean_optional(channel)
        try:
            cmd = self.parse(text)
            self._check_channel(cmd.name, cmd.channel_restricted, channel)
            return self._kept(
                self._dispatch(cmd, actor=actor, channel=channel, reporter=KeepingReporter(reporter, self.full))
            )
        except Exception as exc:  # noqa: BLE001 - rendered in one place
            return error_reply(exc)

    def _check_channel(self, name: str, restricted: bool, channel: str | None) -> None:
        # The core's own channel rule (bot/channels.py), so the router and the rooms never disagree.
        allowed = self.services.decisions.channels
        if restricted and not allowed.allows(channel):
            raise RecoverError(f"`/recover {name}` is not allowed in this channel.", hint=allowed.hint(channel))

    def _dispatch(self, cmd: ParsedCommand, *, actor: str, channel: str | None, reporter: Reporter) -> Reply:
        """The command's handler: the demo's Docker notice, the bulk tools (a batch id included) and
        break-glass first (they take some verbs of their own), then the verb table."""
        s = self.services
        kind = cmd.kind
        if kind in _DOCKER_KINDS and self.demo:
            needs = docker_notice(s.settings, cmd.name, installation=kind != StepKind.PREFLIGHT)
            if needs is not None:
                return needs
        if kind in BULK_KINDS or _batch_id(cmd):
            reply = dispatch(s.bulk, cmd, watcher=self.watcher, actor=actor, channel=channel, reporter=reporter)
            if s.bulk is not None and kind in (StepKind.APPROVE, StepKind.CONFIRM) and _batch_id(cmd):
                reply.messages.extend(settle_member_cases(s.bulk, s.decisions, self._arg(cmd, "request_id"), actor))
            return reply
        if glass_route(s, cmd, actor):  # break-glass, review, and the confirm a break-glass waits for
            return glass_dispatch(s, cmd, actor=actor, channel=channel, reporter=reporter)
        handler = self._verbs.get(kind)
        if handler is None:
            raise CommandError(f"`{cmd.name}` has step kind {kind!r}, which this version of the bot cannot run.")
        return handler(Call(cmd, actor, channel, reporter))

    def _verb_table(self) -> dict[StepKind, Callable[[Call], Reply]]:
        """Each runbook step kind's handler (one line each: the core call it is)."""
        s, d = self.services, self.services.decisions
        return {
            StepKind.HELP: lambda c: Reply.of(
                Message(headline="recover-bot commands", lines=[help_text(self.runbooks, c.cmd.arg("subcommand"))])
            ),
            StepKind.DIAGNOSE: self._diagnose,
            StepKind.RECONCILER_STATUS: lambda c: s.dockerops.status(),
            StepKind.RECONCILER_DRYRUN: lambda c: s.dockerops.dryrun(c.actor),
            StepKind.RECONCILER_REAL_PASS: lambda c: s.dockerops.reconcile(c.actor, self._flag(c.cmd, "reviewed")),
            StepKind.PREFLIGHT: lambda c: self._preflight(),
            StepKind.DECIDE: lambda c: self._decide(d.decide, c),
            StepKind.DRYRUN_DECIDE: lambda c: self._decide(d.dryrun_decide, c),
            StepKind.APPROVE: lambda c: d.approve(c.actor, c.channel, self._arg(c.cmd, "request_id"), c.reporter),
            StepKind.CONFIRM: lambda c: d.confirm(
                c.actor, c.channel, self._arg(c.cmd, "request_id"), c.reporter, effects=c.cmd.flag_text("effects")
            ),
            StepKind.REJECT: lambda c: d.reject(
                c.actor, c.channel, self._arg(c.cmd, "request_id"), c.cmd.flag_text("reason")
            ),
            StepKind.RESUME: lambda c: d.resume(c.actor, c.channel, self._arg(c.cmd, "session_id"), c.reporter),
            StepKind.CASES: lambda c: d.cases(actor=c.actor),
            StepKind.HISTORY: lambda c: d.history(self._arg(c.cmd, "session_id"), actor=c.actor),
            StepKind.TAKE: lambda c: d.take(c.actor, self._arg(c.cmd, "session_id")),
            StepKind.NOTE: lambda c: d.note(c.actor, self._arg(c.cmd, "session_id"), self._arg(c.cmd, "text")),
            StepKind.HANDOFF: lambda c: handoff_reply(s, c.actor),
            StepKind.WITHDRAW: lambda c: d.withdraw(c.actor, c.channel, self._arg(c.cmd, "request_id")),
            StepKind.DONE: lambda c: d.done(c.actor, self._arg(c.cmd, "session_id"), c.cmd.flag_text("reason")),
            StepKind.REPLAY: self._replay,
            StepKind.PENDING: lambda c: self.pending(with_expired=bool(c.cmd.flag("all"))),
            StepKind.DETAILS: lambda c: self.details(self._arg(c.cmd, "target_id")),
            StepKind.TEXT: lambda c: self._text(c.cmd),
            StepKind.REMIND: lambda c: _remind(self.ladder, c.cmd, c.actor),
        }

    def _diagnose(self, c: Call) -> Reply:
        session_id = self._arg(c.cmd, "session_id")
        diagnosis, reply = self.services.diagnoser.diagnose_and_record(session_id, c.actor, c.reporter)
        decisions = self.services.decisions
        reply.messages.extend(decisions.close_if_settled(session_id, c.actor, diagnosis.facts, "diagnosis"))
        return reply

    def _replay(self, c: Call) -> Reply:
        replayed = self.services.decisions.replay(c.actor, c.channel, c.reporter)
        bulk = self.services.bulk
        if bulk is not None and self.services.decisions.channels.allows(c.channel):  # batches' unanswered members
            replayed.messages.extend(bulk.batches.resume_open(c.reporter))
        return replayed

    def _decide(self, call: Callable[..., Reply], c: Call) -> Reply:
        cmd = c.cmd
        return call(
            c.actor,
            c.channel,
            self._arg(cmd, "session_id"),
            self._arg(cmd, "decision"),
            turn=cmd.flag_text("turn"),
            evidence=cmd.flag_text("evidence"),
            effects=cmd.flag_text("effects"),
            reason=cmd.flag_text("reason") or "",
            yes=bool(cmd.flag("yes")),
            reporter=c.reporter,
            cause_fixed=cmd.flag_text("cause-fixed"),
        )

    @staticmethod
    def _arg(cmd: ParsedCommand, name: str) -> str:
        value = cmd.arg(name)
        if not value:
            raise CommandError(f"`{cmd.name}` needs <{name}>.", usage=cmd.spec.usage if cmd.spec else None)
        return value

    @staticmethod
    def _flag(cmd: ParsedCommand, name: str) -> str:
        value = cmd.flag_text(name)
        if not value:
            raise CommandError(f"`{cmd.name}` needs --{name} <value>.", usage=cmd.spec.usage if cmd.spec else None)
        return value

    def _preflight(self) -> Reply:
        docker = self.runbooks.docker
        if docker is None or docker.min_daemon_major is None:
            raise CommandError("No runbook sets a Docker daemon minimum (docker.min_daemon_major).")
        advice = [f"Deploy {i}. {step.image}: {step.note}" for i, step in enumerate(docker.deploy_order, 1)]
        advice.extend(docker.drain_advice)
        return self.services.dockerops.preflight(docker.min_daemon_major, advice)

    def _text(self, cmd: ParsedCommand) -> Reply:
        spec = cmd.spec
        assert spec is not None
        lines = [spec.text] if spec.text else []
        lines.extend(spec.checklist or [])
        return Reply.of(Message(headline=spec.help, lines=lines, rules=list(spec.rules or []), kind="text"))

    # -- buttons ------------------------------------------------------------------------------

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
        """A clicked button (or a submitted form). The same core calls as the text commands."""
        action, value, actor, channel = (
            clean_text(action),
            clean_text(value),
            clean_text(actor),
            clean_optional(channel),
        )
        form = {clean_text(k): clean_text(v) for k, v in (form or {}).items()}
        try:
            keeping = KeepingReporter(reporter, self.full)
            return self._kept(
                self._action(action, value, actor=actor, channel=channel, reporter=keeping, form=form or {})
            )
        except Exception as exc:  # noqa: BLE001 - rendered in one place
            return error_reply(exc)

    def _id(self, value: str, what: str) -> str:
        pattern = self.runbooks.id_pattern
        if pattern is None or not pattern.fullmatch(value or ""):
            raise CommandError(f"Not a valid {what}: {value[:40]!r}.")
        return value

    def _action(
        self,
        action: str,
        value: str,
        *,
        actor: str,
        channel: str | None,
        reporter: Reporter,
        form: dict[str, str],
    ) -> Reply:
        d = self.services.decisions
        batch_action = action in (Action.APPROVE, Action.REJECT, Action.CONFIRM, Action.WITHDRAW)
        bulk = self.services.bulk
        if batch_action and is_batch_id(value) and bulk:
            self._check_channel(action, True, channel)
            if action == Action.REJECT:
                return bulk.batches.reject(actor, channel, value, form.get("reason") or None)
            if action == Action.WITHDRAW:
                return batch_verb(bulk, StepKind.WITHDRAW, value, actor=actor, channel=channel, reporter=reporter)
            if action == Action.CONFIRM:
                reply = batch_verb(bulk, StepKind.CONFIRM, value, actor=actor, channel=channel, reporter=reporter)
            else:
                reply = bulk.batches.approve(actor, channel, value, reporter)
            reply.messages.extend(settle_member_cases(bulk, d, value, actor))
            return reply
        if action == Action.WITHDRAW:
            self._check_channel("withdraw", True, channel)
            return d.withdraw(actor, channel, self._id(value, "request id"))
        if action == Action.APPROVE:
            self._check_channel("approve", True, channel)
            return d.approve(actor, channel, self._id(value, "request id"), reporter)
        if action == Action.REJECT:
            self._check_channel("reject", True, channel)
            return d.reject(actor, channel, self._id(value, "request id"), form.get("reason") or None)
        if action == Action.CONFIRM:
            self._check_channel("decide", True, channel)
            return d.confirm(actor, channel, self._id(value, "request id"), reporter)
        if action == Action.RECONCILE_REVIEWED:
            self._check_channel("reconcile", True, channel)
            return self.services.dockerops.reconcile(actor, self._id(value, "dry-run id"))
        if action == Action.DECIDE:
            self._check_channel("decide", True, channel)
            return d.decide(
                actor,
                channel,
                self._id(form.get("session_id", ""), "session id"),
                form.get("decision", ""),
                turn=form.get("turn") or None,
                evidence=form.get("evidence") or None,
                effects=form.get("effects") or None,
                reason=form.get("reason", ""),
                yes=form.get("yes") in ("1", "true", "yes"),
                reporter=reporter,
            )
        if action == Action.RESUME:
            return d.resume(actor, channel, self._id(value, "session id"), reporter)
        if action == Action.DECIDE_FORM:
            choice = self.decision_choice(value)
            session, decision = choice.session_id, choice.decision
            return Reply.of(
                Message(
                    headline=f"To decide {decision} on {session}, type:",
                    lines=[self._decide_template(session, decision)],
                    session_id=session,
                )
            )
        if action == Action.RUN:
            return self.handle_text(value, actor=actor, channel=channel, reporter=reporter)
        raise CommandError(f"Unknown button action {action[:40]!r}.")

    def _decide_template(self, session: str, decision: str) -> str:
        flags = self.runbooks.required_flags(decision) if decision in self.runbooks.decisions else ["reason"]
        parts = [f"/recover decide {session} {decision}"]
        for flag in flags:
            parts.append(f'--{flag} "…"' if flag != "yes" else "--yes")
        if "reason" not in flags:
            parts.append('--reason "…"')
        return " ".join(parts)

    def expire_due(self) -> list[Message]:
        """Expire approval requests past their expiry; the updated messages to show in place.

        Safety does not depend on this sweep (an approval re-checks expiry itself); it keeps what
        people see true.
        """
        try:
            return fold_sweep(self.services.bulk, self.services.decisions.expire_due())
        except Exception as exc:  # noqa: BLE001 - a sweep problem is shown, never raised
            return error_reply(exc).messages

    # -- views (App Home, console) -------------------------------------------------------------

    def unfinished_view(self) -> list[Message]:
        """What earlier runs left unfinished, named without sending anything (the console's start)."""
        try:
            if not self.services.decisions.unfinished():
                return []
            return self.services.decisions.unfinished_report(console=True).messages
        except Exception as exc:  # noqa: BLE001 - shown, the console still starts
            return error_reply(exc).messages

    def withdraw_interrupted(self, actor: str, since: str) -> list[Message]:
        """Ctrl-C at the console: withdraw what ``actor`` requested since ``since`` and nothing was sent for."""
        try:
            return self.services.decisions.withdraw_pending_of(actor, since).messages
        except Exception as exc:  # noqa: BLE001 - shown, never raised
            return error_reply(exc).messages

    def left_waiting(self, actor: str, since: str) -> list[Message]:
        """Leaving the console without Ctrl-C: what ``actor`` requested since ``since`` stays waiting."""
        try:
            return self.services.decisions.left_waiting(actor, since).messages
        except Exception as exc:  # noqa: BLE001 - shown, never raised
            return error_reply(exc).messages

    def waiting_count(self, actor: str, since: str) -> int:
        """How many requests of ``actor`` since ``since`` a Ctrl-C would withdraw."""
        return len(self.services.decisions.pending_of(actor, since))

    def now(self) -> str:
        """The core's clock, as the store writes times (the console marks its start with it)."""
        return isoformat(self.services.clock.now()) or ""

    def open_cases_view(self) -> list[Message]:
        return self.services.decisions.cases().messages

    def pending(self, *, with_expired: bool = False) -> Reply:
        """``/recover pending [--all]``: every open request and batch, with who may act on it now (and,
        with ``--all``, the requests expired since the last hand-off)."""
        return pending_of(self.services, with_expired=with_expired)

    def details(self, target: str) -> Reply:
        """``/recover details <id>``: the full fact list the short replies leave out."""
        return details_reply(self.services, self.full, target)

    def _kept(self, reply: Reply) -> Reply:
        for message in reply.messages:
            self.full.remember(message)
        return reply

    def pending_approvals_view(self) -> list[Message]:
        """App Home's pending approvals: each request by the one pending-request line."""
        d = self.services.decisions
        now = self.services.clock.now()
        return [
            Message(
                headline=pending_line(d.ctx, request, now).text,
                session_id=request.session_id,
                kind="approval_request_summary",
                ref=request.id,
            )
            for request in d.requests.find(states=(RequestState.REQUESTED,))
        ]
