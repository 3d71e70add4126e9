"""The ``recover-bot runbook check FILE…`` command. Wired into bot/cli.py by :func:`register`.

Operators edit runbooks as data; this shows every problem of an edit as ``file:line: what is wrong``
before the bot (which refuses to start with an invalid runbook) ever reads it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO, TypeVar

from bot.errors import RunbookError
from bot.runbook.loader import expand_paths, load_runbooks

_EXAMPLE = """\
example:
  recover-bot runbook check                  # the runbooks the bot loads (RECOVER_RUNBOOKS or the shipped ones)
  recover-bot runbook check runbooks/
  recover-bot runbook check runbooks/session-recovery.yaml runbooks/isolation-upgrade.yaml my-extra.yaml

Files are checked together (a subcommand defined twice across them is an error).
Exit status: 0 valid, 1 problems found (one `file:line: what is wrong` per line)."""


def check(paths: list[str], out: TextIO | None = None, err: TextIO | None = None, *, where: str = "") -> int:
    """Validate runbooks; print a summary (exit 0) or every problem (exit 1)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        runbooks = load_runbooks([Path(p) for p in paths])
    except RunbookError as exc:
        for problem in exc.problems:
            print(problem, file=err)
        print(f"{len(exc.problems)} problem(s) found", file=err)
        return 1
    files = expand_paths([Path(p) for p in paths])
    print(
        f"ok: {len(files)} file(s){where} ({', '.join(runbooks.names)}): {len(runbooks.commands)} subcommand(s), "
        f"{len(runbooks.branches)} branch(es), {len(runbooks.decisions)} decision(s), "
        f"{len(runbooks.limits)} limit(s), {len(runbooks.rules)} rule(s)",
        file=out,
    )
    return 0


def _handler(args: argparse.Namespace, settings: object = None) -> int:
    if args.files:
        return check(list(args.files))
    # No file named: the folder the bot would load. Only this case reads a setting (RECOVER_RUNBOOKS).
    from bot.settings import load_settings

    directory = load_settings(uses=("runbooks",)).runbooks_dir
    return check([str(directory)], where=f" in {directory}")


_P = TypeVar("_P", bound=argparse.ArgumentParser)


def register(subparsers: argparse._SubParsersAction[_P]) -> _P:
    """Add ``runbook check FILE…`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "runbook",
        help="check runbook YAML files",
        description="Work with runbook YAML files.",
        epilog="example:\n  recover-bot runbook check runbooks/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="runbook_command", metavar="{check}")
    sub.required = True
    check_p = sub.add_parser(
        "check",
        help="validate runbooks; print file:line problems",
        description="Validate runbook files (or directories of *.yaml) together, as the bot loads them.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check_p.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="runbook YAML files or directories (default: RECOVER_RUNBOOKS, else the runbooks shipped with the bot)",
    )
    check_p.set_defaults(handler=_handler)
    return parser
