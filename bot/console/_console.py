"""The terminal console: the same `/recover` commands as Slack, over the same router.

Messages are rendered as text; buttons become numbered choices (type the number to click), so every
flow that works in Slack works here, including the two-person rule (``:as bob`` in the demo). Progress
and the steps a command posts while it runs are printed inline, in order.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from bot.app.routing import RouterProtocol
from bot.buttons import BadButtonValue, DecisionChoice
from bot.console._files import save_attachment
from bot.console._shell import LineEditor, SeenIds, line_editor, state_dir
from bot.console.ports import DemoParts
from bot.console.watching import DEMO_WATCH_LINE, end_outage, incident_and_watch, stop_and_watch
from bot.decisions import CONSOLE_CHANNEL, console_actor
from bot.errors import Interrupted, RecoverError
from bot.escalation.runner import LadderRunner
from bot.messages import DETAILS_KIND, Attachment, Button, Message, Reply, brief, details_target
from bot.redact import redact
from bot.vocab import Action
from bot.watch import Watcher

DEMO_USERS = ("alice", "bob")
# The demo's logins as RECOVER_CONSOLE_USERS would map them: two people, so bob may approve alice's
# request and neither their own.
DEMO_CONSOLE_USERS = {"alice": "UDEMOALICE", "bob": "UDEMOBOB"}
ATTACHMENT_LINES = 200
#: The pager of a reply longer than the terminal when $PAGER is unset (git's way: quit when it fits,
#: keep colours, leave the text on the screen).
PAGER = "less -FRX"
INTERRUPTED = 130  # the exit status after Ctrl-C (128 + SIGINT)
# The console's own commands; everything else is a /recover command.
CONSOLE_HELP = """Console commands:
  /recover <command>   run a command (the leading /recover is optional)
  <number>             choose a numbered button from the last output
  :as <user>           act as another user (embedded sandbox only)
  :pass                run one sandbox scheduler pass (confirms stopped workers gone, R3.9; demo only)
  :advance <seconds>   move the sandbox clock forward (backoffs end, requests expire; demo only)
  :release [session]   end the workspace reclamation of a session (all when none is named; demo only)
  :stop <session>      stop a scenario's session now; watch mode polls once and posts it here (demo only)
  :incident <count>    a checkpoint-store outage stops <count> sessions; watch posts the storm here (demo only)
  :fix                 the checkpoint store answers again: the incident's outage is over (demo only)
  :help                this help and the /recover commands
  :quit                leave"""


def render(message: Message, first_choice: int = 1, saved: Path | None = None) -> str:
    """A message as terminal text (its short form: the facts stay behind ``details``); buttons
    numbered from ``first_choice``. ``saved``: where the console wrote the message's attachment."""
    message = brief(message)
    attachment = message.attachment
    # The core's mentions as readable ids (@U1, @console:bob, #C1); the attachment's line is the
    # console's own, so that it names only a file that exists.
    out = [dataclasses.replace(message, attachment=None).plain_text()]
    # A long text is printed in full only where it was asked for (details); elsewhere it is named.
    inline = attachment is not None and (message.kind == DETAILS_KIND or details_target(message) is None)
    if attachment is not None:
        out.append(_full_text_line(message, attachment, saved, inline=inline))
    if message.mentions:
        out.append("  for: " + " ".join("@" + m for m in message.mentions))
    if attachment is not None and inline:
        lines = attachment.text.splitlines()
        out.append(f"--- {saved if saved is not None else 'full text'} ---")
        out.extend("  " + line for line in lines[:ATTACHMENT_LINES])
        if len(lines) > ATTACHMENT_LINES:
            out.append(f"  … {len(lines) - ATTACHMENT_LINES} more lines" + (f" in {saved}" if saved else ""))
    for i, button in enumerate(message.buttons):
        hint = f"   {button.command}" if button.command else ""
        out.append(f"  [{first_choice + i}] {button.label}{hint}")
    return "\n".join(out)


