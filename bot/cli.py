"""The ``recover-bot`` command: a thin front over the library. Every subcommand's help has an example.

Each subcommand names the groups of settings it reads (``uses``) and those that must be complete
(``requires``), so one run reports every problem of what it needs and nothing of what it does not.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from bot import __version__
from bot.errors import RecoverError, SettingsError
from bot.logsetup import configure_logging
from bot.redact import redact
from bot.runbook.suggest import closest
from bot.settings import ALL_GROUPS, Settings, load_settings

if TYPE_CHECKING:
    from sqlite_utils.migrations import Migrations

Handler = Callable[[argparse.Namespace, Settings], int]

# Status 1 (findings) comes from subcommands below this module (runbook check, audit verify, the
# console), which may not import it; EXIT_CODES documents it with the rest.
EXIT_OK = 0
EXIT_USAGE = 2  # a usage error or a setting to fix (one line per problem)
EXIT_UNEXPECTED = 70  # EX_SOFTWARE: a bug, reported in one line
EXIT_INTERRUPTED = 130

EXIT_CODES = """\
Exit status:
  0   ok
  1   findings: tampering found, an invalid runbook; for console and demo, a command refused or failed
  2   usage or settings: one line per problem, naming what to fix
  3   audit verify: no damage found, but nothing authenticated (an unkeyed store, or no key given)
  70  unexpected error (a bug: rerun with RECOVER_LOG_LEVEL=DEBUG for the traceback)
  130 interrupted (Ctrl-C)"""

#: ``recover-bot sandbox``'s key when none is chosen: documented, so the banner prints it.
SANDBOX_API_KEY = "sandbox-key"

# What each front end reads. Settings outside these groups are neither read nor checked.
CORE = ("store", "audit", "people", "docker", "runbooks", "logging")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (argparse's usage block is what ``--help`` is for); exit 2. A mistyped
    subcommand gets the chat's own did-you-mean (bot.runbook.suggest.closest)."""

    def error(self, message: str) -> NoReturn:
        typo = re.match(r"argument [^:]+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if typo:
            choices = re.findall(r"'([^']*)'", typo.group(2))
            near = closest(typo.group(1), choices)
            hint = f"did you mean `{self.prog} {near}`?" if near else f"one of: {', '.join(choices)}"
            self.exit(EXIT_USAGE, f"{self.prog}: no command {typo.group(1)!r}: {hint} (see {self.prog} --help)\n")
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def port_number(text: str) -> int:
    """``--port``: 0 to 65535, 0 = any free port."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: use a number from 0 to 65535 (0 = any free port)")
    return port


def set_settings(parser: argparse.ArgumentParser, *, uses: Iterable[str] = (), requires: Iterable[str] = ()) -> None:
    """Declare the settings groups a subcommand reads and those it cannot run without."""
    parser.set_defaults(settings_uses=frozenset(uses) | frozenset(requires), settings_requires=frozenset(requires))


def _add(
    sub: argparse._SubParsersAction[_Parser],
    name: str,
    *,
    help: str,
    example: str,
    handler: Handler,
    uses: Iterable[str] = (),
    requires: Iterable[str] = (),
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=help, epilog=f"Example:\n  {example}", formatter_class=_Formatter
    )
    parser.set_defaults(handler=handler)
    set_settings(parser, uses=uses, requires=requires)
    return parser


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from bot.console import DEMO_USERS, run_demo

    users = DEMO_USERS
    if args.user:
        if args.user not in DEMO_USERS:
            raise RecoverError(f"--user: choose one of {', '.join(DEMO_USERS)} (the demo's users)")
        users = (args.user, *(u for u in DEMO_USERS if u != args.user))
    if args.incident is not None and not 1 <= args.incident <= 20_000:
        raise RecoverError("--incident takes 1 to 20000 sessions, e.g. --incident 60")
    if args.incident is not None and args.installations:
        raise RecoverError("--incident goes with one installation's demo, not --installations")
    return run_demo(settings, users=users, installations=tuple(args.installations or ()), incident=args.incident)


def _console(args: argparse.Namespace, settings: Settings) -> int:
    from bot.console import run_real_console
    from bot.startup import check_reachable

    if args.user is not None:
        raise RecoverError("--user exists only in `recover-bot demo`: the console acts as the account running it")
    # Never a silent fallback to the sandbox: without a control host this is an error (use `demo`).
    settings.require_control_host()
    # Unreachable is one line now; only a connection is opened, nothing is sent (the sandbox's request
    # log, like a real host's, sees no request until the person types one).
    if settings.control_host_url:  # an installations file is checked when the core is built
        check_reachable(str(settings.control_host_url))
    return run_real_console(settings, install=args.install)


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from bot.slack import serve

    return serve(settings)


def _sandbox(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from bot.errors import StartupError
    from bot.sandbox import serve_forever
    from bot.startup import is_listen_error, listen_error

    if args.incident is not None and not 1 <= args.incident <= 20_000:
        print("recover-bot sandbox: --incident takes 1 to 20000 sessions, e.g. --incident 1000", file=sys.stderr)
        return EXIT_USAGE
    if args.scenarios != "builtin" and not Path(args.scenarios).is_dir():
        raise StartupError(f"--scenarios: {args.scenarios} is not a directory of scenario YAML files")
    if args.write_installations and not args.installations:
        raise RecoverError("--write-installations needs --installations, e.g. --installations eu-1,us-1")
    stop_every = None
    if args.stop_every is not None:
        from bot.runbook.values import parse_duration

        try:
            stop_every = parse_duration(args.stop_every)
        except ValueError as exc:
            print(f"recover-bot sandbox: --stop-every: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.installations:
            print(
                "recover-bot sandbox: --stop-every runs with one control host, not with --installations",
                file=sys.stderr,
            )
            return EXIT_USAGE
    options: dict[str, Any] = {
        "api_key": args.api_key, "scenarios": args.scenarios, "incident": args.incident,
        "outage_seconds": args.outage_seconds,
    }  # fmt: skip
    try:
        if args.installations:
            return _sandbox_installations(args, options)
        serve_forever(args.host, args.port, stop_every=stop_every, show_key=args.api_key == SANDBOX_API_KEY, **options)
    except OSError as exc:
        if not is_listen_error(exc):
            raise
        raise listen_error(args.host, args.port, exc, host_name="--host", port_name="--port") from None
    return EXIT_OK


def _key_shown(api_key: str) -> str:
    """The sandbox's key as its banner says it: the documented default itself, a chosen one never."""
    return api_key if api_key == SANDBOX_API_KEY else "<the --api-key value>"


def installation_names(text: str) -> list[str]:
    """``--installations eu-1,us-1``: names as an installations file takes them, each once."""
    from bot.ids import NAME_PATTERN

    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if not NAME_PATTERN.match(n)]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: name each installation once, lower-case letters, digits and '-', e.g. eu-1,us-1"
        )
    return names


