"""The Bolt app, built by a factory: thin listeners that commit each delivery to the inbox and ack;
the work behind it (router, core, posts) delivers the router's reply into the case's thread.

Who runs the work: a thread of this process by default (tests, embedded use); under ``recover-bot
serve`` a separate worker process (``handoff``, see :mod:`bot.slack.worker`), so the work never
competes with the acks for the interpreter. Either way the delivery is committed (and de-duplicated
by Slack's key) in :mod:`bot.slack.inbox` before the ack.

Why the work does not use Bolt's lazy listeners: Bolt runs ack functions and lazy functions on the
same ``listener_executor``; twenty slow decisions waiting on a 10 s control host would fill it and
delay the next ack past Slack's 3 s. The router runs on our own :class:`BackgroundWork` pool. The ack
path calls neither the control host nor Docker, and not even Slack's Web API.

Why ``process_before_response=True``: every listener here only queues work and acks (microseconds),
so it runs on the thread that dispatched the request. With Bolt's default the listener goes to
``listener_executor`` (one more thread hop competing for the interpreter with the background work)
and the dispatching thread polls for the ack every 10 ms: up to 10 ms added to every ack for nothing.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from slack_bolt import Ack, App, BoltResponse
from slack_sdk import WebClient

from bot.app.routing import RouterProtocol
from bot.buttons import BadButtonValue, DecisionChoice
from bot.errors import RecoverError
from bot.messages import Reply
from bot.settings import Settings, reveal
from bot.slack import blocks as kit
from bot.slack import queued, wording
from bot.slack.background import BackgroundWork, logged
from bot.slack.delivery import Origin, SlackReporter, ThreadBook
from bot.slack.inbox import NOT_COMMITTED_STATUS, Inbox, InboxUnavailable
from bot.slack.state import RecentDeliveries, SlackState, slack_migrations
from bot.slack.tenancy import Tenancy, tenancy_middleware
from bot.slack.web import SlackOut, make_client
from bot.store import Store
from bot.vocab import Action

log = logging.getLogger("recover_bot.slack")

COMMAND = "/recover"
# Our buttons' action_ids are "rb:<action>:<index>"; anything else is acked and ignored.
_OUR_ACTIONS = r"^rb:.+"


@dataclass
class SlackBot:
    """Everything one Slack front end holds; ``app`` is what servers and Socket Mode run."""

    settings: Settings
    router: RouterProtocol
    client: WebClient
    out: SlackOut
    state: SlackState
    threads: ThreadBook
    work: BackgroundWork
    ui: BackgroundWork
    #: Follow-ups a reply deferred (diagnose reading the rest of a worker log): apart from ``work``
    #: so a long wait never holds a command's thread.
    later: BackgroundWork = field(default_factory=lambda: BackgroundWork(4, "recover-later"))
    app: App = field(init=False)
    recent: RecentDeliveries = field(default_factory=RecentDeliveries)
    inbox: Inbox | None = None
    #: Passes a committed inbox item on (to the worker process); None: a thread here claims and runs it.
    handoff: Callable[[int], None] | None = None
    worker_id: str = field(default_factory=lambda: f"inline:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    _sweeping: threading.Event = field(default_factory=threading.Event, init=False)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until every background job (and the jobs they started) has finished."""
        pools = (self.ui, self.work, self.later)
        while True:
            if not all(pool.wait_idle(timeout) for pool in pools):
                return False
            if all(pool.wait_idle(0) for pool in pools):
                return True

    def close(self) -> None:
        self._sweeping.set()
        self.work.shutdown(wait=True)
        self.ui.shutdown(wait=True)
        self.later.shutdown(wait=False)

    # -- start-up -------------------------------------------------------------------------------------

    def run_startup(self) -> None:
        """Finish what a previous process left half-done (replays, approved requests), reporting into
        the cases' threads. Runs in the background: a resumed wait must not delay readiness."""
        reporter = self.background_reporter()
        self._guarded(reporter, lambda: self.router.startup(reporter))
        # Said once it is over: until then this process may still be replaying what it found unfinished
        # (an operator, or a second bot's start-up on one PostgreSQL store, can tell from the log).
        log.info("start-up finished: unfinished requests found at start were handled")

    # -- expiry ---------------------------------------------------------------------------------------

    def sweep_expired(self) -> int:
        """Expire due approval requests and update their messages in place (where they were posted)."""
        messages = self.router.expire_due()
        if messages:
            reporter = self.background_reporter()
            for message in messages:
                reporter.post(message)
            self.refresh_homes()
        return len(messages)

    def start_sweeper(self, interval: float = 30.0) -> threading.Thread:
        """Run :meth:`sweep_expired` every ``interval`` seconds until :meth:`close`."""

        def loop() -> None:
            while not self._sweeping.wait(interval):
                logged(self.sweep_expired)

        thread = threading.Thread(target=loop, name="recover-expiry", daemon=True)
        thread.start()
        return thread

    # -- the inbox ------------------------------------------------------------------------------------

    def enqueue(self, kind: str, key: str, payload: dict[str, Any]) -> bool:
        """Commit one delivery (ack path), then hand it on; False for a repeat (seen or queued before).

        Only a committed delivery counts as seen: a put that fails (the inbox locked past its busy
        timeout) raises before anything is remembered, the listener's answer is a 500, and Slack's
        retry is queued as the first delivery would have been.
        """
        assert self.inbox is not None, "build_bot gives every bot an inbox"
        if self.recent.seen(key):
            return False
        item_id = self.inbox.put(kind, key, payload)
        self.recent.remember(key)  # committed now, or by an earlier delivery (the inbox refused a repeat)
        if item_id is None:
            log.info("dropping a repeated Slack delivery %s", key)
            return False
        if self.handoff is not None:
            self.handoff(item_id)
        else:
            (self.ui if kind == queued.HOME else self.work).submit(self.run_queued, item_id)
        return True

    def run_queued(self, item_id: int) -> None:
        """Claim one item (compare-and-set: nobody else runs it), run it, mark it done."""
        assert self.inbox is not None
        for item in self.inbox.claim(self.worker_id, item_id=item_id):
            queued.run_claimed(self, self.inbox, self.worker_id, item)

    # -- the work behind each listener (background threads) ------------------------------------------

    def run_command(self, body: dict[str, Any]) -> None:
        text = str(body.get("text") or "")
        words = text.split()
        origin = Origin(
            actor=str(body.get("user_id") or "unknown"),
            channel=body.get("channel_id"),
            response_url=body.get("response_url"),
            ephemeral_reply=(words[0].lower() if words else "help") in {"help", "cases", "history"},
        )
        reporter = self._reporter(origin)

        def call() -> Reply:
            # Which session the command is about decides the thread (parsing only, no I/O).
            origin.session_id = self.router.session_of(text)
            return self.router.handle_text(text, actor=origin.actor, channel=origin.channel, reporter=reporter)

        self._guarded(reporter, call)

    def run_action(self, body: dict[str, Any], action: str, value: str) -> None:
        container = body.get("container") or {}
        message = body.get("message") or {}
        origin = Origin(
            actor=str((body.get("user") or {}).get("id") or "unknown"),
            channel=(body.get("channel") or {}).get("id") or container.get("channel_id"),
            thread_ts=message.get("thread_ts") or container.get("thread_ts") or message.get("ts"),
            response_url=None,
        )
        reporter = self._reporter(origin)
        self._guarded(
            reporter,
            lambda: self.router.handle_action(
                action, value, actor=origin.actor, channel=origin.channel, reporter=reporter
            ),
        )

    def open_decide_form(self, body: dict[str, Any], value: str) -> None:
        container = body.get("container") or {}
        message = body.get("message") or {}
        channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
        actor = str((body.get("user") or {}).get("id") or "")
        try:
            choice = self.router.decision_choice(value)
        except BadButtonValue as exc:  # forged or stale: one private line, no form, nothing recorded
            if channel and actor:
                self.out.ephemeral(channel, actor, wording.recover_error(exc))
            return
        form = kit.DecideForm(
            session_id=choice.session_id,
            decision=choice.decision,
            channel=channel,
            thread_ts=message.get("thread_ts") or message.get("ts"),
        )
        fields = self.router.decision_form(choice.decision)
        opened = self.out.open_view(str(body.get("trigger_id") or ""), kit.decide_modal(form, fields))
        if not opened and channel and actor:
            self.out.ephemeral(channel, actor, wording.modal_unavailable(choice.session_id, choice.decision))

    def run_decide(self, actor: str, form: kit.DecideForm, fields: dict[str, str]) -> None:
        origin = Origin(actor=actor, channel=form.channel, thread_ts=form.thread_ts, session_id=form.session_id)
        reporter = self._reporter(origin)
        self._guarded(
            reporter,
            lambda: self.router.handle_action(
                Action.DECIDE,
                DecisionChoice(form.session_id, form.decision).encode(),
                actor=actor,
                channel=form.channel,
                reporter=reporter,
                form={**fields, "session_id": form.session_id, "decision": form.decision},
            ),
        )

    def home_opened(self, user_id: str) -> None:
        self.state.home_opened(user_id)
        self.publish_home(user_id)

    def publish_home(self, user_id: str) -> None:
        try:
            view = kit.home_view(self.router.open_cases_view(), self.router.pending_approvals_view())
        except RecoverError as exc:
            view = kit.home_view([wording.recover_error(exc)], [])
        self.out.publish_home(user_id, view)

    def refresh_homes(self) -> None:
        """Cases or approvals may have changed: republish the tab for everyone who looked at it."""
        for user in self.state.home_users():
            self.ui.submit(self.publish_home, user)

    # -- helpers ------------------------------------------------------------------------------------

    def background_reporter(self, channel: str | None = None) -> SlackReporter:
        """Where the bot's own work reports (start-up replays, expiry, the periodic finishing of what
        another process left half-done): each case's thread; with ``channel``, a case without one gets
        its thread started there."""
        return self._reporter(Origin(actor="recover-bot", channel=channel))

    def _reporter(self, origin: Origin) -> SlackReporter:
        return SlackReporter(self.out, self.threads, origin, on_posted=self.refresh_homes)

    def _guarded(self, reporter: SlackReporter, call: Callable[[], Reply | None]) -> None:
        """Run the router and deliver; the one place background errors become messages."""
        try:
            reply = call()
        except RecoverError as exc:
            reporter.error(wording.recover_error(exc))
            return
        except Exception:
            message, ref = wording.unexpected_error()
            log.error("internal error %s:\n%s", ref, traceback.format_exc())
            reporter.error(message)
            return
        if reply is not None:
            try:
                if not reply.ok:
                    # A refusal (not an approver, a stale request, a typo) is for the actor only.
                    for message in reply.messages:
                        reporter.error(message)
                    return
                reporter.finish(reply)
                for work in reply.deferred:
                    self.later.submit(work)
            except Exception:
                log.error("delivering a reply failed:\n%s", traceback.format_exc())