def _full_text_line(message: Message, attachment: Attachment, saved: Path | None, *, inline: bool) -> str:
    """Where the whole text is: the file the console wrote, else what shows it (never a file name
    that names nothing)."""
    size = f"{len(attachment.text)} chars"
    if saved is not None:
        return f"(full text: {saved}, {size})"
    if inline:
        return f"(full text below, {size})"
    return f"(full text: `/recover details {details_target(message)}`, {size})"


class _ConsoleReporter:
    """Prints progress and posted steps inline; posted buttons become choices too."""

    def __init__(self, console: _Console) -> None:
        self.console = console
        self._last_progress: str | None = None

    def progress(self, message: Message) -> None:
        text = message.plain_text().splitlines()[0] if message.plain_text() else ""
        if text != self._last_progress:  # a wait reports often; show each state once
            self._last_progress = text
            self.console.write(text)

    def post(self, message: Message) -> None:
        self.console.posted.add(_key(message))
        self.console.show(message)


class _Console:
    def __init__(
        self,
        router: RouterProtocol,
        users: Sequence[str],
        allow_switch_user: bool,
        stdin: TextIO,
        stdout: TextIO,
        channel: str | None,
        sandbox: Any = None,
        history: Path | None = None,
        files: Path | None = None,
        incident: int | None = None,
        demo: DemoParts | None = None,
    ) -> None:
        self.incident = incident  # `demo --incident N`: the first thing the console does
        self.sandbox = sandbox
        self.files = files  # where attachments are written (the path a reply names), None: not written
        self.router = router
        self.users = list(users) or ["operator"]
        self.user = self.users[0]
        self.allow_switch_user = allow_switch_user
        self.stdin = stdin
        self.stdout = stdout
        self.channel = channel
        self.interactive = _isatty(stdin)
        self.choices: list[Button] = []
        self.all_ok = True
        self.interrupted = False
        self.ctrl_c = 0  # Ctrl-C at the prompt in a row: the second one leaves
        self.posted: set[tuple[str, str | None, str]] = set()  # what the running command already posted
        self.seen = SeenIds()
        self.editor: LineEditor | None = None
        if self.interactive and stdin is sys.stdin and stdout is sys.stdout:
            self.editor = line_editor(router.completions(), self.seen, history or state_dir() / "history")
        # Requests this run makes are withdrawn if Ctrl-C ends it while they wait (nothing was sent).
        self.started_at: str = router.now()
        # The demo (composed with the console's ports): watch is on from the start with the console as
        # its channel, and the escalation ladder runs at shortened times, both speaking here.
        self.watcher: Watcher | None = demo.watcher if demo is not None else None
        self.ladder: LadderRunner | None = demo.ladder if demo is not None else None
        self.ladder_line = demo.ladder_line if demo is not None else None
        if demo is not None:
            demo.says.to(self.show)

    @property
    def actor(self) -> str:
        """The actor every step records: the login and that it came from the console."""
        return console_actor(self.user)

    # -- output -------------------------------------------------------------------------------------

    def write(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def show(self, message: Message) -> None:
        self.write(self._rendered(message))

    def _rendered(self, message: Message) -> str:
        """``message`` as text, its attachment saved, its ids and numbered choices remembered."""
        saved = None
        if message.attachment is not None and self.files is not None:
            saved = save_attachment(self.files, message.attachment)
        text = render(message, len(self.choices) + 1, saved)
        self.seen.note(message, text)
        self.choices.extend(brief(message).buttons)
        return text

    def show_reply(self, reply: Reply) -> None:
        texts = [self._rendered(m) for m in reply.messages if _key(m) not in self.posted]  # posted: shown once
        if texts:
            self.page("\n".join(texts))
        self.posted.clear()
        if not reply.ok:
            self.all_ok = False

    def page(self, text: str) -> None:
        """A reply longer than the terminal goes through the pager (``$PAGER``, else ``less -FRX``: it
        quits at once when the text fits, and leaves it on the screen), so its head is not scrolled
        away; elsewhere (a script, a pipe, no pager) it is written as it is."""
        if self.editor is None or not self.interactive:
            self.write(text)
            return
        if text.count("\n") + 2 < shutil.get_terminal_size().lines:
            self.write(text)
            return
        try:
            subprocess.run(shlex.split(os.environ.get("PAGER") or PAGER), input=text + "\n", text=True, check=False)
        except (OSError, ValueError):  # no such pager (or an unreadable $PAGER): the text as it is
            self.write(text)
        except KeyboardInterrupt:  # Ctrl-C in the pager ends the paging, never the console
            self.write("")

    def fail(self, text: str) -> None:
        self.write(f"[error] {text}")
        self.all_ok = False

    # -- input --------------------------------------------------------------------------------------

    def read(self, prompt: str) -> str | None:
        if self.interactive and self.stdin is sys.stdin and self.stdout is sys.stdout:
            try:
                return input(prompt)  # line editing and history on a terminal
            except EOFError:
                return None
        if self.interactive:
            self.stdout.write(prompt)
            self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            return None
        line = line.rstrip("\n")
        if not self.interactive:
            self.write(prompt + line)  # a transcript that reads like the interactive session
        return line

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> int:
        if self.interactive:
            self.write(
                f"recover-bot console. You are {self.user}. Type :help for help; Tab completes; "
                "Ctrl-C cancels the line, twice (or Ctrl-D) leaves."
            )
        if self.watcher is not None:
            self.write(DEMO_WATCH_LINE)
        if self.ladder_line:
            self.write(self.ladder_line)
        if self.incident:
            self.write(f"(demo --incident {self.incident})")
            incident_and_watch(self.sandbox, self.watcher, str(self.incident), self.write, self.fail)
        while True:
            try:
                line = self.read(f"{self.user}> ")
            except KeyboardInterrupt:
                if not self.interactive or self.ctrl_c:
                    raise  # a script stops at Ctrl-C; a person's second Ctrl-C in a row leaves
                self.ctrl_c += 1
                self.write(f"^C (the line was dropped; {self.leaving_hint()})")
                continue
            self.ctrl_c = 0
            if line is None:
                if self.interactive:
                    self.write("")
                self.leave()
                break
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(":"):
                if not self.meta(line):
                    self.leave()
                    break
                continue
            if line.isdigit():
                self.choose(int(line))
            else:
                self.command(line)
            self.run_ladder()  # a command's waits moved the demo's clock: due steps are said now
            if self.interrupted and not self.interactive:
                return INTERRUPTED  # a script stops at Ctrl-C; a person gets the prompt back
            self.interrupted = False
        return 0 if self.all_ok else 1

    def leaving_hint(self) -> str:
        """The two ways out and what each does to this run's waiting requests, said before either."""
        waiting = self.router.waiting_count(self.actor, self.started_at) if self.started_at is not None else 0
        if not waiting:
            return "Ctrl-C again or Ctrl-D leaves"
        return (
            f"Ctrl-C again withdraws the {waiting} request(s) of this run still waiting and leaves; "
            "Ctrl-D or :quit leaves them waiting"
        )

    def leave(self) -> None:
        """Ctrl-D or :quit: what this run requested and still waits stays waiting, and is said so."""
        if self.started_at is None:
            return
        for message in self.router.left_waiting(self.actor, self.started_at):
            self.show(message)

    def withdraw_on_interrupt(self) -> None:
        """Ctrl-C ended the console: what it requested in this run and is still waiting is withdrawn."""
        for message in self.router.withdraw_interrupted(self.actor, self.started_at):
            self.show(message)

    def meta(self, line: str) -> bool:
        """A console command; False means quit."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in (":quit", ":q", ":exit"):
            return False
        if name == ":help":
            self.write(CONSOLE_HELP)
            self.write(self.router.help_text())
        elif name == ":as":
            self.switch_user(arg)
        elif name in (":pass", ":advance", ":release"):
            self.drive_sandbox(name, arg)
        elif name == ":stop":
            stop_and_watch(self.sandbox, self.watcher, arg, self.write, self.fail)
        elif name == ":incident":
            incident_and_watch(self.sandbox, self.watcher, arg, self.write, self.fail)
        elif name == ":fix":
            end_outage(self.sandbox, self.write, self.fail)
        else:
            self.fail(f"unknown console command {name!r}; type :help")
        return True

    def drive_sandbox(self, name: str, arg: str) -> None:
        """The demo's stand-ins for time passing and the scheduler doing its work."""
        if self.sandbox is None:
            self.fail(f"{name} works only against the embedded sandbox (recover-bot demo).")
            return
        try:
            if name == ":pass":
                result = self.sandbox.admin.scheduler_pass()
                gone = ", ".join(result.get("confirmed_gone") or []) or "none"
                launched = ", ".join(result.get("launched") or []) or "none"
                self.write(f"Scheduler pass: workers confirmed gone: {gone}; launched: {launched}.")
            elif name == ":release":
                held = [arg] if arg else [s["id"] for s in self.sandbox.admin.sessions() if s.get("reclamation_claim")]
                for session_id in held:
                    self.sandbox.admin.reclamation(session_id, False)
                released = ", ".join(held) or "none was held"
                self.write(f"Workspace reclamation ended: {released}. A resume is accepted again (R4.2).")
            else:
                seconds = float(arg)
                if not 0 < seconds <= 7 * 24 * 3600:
                    raise ValueError
                now = self.sandbox.admin.advance(seconds)
                self.write(f"Sandbox clock is now {now.isoformat().replace('+00:00', 'Z')}.")
        except ValueError:
            self.fail(":advance takes a number of seconds, e.g. :advance 60")
            return
        except Exception as exc:  # noqa: BLE001 - the sandbox's own error, shown
            self.fail(f"{name}: {redact(str(exc))}")
            return
        self.show_expired()

    def show_expired(self) -> None:
        """Approval requests that expired meanwhile, shown as their updated messages; in the demo, the
        escalation ladder's steps that came due meanwhile, said here."""
        for message in self.router.expire_due():
            self.show(message)
        self.run_ladder()

    def run_ladder(self) -> None:
        """The demo's ladder: one pass, its due steps said here (a failing pass is shown, never raised)."""
        if self.ladder is None:
            return
        try:
            self.ladder.run_due()
        except Exception:  # noqa: BLE001 - shown, the console goes on
            self.fail("the escalation ladder's pass failed (details below)")
            self.write(redact(traceback.format_exc()))

    def switch_user(self, user: str) -> None:
        if not self.allow_switch_user:
            self.fail(
                ":as works only against the embedded sandbox (recover-bot demo); "
                "against a real control host the acting user is fixed."
            )
            return
        if user not in self.users:
            self.fail(f":as {user or '<user>'}: choose one of {', '.join(self.users)}")
            return
        self.user = user
        self.write(f"You are now {user}.")

    def command(self, line: str) -> None:
        text = line
        if text.split()[0] == "/recover":
            text = text[len("/recover") :].strip()
        elif text.startswith("/"):
            self.fail(f"unknown command {text.split()[0]!r}: commands start with /recover")
            return
        self.choices = []
        reporter = _ConsoleReporter(self)
        self._guard(
            lambda: self.router.handle_text(text or "help", actor=self.actor, channel=self.channel, reporter=reporter)
        )

    def choose(self, number: int) -> None:
        if not 1 <= number <= len(self.choices):
            self.fail(f"no choice [{number}] in the last output")
            return
        button = self.choices[number - 1]
        form: dict[str, str] | None = None
        action, value = button.action, button.value
        if action == Action.DECIDE_FORM:
            try:
                choice = self.router.decision_choice(value)
            except BadButtonValue as exc:
                self.fail(exc.message)
                return
            form = self.ask_form(choice)
            if form is None:
                return
            form.update(session_id=choice.session_id, decision=choice.decision)
            action = Action.DECIDE
        previous, self.choices = self.choices, []
        reporter = _ConsoleReporter(self)
        ok = self._guard(
            lambda: self.router.handle_action(
                action, value, actor=self.actor, channel=self.channel, reporter=reporter, form=form
            )
        )
        self._keep_choices_after_refusal(ok, previous)

    def _keep_choices_after_refusal(self, ok: bool, previous: list[Button]) -> None:
        # A refused click or a typo must not take the buttons away: someone else may still click them.
        if not ok and not self.choices:
            self.choices = previous

    def ask_form(self, choice: DecisionChoice) -> dict[str, str] | None:
        session_id, decision = choice.session_id, choice.decision
        # The fields this decision uses, as the Slack modal asks them (from the runbook's flags).
        fields = self.router.decision_form(decision)
        self.write(f"{decision} on {session_id}: answer each field (an optional one may stay empty).")
        form: dict[str, str] = {}
        for field in fields:
            label = f"{field.label} ({'required' if field.required else 'optional'}; {field.help})"
            while True:
                try:
                    answer = self.read(f"  {label}: ")
                except KeyboardInterrupt:
                    if not self.interactive:
                        raise
                    self.write("^C: the decision form was cancelled; nothing was sent")
                    return None
                if answer is None:
                    self.fail("the decision form was not finished; nothing was sent")
                    return None
                problem = field.problem(answer)
                if problem is None:
                    break
                self.write(f"  {problem}")  # asked again, as the modal refuses it in place
            if answer.strip():
                form[field.name] = answer.strip()
        return form

    def _guard(self, call: Callable[[], Reply]) -> bool:
        """Run one router call; False when it failed (the exit status remembers it)."""
        try:
            reply = call()
        except Interrupted as exc:
            # Ctrl-C during a wait: the core withdrew the request, or kept an uncertain send with its key.
            self.write("^C")
            self.show_reply(exc.reply)
            self.all_ok = False
            self.interrupted = True
            return False
        except KeyboardInterrupt:
            if not self.interactive:
                raise
            # Ctrl-C outside a wait: whatever was stored before a send is finished by its key (R0.3).
            self.write("^C: interrupted. `/recover pending` and `/recover history <session>` show where it stopped.")
            self.all_ok = False
            return False
        except RecoverError as exc:
            self.fail(redact(str(exc)))
            return False
        except Exception:
            self.fail("internal error (details below); check `/recover history <session_id>` before retrying")
            self.write(redact(traceback.format_exc()))
            return False
        self.show_reply(reply)
        self._run_deferred(reply)
        return reply.ok

    def _run_deferred(self, reply: Reply) -> None:
        """Work the command left to report later (diagnose's follow-up): it prints before the next
        prompt, so in stdin mode the command is done only once its follow-up is."""
        for work in reply.deferred:
            try:
                work()
            except KeyboardInterrupt:
                self.write("(follow-up not awaited: interrupted)")
                return
            except Exception:  # noqa: BLE001 - shown, the console goes on
                self.fail("a follow-up failed (details below)")
                self.write(redact(traceback.format_exc()))


def _key(message: Message) -> tuple[str, str | None, str]:
    return (message.kind, message.ref, message.marked_text())


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def run_console(
    router: RouterProtocol,
    *,
    users: Sequence[str] = DEMO_USERS,
    allow_switch_user: bool = False,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    channel: str | None = CONSOLE_CHANNEL,
    sandbox: Any = None,
    history: Path | None = None,
    files: Path | None = None,
    incident: int | None = None,
    demo: DemoParts | None = None,
) -> int:
    """Read commands (a terminal or, one a line, standard input); 0 when every command succeeded.

    ``sandbox`` (the demo's embedded sandbox handle) enables ``:pass`` and ``:advance``. ``files``:
    the folder each long text a reply names is written to (without it, the reply names the
    ``details`` command that shows it). ``incident``: the demo starts with ``:incident <count>``.
    ``demo``: the demo's composed watcher and ladder (see :func:`bot.console.compose_demo`).
    """
    console = _Console(
        router,
        users,
        allow_switch_user,
        stdin or sys.stdin,
        stdout or sys.stdout,
        channel,
        sandbox,
        history,
        files,
        incident,
        demo,
    )
    try:
        return console.run()
    except KeyboardInterrupt:
        console.write("^C")
        console.withdraw_on_interrupt()
        return INTERRUPTED
    finally:
        if console.editor is not None:
            console.editor.save()