def _sandbox_installations(args: argparse.Namespace, options: dict[str, Any]) -> int:
    from bot.installations.render import env_name, installations_yaml, write_installations
    from bot.sandbox import SandboxSet, installation_key, serve_installations_forever

    def announce(hosts: SandboxSet) -> None:
        urls = {name: handle.url for name, handle in hosts.items()}
        if args.write_installations:
            keys = {name: installation_key(args.api_key, name) for name in hosts}
            path = Path(args.write_installations).resolve()
            write_installations(path, urls, keys)
            print(
                f"  installations file: {path} (keys beside it, ignored by git through {path.parent / '.gitignore'}); "
                f"RECOVER_INSTALLATIONS_FILE={path}",
                flush=True,
            )
            return
        print(
            f"  each installation's key is {_key_shown(args.api_key)}-<name>; an installations file for them:",
            flush=True,
        )
        print(installations_yaml(urls, {n: ("api_key_env", env_name(n)) for n in urls}), end="", flush=True)

    serve_installations_forever(args.installations, args.host, args.port, announce=announce, **options)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="recover-bot",
        description="Recover stuck control-host sessions from Slack or a terminal, safely and together.",
        epilog="Example:\n  recover-bot demo        # the sandbox control host and the terminal console\n\n"
        + EXIT_CODES,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"recover-bot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    demo = _add(
        sub,
        "demo",
        help="Start the sandbox control host with its scenarios and the terminal console (no Slack needed).",
        example="recover-bot demo",
        handler=_demo,
        uses=CORE,
    )
    demo.add_argument("--user", default=None, help="the demo user to start as (alice or bob; `:as` switches)")
    demo.add_argument(
        "--installations", type=installation_names, default=None, metavar="NAMES",
        help="a sandbox control host per installation, the same session ids on each, e.g. eu-1,us-1",
    )  # fmt: skip
    demo.add_argument(
        "--incident", type=int, default=None, metavar="N",
        help="start with a mass incident: a checkpoint-store outage stops N sessions, watch posts the storm",
    )  # fmt: skip
    console = _add(
        sub,
        "console",
        help="Type /recover commands in a terminal against the configured control host.",
        example="CONTROL_HOST_URL=https://control.example.internal CONTROL_HOST_API_KEY=… recover-bot console",
        handler=_console,
        uses=CORE,
        requires=("control_host",),
    )
    # Not an option: the console acts as the account running it (behind sudo, the invoking user).
    console.add_argument("--user", default=None, help=argparse.SUPPRESS)
    console.add_argument(
        "--install", default=None, metavar="NAME",
        help="with several installations: the one commands act on when they name none (--install in a command "
        "still chooses another)",
    )  # fmt: skip
    _add(
        sub,
        "serve",
        help="Run the Slack app (Socket Mode when SLACK_APP_TOKEN is set, otherwise HTTP on HOST:PORT).",
        example="SLACK_BOT_TOKEN=xoxb-… SLACK_SIGNING_SECRET=… recover-bot serve",
        handler=_serve,
        uses=ALL_GROUPS,
        # "audit": a key, or RECOVER_AUDIT_KEY=none on purpose (an unkeyed chain catches accidents only).
        requires=("control_host", "slack", "audit"),
    )
    sandbox = _add(
        sub,
        "sandbox",
        help="Run only the sandbox control host (for trying the bot or the console against it).",
        example="recover-bot sandbox --port 8700",
        handler=_sandbox,
        uses=("logging",),
    )
    sandbox.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    sandbox.add_argument(
        "--port", type=port_number, default=8700, help="0 = any free port (printed; default: %(default)s)"
    )
    sandbox.add_argument(
        "--api-key", default=SANDBOX_API_KEY, help="the key the sandbox accepts (default: %(default)s)"
    )
    sandbox.add_argument("--scenarios", default="builtin", help="a directory of scenario YAML files")
    sandbox.add_argument(
        "--incident", type=int, default=None, metavar="N", help="also a mass incident of N stuck sessions"
    )
    sandbox.add_argument(
        "--outage-seconds",
        type=float,
        default=600.0,
        help="when the incident's outage ends, in seconds from the start (default: %(default)g)",
    )
    sandbox.add_argument(
        "--installations", type=installation_names, default=None, metavar="NAMES",
        help="several control hosts with the same session ids, e.g. eu-1,us-1 (ports from --port on)",
    )  # fmt: skip
    sandbox.add_argument(
        "--write-installations", default=None, metavar="FILE", help="write their installations file (keys beside it)"
    )
    sandbox.add_argument(
        "--stop-every",
        default=None,
        metavar="DURATION",
        help="stop the next session in turn this often (30s, 2m), settling it when it still is: watch mode's demo",
    )

    from bot.decisions import check_request_table
    from bot.installations.cli import register as register_installations
    from bot.installations.hosts import installation_host
    from bot.runbook.cli import register as register_runbook
    from bot.store.cli import register as register_audit
    from bot.store.cli import register_backup, register_browse

    register_runbook(sub)
    register_installations(sub)
    # `audit verify` also checks the decision requests against the chain, and `audit rebind` binds to
    # the host the bot serves the installation from: the command passes both, so the store package
    # imports neither the decisions nor the installations above it.
    register_audit(sub, checks=[check_request_table], host_of=installation_host)
    register_backup(sub, companions=[_inbox_of])
    register_browse(sub, migrations=_store_migrations)
    return parser