def build_bot(
    settings: Settings,
    router: RouterProtocol,
    *,
    client: WebClient | None = None,
    store: Store | None = None,
    listener_executor: Executor | None = None,
    work_threads: int = 8,
    token_verification: bool = True,
    tenancy: Tenancy | None = None,
) -> SlackBot:
    """Build the Slack front end from the settings and a router (no module-level app anywhere).

    ``tenancy`` (which workspace and app requests must come from) is discovered from Slack when not
    given; see :mod:`bot.slack.tenancy`.
    """
    client = client or make_client(settings)
    tenancy = tenancy or Tenancy.discover(client, settings.slack_teams)
    store = store or Store(settings.store_target, audit_key=settings.audit_key_bytes())
    store.migrate([slack_migrations])  # the Slack front's own tables, beside the core's
    out = SlackOut(client)
    state = SlackState(store)
    bot = SlackBot(
        settings=settings,
        router=router,
        client=client,
        out=out,
        state=state,
        threads=ThreadBook(state, out),
        work=BackgroundWork(work_threads, "recover-work"),
        ui=BackgroundWork(4, "recover-ui"),
        inbox=Inbox(store),
    )
    http_mode = not settings.slack_app_token
    app = App(
        client=client,
        signing_secret=reveal(settings.slack_signing_secret) or "",
        request_verification_enabled=http_mode or bool(settings.slack_signing_secret),
        token_verification_enabled=token_verification,
        process_before_response=True,  # listeners only queue and ack: see the module docstring
        raise_error_for_unhandled_request=False,
        ignoring_self_events_enabled=True,
        listener_executor=listener_executor or ThreadPoolExecutor(max_workers=16, thread_name_prefix="recover-ack"),
        logger=logging.getLogger("recover_bot.slack.bolt"),
    )
    app.use(tenancy_middleware(tenancy))  # before every listener: other workspaces and apps are refused
    _register(app, bot)
    bot.app = app
    return bot


