"""The router of a fleet: each command or click resolved to ONE installation, then that core's router.

Resolution is :func:`bot.installations.resolve.resolve_installation` (the one owner); this module only
gathers its inputs (``--install``, the command's own ids, a button's tag, the channel) and hands the
text or click, unchanged, to the installation's :class:`bot.app.router.Router`, whose rules run as
always. With today's single ``default`` installation every call is the plain router's, word for word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bot.app.fleet import Fleet
from bot.app.fleet_views import installations_reply, triage_all
from bot.app.handoff import handoff_reply
from bot.app.replies import error_reply
from bot.app.router import Router
from bot.app.routing import Completions
from bot.buttons import SEPARATOR, DecisionChoice
from bot.errors import CommandError
from bot.ids import DEFAULT_INSTALLATION, is_batch_id
from bot.installations import InstallationSpec
from bot.installations.resolve import resolve_installation
from bot.installations.tags import TaggingReporter, tag_message, tag_reply, tag_value, untag
from bot.messages import Message, Reply, Reporter
from bot.runbook import ParsedCommand
from bot.runbook.usage import FormField
from bot.textclean import clean_optional, clean_text
from bot.vocab import Action, StepKind

#: Arguments and flags that may hold one of the bot's own ids (a request, batch, dry run, triage group).
_ID_ARGS = ("request_id", "batch_id", "target_id", "target")


def command_ids(cmd: ParsedCommand) -> list[str]:
    """The bot's ids a command names (session ids are the control host's and say nothing)."""
    ids = [v for v in (cmd.arg(a) for a in _ID_ARGS) if v]
    session = cmd.arg("session_id")
    if is_batch_id(session):
        ids.append(session)
    reviewed = cmd.flag_text("reviewed")
    if reviewed:
        ids.append(reviewed)
    return ids


class FleetRouter:
    """:class:`bot.app.routing.RouterProtocol` over one :class:`Router` per installation."""

    def __init__(self, fleet: Fleet, routers: dict[str, Router], default: str | None = None) -> None:
        self.fleet = fleet
        self.default = default  # a console run's installation for commands that name none
        self.routers = routers
        self.first = next(iter(routers.values()))
        self.first_name = next(iter(routers))  # its name (a fleet of one: the only one)
        self.runbooks = self.first.runbooks

    @property
    def specs(self) -> list[InstallationSpec]:
        return list(self.fleet.specs.values())

    def _single(self) -> bool:
        return self.fleet.single_default

    def _named(self, name: str, reply: Reply) -> Reply:
        return reply if self._single() else tag_reply(reply, name)

    def named_reporter(self, name: str, reporter: Reporter) -> Reporter:
        """``reporter`` with its messages named by installation ``name`` (when there are several)."""
        return reporter if self._single() else TaggingReporter(reporter, name)

    def resolve(
        self,
        *,
        flag: str | None,
        channel: str | None,
        ids: Iterable[str] = (),
        made_by: str | None = None,
        what: str = "this command",
    ) -> str:
        return resolve_installation(
            self.specs, flag=flag, channel=channel, ids=list(ids), made_by=made_by, what=what, default=self.default
        )

    # -- life cycle -------------------------------------------------------------------------------

    def startup(self, reporter: Reporter) -> Reply:
        out = Reply()
        for name, router in self.routers.items():
            reply = self._named(name, router.startup(self.named_reporter(name, reporter)))
            out.messages.extend(reply.messages)
            out.ok = out.ok and reply.ok
        return out

    # -- text commands ----------------------------------------------------------------------------

    def help_text(self) -> str:
        return self.first.help_text()

    def completions(self) -> Completions:
        words = self.first.completions()
        if self._single():
            return words
        commands = {name: [*flags, "--install"] for name, flags in words.commands.items()}
        return Completions(commands=commands, decisions=words.decisions, takes_decision=words.takes_decision)

    def against(self) -> str:
        """What the console's banner says it works against: the host, or each installation's."""
        if self._single():
            return str(self.first.services.settings.control_host_url)
        hosts = ", ".join(f"{s.name} ({s.control_host_url})" for s in self.specs)
        if self.default is not None:
            return f"{hosts} (commands that name none act on {self.default}; --install chooses another)"
        return f"{hosts} (choose with --install)"

    def decision_form(self, decision: str) -> list[FormField]:
        return self.first.decision_form(decision)

    def decision_choice(self, value: str) -> DecisionChoice:
        raw, made_by = untag(value)
        choice = self.first.decision_choice(raw)
        if made_by is None:
            return choice
        # The decide form keeps the tag with the session, so its submission resolves like the click.
        return DecisionChoice(tag_value(choice.session_id, made_by), choice.decision)

    def session_of(self, text: str) -> str | None:
        """The session a command is about, for threading only (parsing, and a request id looked up in
        the store that holds it: request ids are unique, session ids are the same everywhere)."""
        if self._single():
            return self.first.session_of(text)
        return next((s for s in (r.session_of(text) for r in self.routers.values()) if s), None)

    def handle_text(self, text: str, *, actor: str, channel: str | None, reporter: Reporter) -> Reply:
        try:
            cmd = self.first.parse(clean_text(text))
        except CommandError:
            return self.first.handle_text(text, actor=actor, channel=channel, reporter=reporter)
        try:
            name = self._target(cmd, channel)
            if name is None:
                return self._fleet_wide(cmd, text, actor=actor, channel=channel, reporter=reporter)
        except Exception as exc:  # noqa: BLE001 - rendered in one place
            return error_reply(exc)
        reply = self.routers[name].handle_text(
            text, actor=actor, channel=channel, reporter=self.named_reporter(name, reporter)
        )
        return self._named(name, reply)

    def _target(self, cmd: ParsedCommand, channel: str | None) -> str | None:
        """The one installation a parsed command acts on; None for the fleet's own commands (see
        :meth:`_fleet_wide`); :class:`InstallationRefused` when it names none or two."""
        if cmd.kind in (StepKind.INSTALLATIONS, StepKind.HELP):
            return None
        flag = cmd.flag_text("install")
        if self._single() and flag is None:  # today's bot: the plain router, word for word
            return self.first_name
        if cmd.kind == StepKind.TRIAGE and cmd.flag("all") and flag is None and not self._single():
            return None
        if cmd.kind == StepKind.HANDOFF and flag is None and not self._single():
            return None
        if cmd.kind == StepKind.PENDING and cmd.flag("all") and flag is None and not self._single():
            return None
        return self.resolve(flag=flag, channel=clean_optional(channel), ids=command_ids(cmd), what=f"`{cmd.name}`")

    def _fleet_wide(
        self, cmd: ParsedCommand, text: str, *, actor: str, channel: str | None, reporter: Reporter
    ) -> Reply:
        if cmd.kind == StepKind.INSTALLATIONS:
            return installations_reply(self.fleet, clean_optional(channel), self._resolved_or_none(cmd, channel))
        if cmd.kind == StepKind.TRIAGE:
            return triage_all(self.routers, text, actor=actor, channel=channel, reporter=reporter)
        if cmd.kind == StepKind.HANDOFF:
            return self._handoff_all(actor)
        if cmd.kind == StepKind.PENDING:
            return self._pending_all()
        return self.first.handle_text(text, actor=actor, channel=channel, reporter=reporter)  # help

    def installation_of_text(self, text: str, channel: str | None) -> str | None:
        """The installation :meth:`handle_text` will run ``text`` on, found by the same rule without
        running anything (parsing only: no core, no network), so a queue can keep one installation's
        work apart from another's. None: the fleet's own commands, and any that do not parse or
        name no installation (their refusal is the core's to say when run)."""
        try:
            return self._target(self.first.parse(clean_text(text)), channel)
        except Exception:  # noqa: BLE001 - refused when run; until then it belongs to no installation
            return None

    def _resolved_or_none(self, cmd: ParsedCommand, channel: str | None) -> str | None:
        try:
            return self.resolve(flag=cmd.flag_text("install"), channel=clean_optional(channel))
        except Exception:  # noqa: BLE001 - `installations` lists them all the same
            return None

    def _each(self, answer: Callable[[Router], Reply]) -> Reply:
        """Every installation's answer, grouped by installation (each section names it); one
        installation's failure is its own section, never the others' silence."""
        out = Reply()
        for name, router in self.routers.items():
            try:
                reply = answer(router)
            except Exception as exc:  # noqa: BLE001 - one installation's problem is its section
                reply = error_reply(exc)
            out.messages.extend(tag_reply(reply, name).messages)
        return out

    def _handoff_all(self, actor: str) -> Reply:
        """The hand-off of every installation."""
        return self._each(lambda router: handoff_reply(router.services, actor))

    def _pending_all(self) -> Reply:
        """``pending --all`` over several installations: each one's pending, expired requests included."""
        return self._each(lambda router: router.pending(with_expired=True))

    # -- buttons ----------------------------------------------------------------------------------

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
        if self._single():  # one installation: no button carries a tag, the plain router answers
            return self.first.handle_action(action, value, actor=actor, channel=channel, reporter=reporter, form=form)
        try:
            name, raw, form = self._click(action, value, channel, form)
        except Exception as exc:  # noqa: BLE001 - rendered in one place
            return error_reply(exc)
        reply = self.routers[name].handle_action(
            action, raw, actor=actor, channel=channel, reporter=self.named_reporter(name, reporter), form=form
        )
        return self._named(name, reply)

    def _click(
        self, action: str, value: str, channel: str | None, form: dict[str, str] | None
    ) -> tuple[str, str, dict[str, str]]:
        """(installation, the untagged value, the untagged form) of a click of several installations."""
        raw, made_by = untag(clean_text(value))
        form = dict(form or {})
        if "session_id" in form:
            form["session_id"], by_form = untag(form["session_id"])
            made_by = made_by or by_form
        if action in (Action.DECIDE, Action.DECIDE_FORM) and SEPARATOR in raw:  # ``session@tag|decision``
            session, _, decision = raw.partition(SEPARATOR)
            session, by_choice = untag(session)
            raw, made_by = f"{session}{SEPARATOR}{decision}", made_by or by_choice
        # Every button of a fleet's messages carries its installation: one without was made before the
        # installations file, by the one installation there was, and is never another installation's.
        made_by = made_by or DEFAULT_INSTALLATION
        name = self.resolve(
            flag=None,
            channel=clean_optional(channel),
            ids=[raw] if action != Action.RUN else [],
            made_by=made_by,
            what="this button",
        )
        return name, raw, form

    def installation_of_action(
        self, action: str, value: str, channel: str | None, form: dict[str, str] | None = None
    ) -> str | None:
        """The installation :meth:`handle_action` will run a click on (the same rule, nothing run);
        None when it resolves to none (refused when run)."""
        if self._single():
            return self.first_name
        try:
            return self._click(action, value, channel, form)[0]
        except Exception:  # noqa: BLE001 - refused when run; until then it belongs to no installation
            return None

    # -- views and sweeps -------------------------------------------------------------------------

    def _grouped(self, each: Callable[[Router], list[Message]], *, headers: bool = False) -> list[Message]:
        """Every installation's messages of one view, each tagged with its installation; ``headers``: a
        view a person reads as a list (App Home) also gets a line naming each installation."""
        if self._single():
            return each(self.first)
        out: list[Message] = []
        for name, router in self.routers.items():
            messages = each(router)
            if headers:
                out.append(Message(headline=f"Installation {name}", kind="installation_header"))
            out.extend(tag_message(m, name) for m in messages)
        return out

    def open_cases_view(self) -> list[Message]:
        return self._grouped(Router.open_cases_view, headers=True)

    def pending_approvals_view(self) -> list[Message]:
        return self._grouped(Router.pending_approvals_view, headers=True)

    def expire_due(self) -> list[Message]:
        return self._grouped(Router.expire_due)

    def unfinished_view(self) -> list[Message]:
        return self._grouped(Router.unfinished_view)

    def withdraw_interrupted(self, actor: str, since: str) -> list[Message]:
        out: list[Message] = []
        for name, router in self.routers.items():
            messages = router.withdraw_interrupted(actor, since)
            out.extend(messages if self._single() else [tag_message(m, name) for m in messages])
        return out

    def left_waiting(self, actor: str, since: str) -> list[Message]:
        out: list[Message] = []
        for name, router in self.routers.items():
            messages = router.left_waiting(actor, since)
            out.extend(messages if self._single() else [tag_message(m, name) for m in messages])
        return out

    def waiting_count(self, actor: str, since: str) -> int:
        return sum(router.waiting_count(actor, since) for router in self.routers.values())

    def now(self) -> str:
        return self.first.now()


__all__ = ["FleetRouter", "command_ids"]
