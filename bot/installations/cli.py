"""``recover-bot installations check FILE``: the installations file validated, then each host reached once.

Before a deploy, this shows every problem of an edit as ``FILE:LINE: what is wrong`` (exit 1) and, for a
valid file, whether each control host answers with its key: one cheap read (the first page of the
sessions listing, one session), one line per installation. A key is never printed; an error that
quotes one is masked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO, TypeVar

from bot.controlhost import ControlHostClient, RetryPolicy
from bot.errors import RecoverError
from bot.installations.loader import check_installations
from bot.installations.spec import InstallationSpec
from bot.redact import redact
from bot.store import Store

_EXAMPLE = """\
example:
  recover-bot installations check /etc/recover-bot/installations.yaml
  recover-bot installations check            # the file RECOVER_INSTALLATIONS_FILE names

Exit status: 0 valid and every host answered, 1 a problem (one `FILE:LINE: what is wrong` per line,
or one `NAME: error` line per installation that did not answer)."""

#: One send, no retry: a check must say what the host does now, not wait out its backoff.
_ONCE = RetryPolicy(attempts=1)


def reach(spec: InstallationSpec, store: Store, *, timeout: float = 10.0) -> str | None:
    """None when the installation's control host answers a read with its key, else the error (one line)."""
    assert spec.control_host_url is not None and spec.api_key is not None
    client = ControlHostClient(
        spec.control_host_url, spec.api_key.get_secret_value(), store=store, retry=_ONCE, timeout=timeout
    )
    try:
        client.list_sessions_needing_operator(limit=1)
    except RecoverError as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # The client speaks of the single-installation setting; here the key came from the entry.
        return redact(text.replace("CONTROL_HOST_API_KEY", "the installation's key (api_key_file or api_key_env)"))
    finally:
        client.close()
    return None


def check(
    path: str,
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    timeout: float = 10.0,
    recover_channels: Sequence[str] = (),
) -> int:
    """Validate the file (every problem, exit 1), then reach each host once (exit 1 if one fails).
    ``recover_channels``: RECOVER_CHANNELS, which the file's channels must lie within (as at start)."""
    out = out or sys.stdout
    err = err or sys.stderr
    specs, problems = check_installations(Path(path), recover_channels)
    if problems:
        for problem in problems:
            print(redact(problem), file=err)
        print(f"{len(problems)} problem(s) found", file=err)
        return 1
    failed = 0
    # The client keeps idempotency records in a store; a read writes none, so a throwaway one does.
    with tempfile.TemporaryDirectory(prefix="recover-check-") as folder:
        store = Store(Path(folder) / "check.db")
        for spec in specs:
            error = reach(spec, store, timeout=timeout)
            if error is None:
                print(f"{spec.name}: ok, {spec.control_host_url} answered", file=out)
            else:
                failed += 1
                print(f"{spec.name}: {error}", file=out)
    print(
        f"{len(specs)} installation(s) in {path}: "
        + ("every control host answered" if not failed else f"{failed} did not answer"),
        file=out,
    )
    return 1 if failed else 0


def _handler(args: argparse.Namespace, settings: object = None) -> int:
    if args.file:
        return check(str(args.file))
    # No file named: the one the bot would load. Only this case reads a setting.
    from bot.settings import load_settings

    settings = load_settings(uses=("control_host", "people"))  # RECOVER_CHANNELS is of "people"
    path = settings.installations_file
    if path is None:
        print("recover-bot installations check: name a FILE, or set RECOVER_INSTALLATIONS_FILE", file=sys.stderr)
        return 2
    return check(str(path), recover_channels=settings.channels)  # judged as the bot judges it at start


_P = TypeVar("_P", bound=argparse.ArgumentParser)


def register(subparsers: argparse._SubParsersAction[_P]) -> _P:
    """Add ``installations check FILE`` to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "installations",
        help="check an installations file (several installations from one bot)",
        description="Work with the installations file (RECOVER_INSTALLATIONS_FILE).",
        epilog="example:\n  recover-bot installations check installations.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="installations_command", metavar="{check}")
    sub.required = True
    check_p = sub.add_parser(
        "check",
        help="validate the file (FILE:LINE problems), then reach each control host once",
        description="Validate an installations file, then read once from each installation's control host.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check_p.add_argument(
        "file", nargs="?", metavar="FILE", help="the installations YAML file (default: RECOVER_INSTALLATIONS_FILE)"
    )
    check_p.set_defaults(handler=_handler)
    return parser