def _store_migrations() -> tuple[Migrations, ...]:
    """The core areas' migration sets (imported late: only `browse` on PostgreSQL needs them)."""
    from bot.app.services import MIGRATIONS

    return MIGRATIONS


def _inbox_of(store: Path) -> Path:
    """The Slack inbox beside a store (imported late: `backup` should not load the Slack front)."""
    from bot.slack.inbox import inbox_path

    return inbox_path(store)


def _report_unexpected(exc: BaseException, debug: bool) -> None:
    if debug:
        print(redact("".join(traceback.format_exception(exc))), file=sys.stderr)
    print(
        f"recover-bot: unexpected error ({type(exc).__name__}: "
        f"{redact(str(exc)).splitlines()[0] if str(exc) else ''}); "
        "this is a bug — rerun with RECOVER_LOG_LEVEL=DEBUG for the traceback",
        file=sys.stderr,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else list(argv)):  # bare `recover-bot`: what it can do, not an error
        parser.print_help()
        return 0
    args = parser.parse_args(argv)  # a usage error exits 2 with argparse's one-line message
    settings: Settings | None = None
    try:
        settings = load_settings(
            uses=getattr(args, "settings_uses", frozenset()), requires=getattr(args, "settings_requires", ())
        )
        configure_logging(settings.log_level)
        handler: Handler = args.handler
        return handler(args, settings)
    except SettingsError as exc:
        print(f"recover-bot {args.command}: fix these settings (environment or .env):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {redact(problem)}", file=sys.stderr)
        return EXIT_USAGE
    except RecoverError as exc:
        print(redact(str(exc)), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        _report_unexpected(exc, debug=settings is not None and settings.log_level == "DEBUG")
        return EXIT_UNEXPECTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