def build_app(
    settings: Settings,
    router: RouterProtocol,
    *,
    client: WebClient | None = None,
    store: Store | None = None,
    listener_executor: Executor | None = None,
) -> App:
    """The Bolt app alone (see :func:`build_bot` for the parts tests and servers also need)."""
    return build_bot(settings, router, client=client, store=store, listener_executor=listener_executor).app


def _register(app: App, bot: SlackBot) -> None:
    """Thin listeners: ack first (no I/O), then hand the work to the background pool."""

    # Each delivery is handled once (Slack's retries, replays of a signed request within its 5 minutes,
    # double submits), keyed on what Slack gives it: in memory first (no I/O), then by the inbox's
    # unique key, committed before the ack (a restart forgets nothing; see bot.slack.inbox). Only a
    # committed delivery is remembered in memory (SlackBot.enqueue).

    @app.command(COMMAND)
    def on_command(ack: Ack, body: dict[str, Any]) -> None:
        key = delivery_key("command", body)
        # Committed first, then acked: nothing acked is lost, whichever process dies.
        if not bot.enqueue(queued.COMMAND, key, queued.command(body)):
            ack()
            return
        ack(text=wording.ack_command(str(body.get("text") or "")))

    @app.action({"type": "block_actions", "action_id": re.compile(_OUR_ACTIONS)})
    def on_button(ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        key = delivery_key("action", body, action)
        name = kit.parse_action_id(str(action.get("action_id") or "")) or ""
        value = str(action.get("value") or "")
        if name == Action.DECIDE_FORM:
            # trigger_id expires 3 s after the click: views.open from this process's UI pool, never
            # queued behind slow work (the form's fields come from the runbook: no I/O, no commit).
            if bot.recent.first(key):
                bot.ui.submit(bot.open_decide_form, body, value)
        else:
            bot.enqueue(queued.ACTION, key, queued.action(body, name, value))
        ack()

    @app.action(re.compile(r".*"))
    def on_other_action(ack: Ack) -> None:
        ack()  # a click on something that is not ours must still not show an error in Slack

    @app.view(kit.DECIDE_CALLBACK)
    def on_decide_submit(ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        try:
            form = kit.DecideForm.from_metadata(str(view.get("private_metadata") or "{}"))
        except BadButtonValue as exc:  # not a form this bot opened: one line in its place, nothing queued
            ack(response_action="update", view=kit.refusal_view(exc.message))
            return
        wanted = bot.router.decision_form(form.decision)
        fields = kit.read_decide_state((view.get("state") or {}).get("values") or {}, wanted)
        errors = kit.decide_form_errors(wanted, fields)
        if errors:
            ack(response_action="errors", errors=errors)
            return
        actor = str((body.get("user") or {}).get("id") or "unknown")
        bot.enqueue(queued.DECIDE, key=delivery_key("view", body), payload=queued.decide(actor, form, fields))
        ack()

    @app.event("app_home_opened")
    def on_home_opened(ack: Ack, body: dict[str, Any], event: dict[str, Any]) -> None:
        user = str(event.get("user") or "")
        event_id = str(body.get("event_id") or "")
        key = f"event:{event_id}" if event_id else ""
        if user and event.get("tab", "home") == "home":
            bot.enqueue(queued.HOME, key, queued.home(event_id, user))
        ack()

    @app.error
    def on_error(error: Exception, body: dict[str, Any]) -> BoltResponse | None:
        # Errors on the ack path only (background work has its own guard): logged (masked by the
        # handlers' filter), never echoed.
        log.error("listener error (%s): %s", type(error).__name__, error)
        if isinstance(error, InboxUnavailable):  # nothing committed: Slack is to send it again
            return BoltResponse(status=NOT_COMMITTED_STATUS, body="")
        return None


def delivery_key(kind: str, body: dict[str, Any], action: dict[str, Any] | None = None) -> str:
    """Slack's own identity of one delivery ("" when it gave none: then it is never de-duplicated).

    A command or a form submission has a ``trigger_id`` of its own; a click has its ``action_ts``
    (per click) and ``action_id``; an event has its ``event_id``.
    """
    team = str(body.get("team_id") or (body.get("team") or {}).get("id") or "")
    if kind == "action" and action is not None:
        ts, action_id = action.get("action_ts"), action.get("action_id")
        user = (body.get("user") or {}).get("id")
        return f"action:{team}:{user}:{action_id}:{ts}" if ts and action_id else ""
    trigger = body.get("trigger_id")
    return f"{kind}:{team}:{trigger}" if trigger else ""
