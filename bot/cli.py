"""The ``recover-bot`` command: a thin front over the library. Every subcommand's help has an example."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from bot.errors import RecoverError
from bot.redact import redact
from bot.settings import Settings, load_settings

Handler = Callable[[argparse.Namespace, Settings], int]


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def _add(
    sub: argparse._SubParsersAction,
    name: str,
    *,
    help: str,
    example: str,
    handler: Handler,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=help, epilog=f"Example:\n  {example}", formatter_class=_Formatter
    )
    parser.set_defaults(handler=handler, needs_settings=True)
    return parser


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from bot.console import run_demo

    return run_demo(settings)


def _console(args: argparse.Namespace, settings: Settings) -> int:
    import getpass

    from bot.console import run_console
    from bot.services import build_router

    # Never a silent fallback to the sandbox: without a control host this is an error (use `demo`).
    settings.require_control_host()
    router = build_router(settings)
    # Against a real control host the acting user is fixed (docs/commands.md): `:as` is refused.
    return run_console(router, users=(args.user or getpass.getuser(),), allow_switch_user=False)


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from bot.slack import serve

    settings.require_control_host()
    settings.require_slack()
    return serve(settings)


def _sandbox(args: argparse.Namespace, settings: Settings) -> int:
    from bot.sandbox import serve_forever

    serve_forever(args.host, args.port, api_key=args.api_key, scenarios=args.scenarios)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recover-bot",
        description="Recover stuck control-host sessions from Slack or a terminal, safely and together.",
        epilog="Example:\n  recover-bot demo        # the sandbox control host and the terminal console",
        formatter_class=_Formatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    _add(
        sub,
        "demo",
        help="Start the sandbox control host with its scenarios and the terminal console (no Slack needed).",
        example="recover-bot demo",
        handler=_demo,
    )
    console = _add(
        sub,
        "console",
        help="Type /recover commands in a terminal against the configured control host.",
        example="CONTROL_HOST_URL=https://control.example.internal CONTROL_HOST_API_KEY=… recover-bot console",
        handler=_console,
    )
    console.add_argument(
        "--user", default=None, help="the acting user recorded in every step (default: your login name)"
    )
    _add(
        sub,
        "serve",
        help="Run the Slack app (Socket Mode when SLACK_APP_TOKEN is set, otherwise HTTP on HOST:PORT).",
        example="SLACK_BOT_TOKEN=xoxb-… SLACK_SIGNING_SECRET=… recover-bot serve",
        handler=_serve,
    )
    sandbox = _add(
        sub,
        "sandbox",
        help="Run only the sandbox control host (for trying the bot or the console against it).",
        example="recover-bot sandbox --port 8700",
        handler=_sandbox,
    )
    sandbox.add_argument("--host", default="127.0.0.1")
    sandbox.add_argument("--port", type=int, default=8700, help="0 = any free port (printed)")
    sandbox.add_argument("--api-key", default="sandbox-key", help="the key the sandbox accepts")
    sandbox.add_argument("--scenarios", default="builtin", help="a directory of scenario YAML files")

    from bot.runbook.cli import register as register_runbook
    from bot.store.cli import register as register_audit

    register_runbook(sub)
    register_audit(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        logging.basicConfig(
            level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        # httpx logs every request at INFO: noise in a console, and URLs are all it would add.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        handler: Handler = args.handler
        return handler(args, settings)
    except RecoverError as exc:
        print(redact(str(exc)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
